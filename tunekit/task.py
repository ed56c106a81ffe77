"""A tuning task: one op with concrete arguments, on one target, through one template."""
from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache, cached_property

import numpy as np

from tunekit import te
from tunekit.errors import ArgumentError, SpaceError, TemplateError, TunekitError
from tunekit.features import PROGRAM_KINDS, extract
from tunekit.models import Candidate
from tunekit.ops.op import ANY_OP, Op, Template
from tunekit.records import Trial
from tunekit.space import ConfigEntity, ConfigSpace
from tunekit.targets import source_hash

_PARALLEL_MIN = 16   # fewer configs to lower than this: extract them here, not in workers


class Task:
    """An op object and its arguments, with the templates that may schedule it.

    Names are resolved at the edge: `tunekit.Task("matmul", dict(M=..., N=..., K=...))`
    or `tunekit.Task(workload="resnet18.C6")` look the op and its templates up in the
    installed plugins (`tunekit.plugin.registry`) and return one of these; made here
    from an `Op` directly, a task loads no plugin.

    Args:
        op: the operator.
        args: its arguments (validated and made canonical here).
        template: the name of the template to use; None: any that serves the target.
        weight: how many times a network runs it (the scheduler weighs its time by it).
        workload: the named workload it came from, if any (its display name).
        templates: the templates known for `op` (`bind` and `variants` choose among them).
    """

    def __init__(self, op: Op, args: dict | None = None, *, template: str | None = None, weight: int = 1,
                 workload: str | None = None, templates: Sequence[Template] = ()):
        if not isinstance(op, Op):
            raise TunekitError(f"Task takes a tunekit.Op, got {op!r}; tunekit.Task(name, args) looks an op up by name")
        self.workload = workload
        self.op = op
        self.args = op.canonical(args or {})
        self.template_name = template
        self.templates = tuple(t.bound(op) for t in templates if t.op == op.name or t.op == ANY_OP and op.generated)
        self.key = op.key(self.args)
        self.weight = weight

    @property
    def name(self) -> str:
        return self.workload or f"{self.op.name}({', '.join(f'{k}={v}' for k, v in self.args.items())})"

    @property
    def flops(self) -> int:
        return self.op.flops(**self.args)

    def __repr__(self) -> str:
        return f"Task({self.name})"

    def _with(self, args: dict, **kw) -> Task:
        return Task(self.op, args, **{"template": self.template_name, "templates": self.templates, **kw})

    def weighted(self, weight: int) -> Task:
        """This task, run `weight` times by a network."""
        return self._with(self.args, weight=weight, workload=self.workload)

    def anchor(self) -> Task:
        """This task without its fused epilogue (the same config space: its records serve this task)."""
        return self._with(self.op.anchor_args(self.args))

    def serving(self, target) -> list[Template]:
        """The templates that schedule this task on `target` (a Target or its class), its epilogue included."""
        return [t for t in self.templates if t.serves(target, self.args)]

    def template_on(self, target) -> Template:
        """The template this task runs on `target`: the one it names, else the highest priority.

        Raises:
            TemplateError: none serves it, or none of that name does (naming those that do).
        """
        cands = self.serving(target)
        if self.template_name is not None:
            named = [t for t in cands if t.name == self.template_name]
            if not named:
                raise TemplateError(f"no template {self.template_name!r} for op {self.op.name!r} on target "
                                    f"{target.name!r} (available: {', '.join(t.name for t in cands) or 'none'})")
            return named[0]
        if not cands:
            fused = " that computes a fused epilogue (bias, residual, activation)" * self.op.fuses_epilogue(self.args)
            raise TemplateError(f"no schedule template{fused} for op {self.op.name!r} on target {target.name!r}; "
                                "install a plugin that provides one")
        return max(cands, key=lambda t: t.priority)

    def variants(self, target) -> list[Task]:
        """This task once per template that serves it on `target` when it names none
        (each is tuned, and the fastest config of any is the task's), else itself."""
        names = [t.name for t in self.serving(target)] if self.template_name is None else []
        if len(names) < 2:
            return [self]
        return [self._with(self.args, template=n, weight=self.weight, workload=self.workload) for n in names]

    def spec(self) -> TaskSpec:
        """Plain, picklable data to rebuild this task in another process (`tunekit.plugin.registry`)."""
        return TaskSpec(self.op.name, tuple(sorted(self.args.items())), self.template_name, self.op.portable(self.args))

    def bind(self, target, pool=None) -> TaskSpace:
        """This task on `target`: its template, space and programs; `pool` (a
        `tunekit.measure.build_pool.BuildPool`) lowers configs for program features."""
        return TaskSpace(self, target, pool)


@dataclass(frozen=True)
class TaskSpec:
    """A task as plain data: op name, canonical args (sorted pairs), template name, and
    for an op made from a user's function (`tunekit.ops.computed`) its computation as
    JSON text (the op is not in the registry of another process)."""
    op: str
    args: tuple
    template: str | None
    computation: str | None = None


