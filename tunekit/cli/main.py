"""The `tunekit` command line: parse the arguments, run the subcommand, show errors
without a traceback (`--debug` shows it)."""
from __future__ import annotations

import argparse
import sys
import traceback
import warnings

from tunekit.cli import commands as builtin
from tunekit.commands import Command
from tunekit.errors import RecipeError, TunekitError


def all_commands() -> dict[str, Command]:
    """The built-in subcommands, then those that installed plugins add (`tunekit_commands`).
    A plugin's command that is no Command, or takes a name already taken, is left out
    and the plugin listed as broken (`tunekit plugins`)."""
    from tunekit.plugin.manager import BrokenPlugin, plugins
    p = plugins()
    found = dict(builtin.COMMANDS)
    for plugin, cmds in p.results("tunekit_commands"):
        for cmd in cmds if isinstance(cmds, (list, tuple)) else [cmds]:
            why = (f"tunekit_commands() returned a {type(cmd).__name__}, not a tunekit.commands.Command"
                   if not isinstance(cmd, Command) else
                   f"tunekit_commands(): the subcommand {cmd.name!r} exists already" if cmd.name in found else "")
            if why:
                b = BrokenPlugin(plugin, *p.versions.get(plugin, ("?", "?")), why, "load")
                if b not in p.broken:
                    p.broken.append(b)
            else:
                found[cmd.name] = cmd
    return found


def parser(commands: dict[str, Command] | None = None) -> argparse.ArgumentParser:
    """Build the argument parser with `commands` (default: `all_commands()`)."""
    from tunekit._version import __version__
    p = argparse.ArgumentParser(prog="tunekit", description="Learn to optimize tensor programs.")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("--version", action="version", version=f"tunekit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in (all_commands() if commands is None else commands).values():
        sp = sub.add_parser(cmd.name, help=cmd.help, description=cmd.run.__doc__ or cmd.help)
        for flags, kwargs in cmd.arguments:
            sp.add_argument(*flags, **kwargs)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments after the program name (default: `sys.argv[1:]`).
    Returns:
        the exit code: 0 on success, 1 on an error, 2 on a usage error, 130 on Ctrl-C.
    """
    commands = all_commands()
    try:
        args = parser(commands).parse_args(argv)
    except SystemExit as e:  # argparse exits on --help, --version and usage errors
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    shown = warnings.formatwarning
    warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"   # one line, as errors are
    try:
        return commands[args.command].run(args)
    except TunekitError as e:
        if args.debug:
            traceback.print_exc()
        lines = str(e).splitlines() or [type(e).__name__]
        if isinstance(e, RecipeError):  # one problem per line
            print("\n".join(f"error: {line}" for line in lines), file=sys.stderr)
        else:
            print("\n".join([f"error: {lines[0]}", *(f"  {line}" for line in lines[1:])]), file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        if args.debug:
            traceback.print_exc()
        print(str(e) or "interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = shown


if __name__ == "__main__":
    sys.exit(main())
