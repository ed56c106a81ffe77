"""Every error tunekit raises on purpose derives from `TunekitError`; its message says
what failed, on which thing, why, and what to do next."""


class TunekitError(Exception):
    """Base of tunekit's errors."""


class PluginError(TunekitError):
    """A plugin could not be loaded, or two plugins clash."""


class RecipeError(TunekitError):
    """A recipe file or dict is invalid; the message lists each bad field."""


class ScheduleError(TunekitError):
    """A schedule primitive was misused."""


class SpaceError(TunekitError):
    """A config space or config index is invalid."""


class BuildError(TunekitError):
    """Code generation or compilation failed."""


class UnknownComponent(TunekitError):
    """No installed plugin provides the named component."""


class TemplateError(TunekitError):
    """No schedule template serves a task, or one failed to define its config space."""


class ArgumentError(TunekitError):
    """An op's arguments, or the arrays given to a built kernel, are invalid."""


class StorageError(TunekitError):
    """The database or log cannot be opened, read or written (the message says why and the way out)."""


class ModelError(TunekitError):
    """A model file cannot be read or holds what tunekit cannot run (the message names the node)."""


class Interrupted(KeyboardInterrupt):
    """A tuning run stopped by Ctrl-C or SIGTERM; the message says how many trials
    were saved. A KeyboardInterrupt (not a TunekitError), so callers' Ctrl-C handling holds."""
