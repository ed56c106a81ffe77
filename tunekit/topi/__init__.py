"""The frontend-neutral op library (TVM's TOPI): operators as te computations of te tensors (numpy
arrays for constants read by value) and plain parameters, made under the `name` given (names key
tuning records: keep them stable); invalid parameters raise `tunekit.errors.ArgumentError`."""
from . import elementwise, layout, linear, reduce  # noqa: F401
