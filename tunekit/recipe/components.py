"""Recipe fields that name a plugin component: a name, or a table whose `name` picks
the component and whose other keys are its Options (`target`, `model`, `explorer`,
`[measure] runner`)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema
from pydantic_core import PydanticCustomError

from tunekit.component import Component, Options
from tunekit.plugin.registry import BASES, registry
from tunekit.recipe.errors import check_keys

#: recipe section -> component kind in the registry (and `[measure] runner`, a component inside a section)
COMPONENT_SECTIONS = {"target": "target", "model": "cost model", "explorer": "explorer"}
DEFAULTS = {"target": "x86", "model": "random", "explorer": "random", "runner": "local"}

@dataclass
class ComponentSpec:
    """A validated component section: which plugin component, with which Options.

    Attributes:
        kind: "target", "cost model" or "explorer".
        name: the component's name ("x86", "random").
        options: an instance of the component's `Options`.
        cls: the component class (looked up in the registry when not given).
        instance: a ready-made component, when one was given instead of a name.
    """
    kind: str
    name: str
    options: Options
    cls: type | None = None
    instance: Component | None = None

    def __post_init__(self):
        if self.cls is None:
            self.cls = registry().component(self.kind, self.name)

    def create(self) -> Component:
        """Return the component: the given instance, else `cls(options)`."""
        return self.instance if self.instance is not None else self.cls(self.options)

    def available(self) -> str | None:
        """Return None when the component is usable here, else why not."""
        try:
            return self.create().available()   # on the instance: options may decide (arm-cpu's emulate)
        except Exception as e:  # a plugin bug must not hide the rest of the recipe
            return f"available() raised {type(e).__name__}: {e}"

    def to_dict(self) -> dict:
        """Return the section as a recipe table: `name` plus the options."""
        return {"name": self.name, **self.options.model_dump(mode="json")}

    def __str__(self) -> str:
        changed = self.options.model_dump(mode="json", exclude_defaults=True)
        return self.name + (f" ({', '.join(f'{k}={v!r}' for k, v in changed.items())})" if changed else "")


def component_spec(kind: str, default: str, value: Any) -> ComponentSpec:
    """Turn a section value (name, table, Options, instance or spec) into a ComponentSpec."""
    if isinstance(value, ComponentSpec):
        return value
    table = registry().components[kind]
    installed = f"installed: {', '.join(table) or 'none'}"
    if isinstance(value, Component):
        if not isinstance(value, BASES[kind]):
            raise PydanticCustomError("tunekit", "expected a {kind}, got a {t}", {"kind": kind,
                                                                               "t": type(value).__name__})
        return ComponentSpec(kind, value.name, value.options, type(value), value)
    if isinstance(value, Options):
        owners = [n for n, e in table.items() if e.obj.Options is type(value)]
        if len(owners) != 1:
            raise PydanticCustomError("tunekit", "cannot tell which {kind} these {opts} belong to; give a name ({i})",
                                      {"kind": kind, "opts": type(value).__name__, "i": installed})
        return ComponentSpec(kind, owners[0], value)
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, Mapping):
        raise PydanticCustomError("tunekit", "should be a {kind} name or a table with name = ... (got {t})",
                                  {"kind": kind, "t": type(value).__name__})
    name = value.get("name", default)
    if not isinstance(name, str) or name not in table:
        raise PydanticCustomError("tunekit", "{why}", {"why": registry().unknown(kind, name)})
    cls = table[name].obj
    rest = {k: v for k, v in value.items() if k != "name"}
    options = check_keys(cls.Options.model_fields, rest, cls.Options.model_validate, "option", f" for {kind} {name!r}")
    return ComponentSpec(kind, name, options, cls)


def component_field(section: str, description: str):
    """The pydantic type and Field of a recipe field naming a component of `section`'s kind."""
    kind = COMPONENT_SECTIONS.get(section, section)
    spec_type = Annotated[ComponentSpec,
                          BeforeValidator(lambda v: component_spec(kind, DEFAULTS[section], v)),
                          PlainSerializer(lambda s: s.to_dict(), return_type=dict),
                          WithJsonSchema({"description": description})]  # filled in by recipe_schema.json_schema()
    return spec_type, Field(DEFAULTS[section], validate_default=True, description=description)
