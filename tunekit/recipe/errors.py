"""Recipe validation errors in recipe words: every problem, one per line, with the
dotted path of its field and, for an unknown key, the valid ones."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError


def error(items: Iterable[tuple[tuple, str, Any]], title: str = "recipe") -> ValidationError:
    """Build a ValidationError from (loc, message, input); pydantic nests it under the caller's loc."""
    return ValidationError.from_exception_data(title, [
        {"type": PydanticCustomError("tunekit", "{message}", {"message": msg}), "loc": loc, "input": inp}
        for loc, msg, inp in items])


def message(err: dict, noun: str, owner: str) -> str:
    """Say one pydantic error in recipe words (ours pass through unchanged)."""
    if err["type"] == "tunekit":
        return err["msg"]
    if err["type"] == "missing" and len(err["loc"]) == 1:
        return f"missing {noun} {err['loc'][0]!r}{owner}"
    msg = "should be a table" if err["type"] in ("model_type", "dict_type") else err["msg"]
    inp = err.get("input")
    if inp is None or isinstance(inp, (str, int, float, bool)):
        msg += f" (got {inp!r})"
    elif err["type"] in ("model_type", "dict_type", "list_type"):
        msg += f" (got {type(inp).__name__})"
    return msg


def check_keys(fields: Mapping, data: Any, validate: Callable, noun: str, owner: str = ""):
    """Validate `data` with `validate`, reporting every unknown key (with the valid
    ones) and every field error together instead of the first one only."""
    if not isinstance(data, Mapping):
        return validate(data)
    known = list(fields) + [f.alias for f in fields.values() if f.alias and f.alias not in fields]
    valid = f"its {noun}s: {', '.join(known)}" if known else f"it has no {noun}s"
    problems = [((k,), f"unknown {noun} {k!r}{owner} ({valid})", v) for k, v in data.items() if k not in known]
    try:
        result = validate({k: v for k, v in data.items() if k in known})
    except ValidationError as e:
        problems += [(tuple(err["loc"]), message(err, noun, owner), err.get("input")) for err in e.errors()]
    if problems:
        raise error(problems)
    return result


def path(loc: Iterable) -> str:
    """('tasks', 1, 'args', 'M') -> 'tasks[1].args.M'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
