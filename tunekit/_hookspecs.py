"""Deprecated: the hook reference moved to `tunekit.hookspecs` (use `tunekit.hookimpl`)."""
import warnings

from tunekit.hookspecs import *  # noqa: F403
from tunekit.hookspecs import hookimpl, hookspec  # noqa: F401

warnings.warn("tunekit._hookspecs moved to tunekit.hookspecs", DeprecationWarning, stacklevel=2)
