"""What the installed plugins contribute, by kind and name, each contribution
checked against the contract as it is loaded (see `tunekit/hookspecs.py`).

This is the edge where names become objects: component, op, workload and template
names are resolved here and nowhere below (a `tunekit.task.Task` holds its Op and
the templates it may use; `task()` below makes one from names)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from tunekit.component import Component, Options
from tunekit.errors import ArgumentError, PluginError, TunekitError, UnknownComponent
from tunekit.explorers import Explorer
from tunekit.frontends import Frontend
from tunekit.models import CostModel
from tunekit.ops import Op, Template
from tunekit.ops.computed import ComputedOp
from tunekit.ops.op import ANY_OP
from tunekit.plugin.manager import BrokenPlugin, generation, plugins
from tunekit.runners import Runner
from tunekit.targets import Target
from tunekit.task import Task, TaskSpec

KINDS = {"target": "tunekit_targets", "cost model": "tunekit_cost_models", "explorer": "tunekit_explorers",
         "runner": "tunekit_runners", "frontend": "tunekit_frontends"}
BASES = {"target": Target, "cost model": CostModel, "explorer": Explorer, "runner": Runner, "frontend": Frontend}
NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


@dataclass
class Entry:
    obj: object
    plugin: str
    version: str


def component_problem(kind: str, cls) -> str | None:
    """What breaks the contract in component class `cls` of `kind`, or None."""
    base = BASES[kind]
    if not isinstance(cls, type):
        return f"returned a {type(cls).__name__} instance, not a class (return the class itself)"
    if not issubclass(cls, base):
        return f"{cls.__qualname__} is not a subclass of tunekit.{base.__name__}"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not NAME.match(name):
        return f"{cls.__qualname__}.name {name!r} is not a lower-kebab name like 'my-{kind.split()[-1]}'"
    opts = getattr(cls, "Options", None)
    if not (isinstance(opts, type) and issubclass(opts, Options)):
        return f"{kind} {name!r}: Options is not a subclass of tunekit.Options"
    for field, info in opts.model_fields.items():
        if info.is_required():
            return f"{kind} {name!r}: option {field!r} has no default (every option needs one)"
        if not info.description:
            return f"{kind} {name!r}: option {field!r} has no description (Field(..., description=...))"
    return None


class Registry:
    def __init__(self):
        p = plugins()
        self._plugins = p
        self.generation = generation()
        #: (kind, name) -> why the component of that name was refused, and from which plugin
        self.rejected: dict[tuple[str, str], BrokenPlugin] = {}
        self.components: dict[str, dict[str, Entry]] = {}
        for kind, hook in KINDS.items():
            table: dict[str, Entry] = {}
            for plugin, classes in self._lists(hook):
                for cls in classes:
                    why = component_problem(kind, cls)
                    if why is None:
                        self._add(table, kind, cls.name, Entry(cls, plugin, p.version(plugin)))
                    else:
                        self._refuse(plugin, kind, getattr(cls, "name", None), f"{hook}(): {why}")
            self.components[kind] = dict(sorted(table.items()))
        self.ops: dict[str, Entry] = {}
        for plugin, ops in self._lists("tunekit_ops"):
            for op in ops:
                if isinstance(op, Op):
                    self._add(self.ops, "op", op.name, Entry(op, plugin, p.version(plugin)))
                else:
                    self._refuse(plugin, "op", None, f"tunekit_ops() returned a {type(op).__name__}, not a tunekit.Op")
        self.workloads: dict[str, Entry] = {}
        for plugin, wl in p.results("tunekit_workloads"):
            if not isinstance(wl, dict):
                self._refuse(plugin, "workload", None, f"tunekit_workloads() returned a {type(wl).__name__}, "
                             "not a dict of name -> (op name, args)")
                continue
            for name, spec in wl.items():
                self._add(self.workloads, "workload", name, Entry(spec, plugin, p.version(plugin)))
        self.template_entries: list[Entry] = []
        for plugin, ts in self._lists("tunekit_templates"):
            for t in ts:
                if isinstance(t, Template):
                    version = p.version(plugin)
                    t.origin = f"plugin {plugin!r}" + (f", {version}" if version else "")
                    self.template_entries.append(Entry(t, plugin, version))
                else:
                    self._refuse(plugin, "template", None,
                                 f"tunekit_templates() returned a {type(t).__name__}, not a tunekit.Template")
        self.templates = [e.obj for e in self.template_entries]

    def _lists(self, hook: str):
        """(plugin, list) for every implementation of `hook` that returned a list."""
        for plugin, res in self._plugins.results(hook):
            if isinstance(res, (list, tuple)):
                yield plugin, res
            else:
                self._refuse(plugin, hook, None, f"{hook}() returned a {type(res).__name__}, not a list")

    def _refuse(self, plugin: str, kind: str, name, why: str) -> None:
        dist, version = self._plugins.versions.get(plugin, ("?", "?"))
        b = BrokenPlugin(plugin, dist, version, why, "load")
        if b not in self._plugins.broken:   # the registry is rebuilt after every (un)register
            self._plugins.broken.append(b)
        if isinstance(name, str):
            self.rejected[(kind, name)] = b

    @staticmethod
    def _add(table, kind, name, entry):
        if name in table:
            raise PluginError(f"two plugins provide the {kind} {name!r}: {table[name].plugin!r} and "
                              f"{entry.plugin!r}; uninstall one or block it with TUNEKIT_BLOCK_PLUGINS")
        table[name] = entry

    def unknown(self, kind: str, name) -> str:
        """Why no `kind` is called `name`: refused from a broken plugin, or not installed
        (naming the installed ones, and plugins that failed to import and may provide it)."""
        b = self.rejected.get((kind, name))
        if b is not None:
            return f"{kind} {name!r} is provided by plugin {b.name!r} ({b.dist} {b.version}) which is broken: {b.error}"
        table = self.components.get(kind, {})
        msg = f"unknown {kind} {name!r} (installed: {', '.join(table) or 'none'})"
        for b in self._plugins.broken:
            if b.stage == "import":
                msg += f"; plugin {b.name!r} ({b.dist} {b.version}), which may provide it, failed to import: {b.error}"
        return msg

    def component(self, kind: str, name: str):
        table = self.components[kind]
        if name not in table:
            raise UnknownComponent(self.unknown(kind, name))
        return table[name].obj

    def op(self, name: str):
        if name not in self.ops:
            raise UnknownComponent(f"unknown op {name!r} (installed: {', '.join(sorted(self.ops))})")
        return self.ops[name].obj

    def workload(self, name: str) -> tuple[str, dict]:
        if name not in self.workloads:
            raise UnknownComponent(f"unknown workload {name!r} (installed: {', '.join(sorted(self.workloads))})")
        return self.workloads[name].obj

    def templates_of(self, op: str) -> list[Template]:
        """The templates contributed for op `op`, the generic ones (`ANY_OP`) included."""
        return [t for t in self.templates if t.op in (op, ANY_OP)]

    def task(self, op: str | None = None, args: dict | None = None, *, workload: str | None = None,
             template: str | None = None, weight: int = 1) -> Task:
        """Make a Task from names: an op name with args, or a named workload (whose args
        `args` may override); it carries the op's installed templates."""
        if workload is not None:
            op, wargs = self.workload(workload)
            args = {**wargs, **(args or {})}
        if op is None:
            raise TunekitError("a task needs an op (with args) or a workload name")
        return Task(self.op(op), args, template=template, weight=weight, workload=workload,
                    templates=self.templates_of(op))

    def computed_task(self, op: ComputedOp, args: dict | None = None, *, template: str | None = None,
                      weight: int = 1) -> Task:
        """A Task of a computed op, with the generic templates (the only ones that can schedule it)."""
        if op.name in self.ops:
            raise ArgumentError(f"computation name {op.name!r} is the name of an installed op "
                               f"({self.ops[op.name].plugin!r}); records would mix them: choose another name")
        return Task(op, args, template=template, weight=weight, templates=[t for t in self.templates if t.generic])


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The components of the installed plugins (built on first use, and again after plugins change)."""
    global _REGISTRY
    if _REGISTRY is None or _REGISTRY.generation != generation():
        _REGISTRY = Registry()
    return _REGISTRY


def task(op: str | None = None, args: dict | None = None, *, workload: str | None = None,
         template: str | None = None, weight: int = 1) -> Task:
    """Make a `tunekit.task.Task` from names, with the installed plugins' ops and templates.

    Args:
        op: the op's name, e.g. "matmul" (give args too).
        args: its arguments; with a workload, overrides of the workload's.
        workload: a named workload instead, e.g. "resnet18.C6".
        template: the template to use; default: every one that serves the target is tuned,
            and the highest priority one builds when nothing is recorded.
        weight: how many times a network runs it (the scheduler weighs its time by it).
    Returns:
        the Task.
    Raises:
        UnknownComponent: no such op or workload is installed (naming those that are).
        ArgumentError: the args are not the op's.
    """
    return registry().task(op, args, workload=workload, template=template, weight=weight)


def from_compute(fn, args: dict | None = None, *, name: str | None = None, template: str | None = None,
                 weight: int = 1, outputs: int = 1) -> Task:
    """Make a Task of a computation of your own, written with `tunekit.te` (no op to register).

    The task is tuned through the generic templates (`auto`); its workload key is the
    structural hash of the computation, so equal computations share records whatever
    their names. Use it as `tunekit.Task.from_compute(...)`.

    Args:
        fn: called as `fn(**args)`, returns te tensors in kernel parameter order: the
            te.placeholder inputs, then the `outputs` te.compute outputs.
        args: its keyword arguments (JSON scalars: int, float, str, bool, None).
        name: the op's name in task names and records (default: the function's name):
            lower-case letters, digits and underscores, not an installed op's name.
        template: the template to use (default: every generic one that serves the target).
        weight: how many times a network runs it (the scheduler weighs its time by it).
        outputs: how many tensors at the end of what `fn` returns are outputs.
    Returns:
        the Task (`tunekit.task.Task`, its op a `tunekit.ops.computed.ComputedOp`).
    Raises:
        ArgumentError: a bad name, args or outputs.
        TunekitError: `fn` fails, or returns something other than that list of tensors.
    """
    return registry().computed_task(ComputedOp(fn, name, outputs), args, template=template, weight=weight)


task.from_compute = from_compute  # type: ignore[attr-defined]   # tunekit.Task.from_compute(...)


def task_of(spec: TaskSpec) -> Task:
    """The Task that `spec` (plain data sent to another process) describes: an installed
    op by name, or a computed op rebuilt from the computation the spec carries."""
    if spec.computation is not None:
        return registry().computed_task(ComputedOp.from_portable(spec.computation), dict(spec.args),
                                        template=spec.template)
    return registry().task(spec.op, dict(spec.args), template=spec.template)


def entry_of(component: Component) -> Entry | None:
    """The registry entry of a component instance (its class, registered under its name), or None."""
    for table in registry().components.values():
        entry = table.get(getattr(component, "name", None))
        if entry is not None and entry.obj is type(component):
            return entry
    return None


def plugin_of(component: Component) -> str:
    """"plugin 'NAME' (DIST VERSION)" of a component instance, for error messages."""
    entry = entry_of(component)
    if entry is None:
        return f"{type(component).__module__}.{type(component).__qualname__}, not from an installed plugin"
    return f"plugin {entry.plugin!r}" + (f" ({entry.version})" if entry.version else "")


def make_component(kind: str, spec):
    """A component of `kind` from a name, an Options object or an instance."""
    reg = registry()
    if isinstance(spec, str):
        return reg.component(kind, spec)()
    if isinstance(spec, Options):
        for entry in reg.components[kind].values():
            if type(spec) is entry.obj.Options:
                return entry.obj(spec)
        raise TunekitError(f"no installed {kind} takes options of type {type(spec).__name__}")
    return spec
