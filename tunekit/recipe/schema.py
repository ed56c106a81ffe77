"""JSON Schema of recipes for editors, built from the installed plugins."""
from __future__ import annotations

import re

from tunekit.plugin.registry import registry
from tunekit.recipe.components import COMPONENT_SECTIONS
from tunekit.recipe.model import Recipe


def json_schema() -> dict:
    """Return a JSON Schema (draft 2020-12) of recipes for editors, covering the
    installed plugins: target, model and explorer are `oneOf` a name or a table
    per component whose `name` is a const and whose other keys are its Options."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    defs = schema.setdefault("$defs", {})
    reg = registry()
    for section, kind in COMPONENT_SECTIONS.items():
        table = reg.components[kind]
        prop = schema["properties"][section]
        choices = []
        if table:
            choices.append({"type": "string", "enum": list(table), "description": "Shorthand for {name = ...}."})
        for name, entry in table.items():
            prefix = re.sub(r"[^A-Za-z0-9]+", "-", f"{kind}-{name}") + "-"
            opts = entry.obj.Options.model_json_schema(ref_template=f"#/$defs/{prefix}{{model}}")
            defs.update({prefix + k: v for k, v in opts.pop("$defs", {}).items()})
            opts["properties"] = {"name": {"const": name, "description": f"Use the {kind} {name!r} "
                                                                            f"(plugin {entry.plugin})."},
                                  **opts.get("properties", {})}
            opts["required"] = ["name", *opts.get("required", [])]
            opts["title"] = f"{kind} {name}"
            doc = (entry.obj.__doc__ or "").strip().split("\n\n")[0]
            opts.pop("description", None)  # the Options docstring, often tunekit.Options' own
            if doc:
                opts["description"] = " ".join(doc.split())
            opts["additionalProperties"] = False
            choices.append(opts)
        if choices:
            prop["oneOf"] = choices
        else:
            prop["type"] = ["string", "object"]
            prop["description"] += f" (no {kind} is installed)"
    _name_choices(defs["TaskSpec"]["properties"], "op", sorted(reg.ops))
    _name_choices(defs["TaskSpec"]["properties"], "workload", sorted(reg.workloads))
    if reg.workloads:
        schema["properties"]["tasks"]["items"] = {"anyOf": [
            {"$ref": "#/$defs/TaskSpec"},
            {"type": "string", "enum": sorted(reg.workloads), "description": "Shorthand for {workload = ...}."}]}
    return schema


def _name_choices(props: dict, field: str, names: list[str]) -> None:
    """Let an optional string property of the schema take only the installed `names`."""
    if names:
        props[field]["anyOf"] = [{"type": "string", "enum": names}, {"type": "null"}]