class TaskSpace:
    """A task on a target, as explorers and cost models see it: the template's
    config space, lowering of any config, feature vectors, and the set of
    configs already measured. Lowered programs and features are cached."""

    def __init__(self, task: Task, target, pool=None):
        if why := target.check_task(task):
            raise ArgumentError(why)
        self.task, self.target = task, target
        self.template = task.template_on(target)
        self.device = target.device()
        #: what records of this task space are keyed by: the device's (a runner's devices' when elsewhere)
        self.fingerprint = self.device.fingerprint()
        self.measured: set[int] = set()
        self._programs: dict[int, object] = {}
        self._features: dict[tuple[int, str], np.ndarray] = {}
        #: (task space, indices, kind) -> their feature vectors, computed elsewhere (the tuner's workers)
        self.extractor: Callable | None = pool.extract if pool is not None else None

    @cached_property
    def space(self) -> ConfigSpace:
        space = ConfigSpace()
        try:
            self.template.fn(space, self.device, **self.task.args)
        except TunekitError:
            raise
        except Exception as e:   # a template's bug, named, instead of a traceback from inside it
            where = f" ({self.template.origin})" if self.template.origin else ""
            raise TemplateError(f"template {self.template.name!r}{where} for op {self.task.op.name!r} on target "
                                f"{self.target.name!r} failed to define the config space of {self.task.name}: "
                                f"{type(e).__name__}: {e}") from e
        return space

    @property
    def size(self) -> int:
        return self.space.size

    @cached_property
    def code(self) -> str:
        """The fingerprint of what turns a config into code: the template's source (its function's and
        its package's: the helpers and rules it calls) and the target's `code_version()`. A record made
        by other code is not taken as today's, even in the same space."""
        return hashlib.sha256(f"{_source(self.template.fn)}\0{self.target.code_version()}".encode()).hexdigest()[:16]

    def stale_note(self, n: int) -> str:
        """What to say of `n` records of this task that are not taken as today's (`current`)."""
        return (f"{n} records of {self.task.op.name}[{self.template.name}] ({self.task.name}) are from an older "
                "version of the template or of the target's code generator; ignored")

    def current(self, trial: Trial) -> Trial | None:
        """`trial` (a record of this task) as a trial of today's space: itself when it was
        measured in this space, else its config looked up in this space (re-indexed), or
        None when its config is not in it or other code made it (a record of an older version
        of the template or of the code generator, or of no known code)."""
        if trial.code != self.code:
            return None
        if trial.space == self.space.fingerprint():
            return trial
        try:
            config = self.space.from_json(trial.config)
        except SpaceError:
            return None
        if config.to_json() != trial.config:   # it had a knob the template no longer defines
            return None
        return replace(trial, index=config.index, space=self.space.fingerprint())

    def schedule(self, index: int):
        cfg: ConfigEntity = self.space.get(index)
        return self.template.fn(cfg, self.device, **self.task.args)

    def program(self, index: int):
        """Lower config `index` to a loop-IR Program (cached)."""
        if index not in self._programs:
            if len(self._programs) > 4096:
                self._programs.clear()
            s, tensors = self.schedule(index)
            self._programs[index] = te.lower(s, tensors, name=f"{self.task.op.name}_{index}")
        return self._programs[index]

    def features(self, index: int, kind: str = "knob") -> np.ndarray:
        """Feature vector of kind `kind` for config `index` (cached)."""
        if (index, kind) not in self._features:
            self._features[index, kind] = extract(self, index, kind)
        return self._features[index, kind]

    def prefetch(self, indices, kind: str) -> None:
        """Compute the feature vectors of `indices` not cached yet: through `extractor`
        when one is set and they need lowering (enough of them to pay for the trip)."""
        if self.extractor is None or kind not in PROGRAM_KINDS:
            return
        missing = [i for i in dict.fromkeys(indices) if (i, kind) not in self._features]
        if len(missing) < _PARALLEL_MIN:
            return
        self._features.update({(i, kind): f for i, f in zip(missing, self.extractor(self, missing, kind))})

    def candidates(self, indices) -> list[Candidate]:
        """Candidates for the cost model (features computed on demand)."""
        return [Candidate(i, self.space.get(i), self.program, self.features, self.prefetch) for i in indices]


@cache
def _source(fn: Callable) -> str:
    fn = inspect.unwrap(getattr(fn, "func", fn))   # a generic template's function bound to its op: the function's
    try:
        return inspect.getsource(fn) + source_hash(os.path.dirname(inspect.getfile(fn)))
    except (OSError, TypeError):   # defined where no source is kept (a REPL): its bytecode says what it does
        code = getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts)) if code else f"{fn.__module__}.{fn.__qualname__}"
