"""`tunekit.tune`: a tuning job from keyword arguments, validated as a recipe (the library
API for downstream compilers)."""
from __future__ import annotations

from tunekit.recipe.model import Recipe
from tunekit.tuning.progress import TuneProgress
from tunekit.tuning.tuner import TaskState, Tuner


def tune(tasks, target="x86", model="random", explorer="random", *, trials: int | None = None,
         seed: int | None = None, database: str | dict | None = None, progress: bool = False,
         **sections) -> list[TaskState]:
    """Tune `tasks` as a recipe would (library API for downstream compilers).

    Args:
        tasks: Tasks (made with `tunekit.Task(...)`), workload names, or recipe task dicts.
        target, model, explorer: a component name, its Options, or an instance.
        trials, seed: shortcuts for tuning.trials and tuning.seed.
        database: the database path, or the `[database]` section as a dict (path, log).
        progress: show progress bars on stderr.
        sections: any other recipe section as a dict (tuning=..., measure=...).
    Returns:
        one TaskState per task (best trial, trials done, tuner and measuring time).
    """
    tuning = dict(sections.pop("tuning", {}))
    tuning.update({k: v for k, v in (("trials", trials), ("seed", seed)) if v is not None})
    db = dict(database) if isinstance(database, dict) else {} if database is None else {"path": database}
    db = {k: v for k, v in db.items() if v is not None}
    recipe = Recipe.from_dict({"tasks": list(tasks), "target": target, "model": model, "explorer": explorer,
                               "tuning": tuning, "database": db, **sections}, source="tunekit.tune()")
    return Tuner(recipe, TuneProgress() if progress else None).run()
