"""The recipe layer: one validated description of a whole tuning job (file or dict)."""
from tunekit.recipe.model import Recipe, load_recipe

__all__ = ["Recipe", "load_recipe"]
