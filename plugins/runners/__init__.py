"""Built-in runners beyond the core's `local` one."""
