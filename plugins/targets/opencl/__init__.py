"""OpenCL targets: `opencl` (any OpenCL device) and `mali` (ARM Mali profile), with
the GPU schedule templates. Importing this package does not import pyopencl; the
targets report it missing through `available()`."""
from __future__ import annotations

from tunekit import hookimpl


@hookimpl
def tunekit_targets():
    from .target import MaliTarget, OpenCLTarget
    return [OpenCLTarget, MaliTarget]


@hookimpl
def tunekit_templates():
    from ..gpu_templates import templates
    return templates(("opencl", "mali"))
