"""Plugin discovery: entry points of group "tunekit", loaded one at a time so
that a broken plugin is reported and skipped instead of stopping the others."""
from __future__ import annotations

import difflib
import importlib.metadata
import os
import types
from dataclasses import dataclass

import pluggy

from tunekit import hookspecs as _hookspecs
from tunekit._version import __version__

GROUP = "tunekit"
#: the module of the core's own plugins (the op library, the local runner), registered first, always there;
#: loaded by name: the core's plugin sits above this layer
CORE_MODULE = "tunekit.builtin"
_generation = 0


def generation() -> int:
    """A number that changes whenever the set of registered plugins does (what the registry's cache is keyed on)."""
    return _generation


def _changed() -> None:
    global _generation
    _generation += 1


@dataclass
class BrokenPlugin:
    name: str
    dist: str
    version: str
    error: str
    #: "import" (its module failed to import: what it provides is unknown) or "load" (a contribution was refused)
    stage: str = "import"

    def __str__(self) -> str:
        what = "failed to import" if self.stage == "import" else "is broken"
        return f"plugin {self.name!r} ({self.dist} {self.version}) {what}: {self.error}"


class Plugins:
    """The plugin manager plus what failed to load."""

    def __init__(self):
        self.pm = pluggy.PluginManager("tunekit")
        self.pm.add_hookspecs(_hookspecs)
        self.broken: list[BrokenPlugin] = []
        self.versions: dict[str, tuple[str, str]] = {}
        self.entry_point_names: set[str] = set()
        self.modules: dict[str, str] = {}   # plugins registered by hand that are importable modules
        self.core = importlib.import_module(CORE_MODULE).PLUGINS
        for name, plugin in self.core.items():
            self.register(plugin, name, ("tunekit", __version__))
        if os.environ.get("TUNEKIT_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0"):
            return
        blocked = {b.strip() for b in os.environ.get("TUNEKIT_BLOCK_PLUGINS", "").split(",") if b.strip()}
        for ep in importlib.metadata.entry_points(group=GROUP):
            dist = getattr(ep, "dist", None)
            dname, version = (dist.name, dist.version) if dist else ("?", "?")
            if ep.name in blocked or self.pm.has_plugin(ep.name):
                continue
            try:
                module = ep.load()
                self.register(module, ep.name, (dname, version))
                self.entry_point_names.add(ep.name)
                self.modules.pop(ep.name, None)
            except Exception as e:  # a broken plugin must not stop the others
                self.broken.append(BrokenPlugin(ep.name, dname, version, f"{type(e).__name__}: {e}"))

    def register(self, plugin, name: str, version: tuple[str, str] = ("", "")) -> None:
        """Register `plugin` under `name`; each hook it implements that no hookspec defines
        (a misspelled name) marks it broken, naming the nearest hook."""
        self.pm.register(plugin, name=name)
        self.versions[name] = version
        hooks = [h for h in vars(_hookspecs) if h.startswith("tunekit_")]
        for hook in self._unknown_hooks(plugin):
            near = difflib.get_close_matches(hook, hooks, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"the hooks are {', '.join(hooks)}"
            self.broken.append(BrokenPlugin(name, *version, f"unknown hook {hook!r} ({hint})", "load"))
        # a spawned worker re-imports hand-registered modules by name: only real, importable ones
        if isinstance(plugin, types.ModuleType) and name not in self.core and getattr(plugin, "__spec__", None):
            self.modules[name] = plugin.__name__
        _changed()

    def _unknown_hooks(self, plugin) -> list[str]:
        """The hooks that registered `plugin` implements but no hookspec defines (optional ones left out)."""
        return sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or []
                      if not caller.has_spec() and any(not i.optionalhook for i in caller.get_hookimpls()
                                                       if i.plugin is plugin))

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self.versions.pop(name, None)
        self.modules.pop(name, None)
        self.broken = [b for b in self.broken if b.name != name]
        _changed()

    def version(self, name: str) -> str:
        """"DIST VERSION" of a registered plugin ("" when registered by hand)."""
        return " ".join(self.versions.get(name, ("", ""))).strip()

    def importable(self, name: str) -> bool:
        """Whether a spawned worker can load plugin `name` too (entry point or module)."""
        return name in self.entry_point_names or name in self.modules

    def results(self, hook: str):
        """Yield (plugin name, result) for every implementation of a discovery hook."""
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            try:
                res = impl.function()
            except Exception as e:
                dist, version = self.versions.get(impl.plugin_name, ("?", "?"))
                b = BrokenPlugin(impl.plugin_name, dist, version, f"{hook}() raised {type(e).__name__}: {e}", "load")
                if b not in self.broken:   # the registry is rebuilt after every (un)register
                    self.broken.append(b)
                continue
            if res is not None:
                yield impl.plugin_name, res


_PLUGINS: Plugins | None = None


def plugins() -> Plugins:
    """The process-wide plugin manager (created, and entry points loaded, on first use)."""
    global _PLUGINS
    if _PLUGINS is None:
        _PLUGINS = Plugins()
    return _PLUGINS


def register(plugin, name: str, version: tuple[str, str] = ("", "")) -> None:
    """Register a plugin (a module or object with `@tunekit.hookimpl` functions) under
    `name`, as if it were installed; `version` is (distribution, version) for messages."""
    plugins().register(plugin, name, version)


def unregister(name: str) -> None:
    """Remove the plugin registered under `name`."""
    plugins().unregister(name)


def reload() -> None:
    """Forget every plugin and discover them again (after installing one, or in tests)."""
    global _PLUGINS
    _PLUGINS = None
    _changed()
