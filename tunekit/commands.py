"""The contract of a subcommand: the `Command` a plugin's `tunekit_commands` hook returns,
and `arg`, which describes one of its arguments. The command line (`tunekit.cli`) runs them."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Command:
    """A subcommand: its name, the function running it, one line of help, its arguments.

    Attributes:
        name: the subcommand ("worker").
        run: `fn(args) -> exit code`, given the parsed `argparse.Namespace`; its docstring is the long help.
        help: one line for `tunekit --help`.
        arguments: its arguments, each made with `arg(...)`.
    """
    name: str
    run: Callable[[argparse.Namespace], int]
    help: str
    arguments: list[tuple[tuple, dict]] = field(default_factory=list)


def arg(*flags: str, **kwargs) -> tuple[tuple, dict]:
    """Describe one argument of a subcommand.

    Args:
        flags: the argument's name or flags ("recipe", or "-o", "--output").
        kwargs: the keywords of `ArgumentParser.add_argument` (help, type, default, ...).
    Returns:
        (flags, kwargs), an entry of `Command.arguments`.
    """
    return flags, kwargs
