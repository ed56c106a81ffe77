"""Find the packages: tunekit/ as `tunekit`, plugins/ as `tunekit_plugins` (pyproject.toml
holds everything else; its package-dir maps the second)."""
from setuptools import find_packages, setup

setup(packages=["tunekit", *find_packages(include=["tunekit.*"]),
                "tunekit_plugins", *(f"tunekit_plugins.{p}" for p in find_packages("plugins"))])
