"""Shared fixtures: the test kit's fixtures and the fake third-party plugins."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import tunekit.plugin.manager

pytest_plugins = ["tunekit.testing.fixtures"]

THIRDPARTY = Path(__file__).parent / "thirdparty"
sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))   # examples/computations.py
# dup is installed apart: while it is on sys.path the registry refuses to build
GROUPS = {"main": ["tunekit-fake-plugin", "tunekit-broken-plugin"], "dup": ["tunekit-dup-plugin"]}


@pytest.fixture(scope="session")
def thirdparty_dirs(tmp_path_factory) -> dict[str, Path]:
    """Install the fake plugin distributions (one pip process per group, in
    parallel) into temporary folders; returns group -> folder. Nothing is
    importable until `activate_thirdparty` puts a folder on sys.path."""
    root = tmp_path_factory.mktemp("thirdparty")
    procs = {}
    for group, dists in GROUPS.items():
        # build from copies: setuptools writes build/ and egg-info into the source tree
        srcs = [shutil.copytree(THIRDPARTY / d, root / "src" / d) for d in dists]
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
               "--no-index", "--disable-pip-version-check", "--target", str(root / group), *map(str, srcs)]
        procs[group] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for group, p in procs.items():
        out = p.communicate()[0]
        if p.returncode:
            pytest.fail(f"pip could not install {GROUPS[group]} (building them needs setuptools>=70.1 "
                        f"or the wheel package):\n{out[-3000:]}")
    return {group: root / group for group in GROUPS}


def _activate(folder: Path):
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    tunekit.reload_plugins()
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for mod in [m for m in sys.modules if m.startswith(("tunekit_fake_plugin", "tunekit_dup_plugin"))]:
            del sys.modules[mod]
        importlib.invalidate_caches()
        tunekit.reload_plugins()


@pytest.fixture(scope="module")
def fake_plugins(thirdparty_dirs):
    """Make tunekit-fake-plugin and tunekit-broken-plugin installed for one test module."""
    yield from _activate(thirdparty_dirs["main"])


@pytest.fixture
def dup_plugin(thirdparty_dirs):
    """Make tunekit-dup-plugin (a second cost model "random") installed for one test."""
    yield from _activate(thirdparty_dirs["dup"])


@pytest.fixture
def fresh_plugins():
    """Rediscover plugins before and after the test (for tests changing the environment)."""
    tunekit.reload_plugins()
    yield
    tunekit.reload_plugins()


@pytest.fixture
def fake(monkeypatch):
    """Only the built-in op library plus the fake components of tests/fakes.py, for one test."""
    from fakes import FAKE
    monkeypatch.setenv("TUNEKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    tunekit.reload_plugins()
    tunekit.register_plugin(FAKE, "fake")
    yield FAKE
    tunekit.reload_plugins()  # the env var is restored after this, so the next use autoloads again


def require(module: str, why: str = "") -> ModuleType:
    """Import and return `module`, an optional dependency of the README's claimed networks (torch,
    transformers, onnxscript, onnxruntime, onnx): in place of pytest.importorskip, also at module level.
    A missing module skips outside CI, but fails the test under CI=true (as .ci/run runs), so that CI
    cannot pass the claims by skipping them. A module that is installed but fails to import is an error."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and not f"{module}.".startswith(f"{e.name}."):
            raise                           # installed, but something it imports is missing
        missing = e                         # skip or fail outside the except: no "during handling" chain
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip(f"could not import {module!r}: {missing}", allow_module_level=True)
    pytest.fail(f"{module} is not installed ({missing}); CI must run the network tests{f' ({why})' if why else ''}: "
                f'.ci/run must install it (pip install -e ".[dev,networks]")', pytrace=False)
