"""A plugin that cannot be imported here (test fixture for tunekit's loader)."""
raise ImportError("needs libfoo")
