"""x86 and arm-cpu targets on llvmlite (LLVM code generation, O3, MCJIT loading).

Importing this package does not import llvmlite; the targets report it missing
through `available()`.
"""
from __future__ import annotations

from tunekit import hookimpl


@hookimpl
def tunekit_targets():
    from .cpu import ArmCpuTarget, X86Target
    return [X86Target, ArmCpuTarget]


@hookimpl
def tunekit_templates():
    from .templates import TEMPLATES
    return TEMPLATES
