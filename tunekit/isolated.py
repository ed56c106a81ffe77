"""Deprecated: the isolated measuring process moved to `tunekit.measure.isolated`."""
import warnings

from tunekit.measure.isolated import IsolatedProcess, device_lost  # noqa: F401

warnings.warn("tunekit.isolated moved to tunekit.measure.isolated", DeprecationWarning, stacklevel=2)
