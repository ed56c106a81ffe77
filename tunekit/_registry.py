"""What the installed plugins contribute, by kind and name."""
from __future__ import annotations

from dataclasses import dataclass

from ._plugins import plugins
from .errors import PluginError, UnknownComponent

KINDS = {"target": "tunekit_targets", "cost model": "tunekit_cost_models", "explorer": "tunekit_explorers"}


@dataclass
class Entry:
    obj: object
    plugin: str
    version: str


class Registry:
    def __init__(self):
        p = plugins()
        self.components: dict[str, dict[str, Entry]] = {}
        for kind, hook in KINDS.items():
            table: dict[str, Entry] = {}
            for plugin, classes in p.results(hook):
                for cls in classes:
                    self._add(table, kind, cls.name, Entry(cls, plugin, p.version(plugin)))
            self.components[kind] = dict(sorted(table.items()))
        self.ops: dict[str, Entry] = {}
        for plugin, ops in p.results("tunekit_ops"):
            for op in ops:
                self._add(self.ops, "op", op.name, Entry(op, plugin, p.version(plugin)))
        self.workloads: dict[str, Entry] = {}
        for plugin, wl in p.results("tunekit_workloads"):
            for name, spec in wl.items():
                self._add(self.workloads, "workload", name, Entry(spec, plugin, p.version(plugin)))
        self.templates = [t for _, ts in p.results("tunekit_templates") for t in ts]

    @staticmethod
    def _add(table, kind, name, entry):
        if name in table:
            raise PluginError(f"two plugins provide the {kind} {name!r}: {table[name].plugin!r} and "
                              f"{entry.plugin!r}; uninstall one or block it with TUNEKIT_BLOCK_PLUGINS")
        table[name] = entry

    def component(self, kind: str, name: str):
        table = self.components[kind]
        if name not in table:
            raise UnknownComponent(f"unknown {kind} {name!r} (installed: {', '.join(table) or 'none'})")
        return table[name].obj

    def op(self, name: str):
        if name not in self.ops:
            raise UnknownComponent(f"unknown op {name!r} (installed: {', '.join(sorted(self.ops))})")
        return self.ops[name].obj

    def workload(self, name: str) -> tuple[str, dict]:
        if name not in self.workloads:
            raise UnknownComponent(f"unknown workload {name!r} (installed: {', '.join(sorted(self.workloads))})")
        return self.workloads[name].obj


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The components of the installed plugins (built on first use)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry()
    return _REGISTRY


def reset() -> None:
    global _REGISTRY
    _REGISTRY = None
