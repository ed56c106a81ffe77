"""The `cuda` target (PTX from nvcc or NVRTC; pycuda to run) with the GPU schedule
templates. Importing this package imports neither pycuda nor a CUDA library; the
target reports what is missing through `available()`."""
from __future__ import annotations

from tunekit import hookimpl


@hookimpl
def tunekit_targets():
    from .target import CudaTarget
    return [CudaTarget]


@hookimpl
def tunekit_templates():
    from ..gpu_templates import templates
    return templates(("cuda",))
