"""Built-in frontends: readers of model files."""
