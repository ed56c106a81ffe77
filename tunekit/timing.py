"""Deprecated: checking and timing one artifact moved to `tunekit.measure.timing`."""
import warnings

from tunekit.measure.timing import execute, spread, timing_lock  # noqa: F401

warnings.warn("tunekit.timing moved to tunekit.measure.timing", DeprecationWarning, stacklevel=2)
