"""x86 and arm-cpu targets on llvmlite."""
