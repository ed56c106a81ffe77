"""What every plugin component (target, cost model, explorer) shares."""
from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class Options(BaseModel):
    """Base of a component's settings. Subclass it as the nested `Options` class of
    a component; every field needs a default and a `description`. Unknown keys
    are errors, so a typo in a recipe is reported, not ignored."""

    model_config = ConfigDict(extra="forbid")


class Component:
    """Base of Target, CostModel and Explorer."""

    #: Stable lower-kebab name used in recipes ("x86", "xgboost", "annealing").
    name: ClassVar[str]
    #: The component's settings; override with a nested subclass of `tunekit.Options`.
    Options: ClassVar[type[Options]] = Options

    def __init__(self, options: Options | None = None):
        """Create the component from its validated `Options` (defaults if None)."""
        self.options = options if options is not None else self.Options()

    @classmethod
    def available(cls) -> str | None:
        """Say whether the component can be used on this machine.

        Returns:
            None when usable, else a short reason ("pycuda is not installed").
        """
        return None

    def spec(self) -> tuple[str, str]:
        """(name, options JSON): enough to rebuild this component in another process."""
        return self.name, self.options.model_dump_json()
