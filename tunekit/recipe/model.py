"""Recipes: one file (TOML, YAML or JSON) or dict describing a whole tuning job.

Component sections (`target`, `model`, `explorer`) are flat tables whose `name`
picks an installed plugin; the other keys are that plugin's Options. They are
validated against the plugins installed at validation time, so a recipe is
checked against what this machine can actually run.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from tunekit.errors import ModelError, RecipeError, TemplateError, TunekitError, UnknownComponent
from tunekit.ops.computed import ComputedOp
from tunekit.plugin.registry import registry
from tunekit.plugin.registry import task as make_task
from tunekit.recipe.components import component_field
from tunekit.recipe.computed import computed_task
from tunekit.recipe.errors import check_keys, error, message, path
from tunekit.runners import TimingPolicy
from tunekit.targets import RunSettings
from tunekit.task import Task

#: fields that bound how long a run goes on, not what it is (left out of `run_hash`)
BUDGETS = ("trials", "time_budget_s", "early_stopping")


class Section(BaseModel):
    """Base of the fixed recipe sections: unknown keys are reported with the valid ones."""
    model_config = ConfigDict(extra="forbid")
    _noun: ClassVar[str] = "option"

    @model_validator(mode="wrap")
    @classmethod
    def _friendly(cls, data, handler):
        return check_keys(cls.model_fields, data, handler, cls._noun)


class TaskSpec(Section):
    """One task: an op with its args, or a named workload (its args may be overridden)."""
    _noun: ClassVar[str] = "key"
    op: str | None = Field(None, description="Operator name, e.g. \"matmul\" (give args too).")
    args: dict[str, Any] = Field(default_factory=dict, description="The op's arguments, e.g. {M = 1024, N = 1024, "
                                 "K = 1024, dtype = \"float32\"}; with a workload, overrides of its arguments.")
    workload: str | None = Field(None, description="Named workload instead of op + args, e.g. \"resnet18.C6\".")
    template: str | None = Field(None, description="Schedule template to use; default: the highest priority one "
                                 "for the op on the target.")
    model: str | None = Field(None, description="A model file (e.g. \"net.onnx\", relative to the recipe) instead: "
                              "its distinct tasks, each weighted by how often the network runs it.")
    layouts: Literal["rule", "search"] = Field("rule", description="With model: \"search\" also tunes each "
                                               "layer in the other channel blocks it may take, so that the "
                                               "compiled model picks a block per tensor by the records (the graph "
                                               "tuner); \"rule\": one block per target.")
    precision: Literal["float32", "bf16"] = Field("float32", description="With model: \"bf16\" runs its matmuls "
                                                  "of constant weights on bfloat16 data and weights with float32 "
                                                  "accumulation (compile it with the same precision).")
    dims: dict[str, list[Annotated[int, Field(ge=1)]]] = Field(default_factory=dict, description="With model: "
        "sizes of its symbolic dimensions to tune at, e.g. {sequence = [32, 128, 512]}: its tasks at each combination "
        "(which products run as dense, as compile_model decides at its first `at`, the first sizes decide).")
    dim_weights: dict[str, list[Annotated[int, Field(ge=1)]]] = Field(default_factory=dict, description="With dims: "
        "how much each size counts, in its dims list's order, e.g. {sequence = [1, 4, 1]} (default: equally).")
    compute: str | dict | None = Field(None, description="A computation of your own instead of an op: "
                                       "\"package.module:function\", a function of args returning te tensors "
                                       "(inputs, then outputs); tuned through the generic templates (auto).")
    name: str | None = Field(None, description="The name of a compute entry's op (default: the function's).")
    outputs: int | None = Field(None, ge=1, description="How many of the tensors a compute entry's function "
                                "returns, at the end, are outputs (default 1).")
    _model_tasks: list = PrivateAttr(default_factory=list)
    _computed: Task | None = PrivateAttr(None)
    _graphs: list = PrivateAttr(default_factory=list)   # (weight, the model's graph at some sizes)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data):
        if isinstance(data, str):  # tasks = ["resnet18.C6"]
            return {"workload": data}
        if isinstance(data, Task) and isinstance(data.op, ComputedOp):   # as plain data: its function may be local
            return {"compute": data.op.facts(data.args).data, "name": data.op.name, "outputs": data.op.num_outputs,
                    "args": data.args, "template": data.template_name}
        if isinstance(data, Task):
            return {"op": data.op.name, "args": data.args, "template": data.template_name}
        return data

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo):
        reg = registry()
        if self.model is not None:
            return self._network((info.context or {}).get("base", "."))
        for field, plain in (("layouts", "rule"), ("precision", "float32"), ("dims", {}), ("dim_weights", {})):
            if getattr(self, field) != plain:
                raise error([((field,), "goes with model (a network's layers); drop it or add model",
                              getattr(self, field))])
        if self.compute is not None:
            return self._computation(self.compute, (info.context or {}).get("base", "."))
        if self.name is not None or self.outputs is not None:
            raise error([(("name" if self.name is not None else "outputs",), "goes with compute (a computation of "
                          "your own); an op's name is op", None)])
        if self.op is None and self.workload is None:
            raise error([((), "give either op (with args), workload, model or compute", None)])
        if self.op is not None and self.workload is not None:
            raise error([((), f"give either op or workload, not both (workload {self.workload!r} names its op)",
                           None)])
        op_name, args = self.op, self.args
        if self.workload is not None:
            try:
                op_name, wargs = reg.workload(self.workload)
            except UnknownComponent as e:
                raise error([(("workload",), str(e), self.workload)]) from None
            args = {**wargs, **args}
        try:
            op = reg.op(op_name)
        except UnknownComponent as e:
            raise error([(("op",), str(e), op_name)]) from None
        try:
            canon = check_keys(op.Args.model_fields, args, op.Args.model_validate, "argument", f" for op {op_name!r}")
        except ValidationError as e:
            raise error((("args", *err["loc"]), err["msg"], err["input"]) for err in e.errors()) from None
        if why := op.too_large(canon.model_dump()):
            raise error([(("args",), why, None)])
        return self

    def _network(self, base: str):
        from tunekit.deploy.network import load_graph
        if self.op is not None or self.workload is not None or self.template is not None or self.args \
                or self.compute is not None:
            raise error([((), "a model entry takes no op, workload, compute, args or template (they come from the "
                           "model)", None)])
        path = Path(base) / self.model
        self.model = str(path.resolve())   # the recipe's dict (to_dict) then validates from anywhere
        if bad := [n for n, ws in self.dim_weights.items() if len(ws) != len(self.dims.get(n, ()))]:
            raise error([(("dim_weights", bad[0]), f"give one weight per size of dims.{bad[0]}",
                          self.dim_weights[bad[0]])])
        weights = {n: self.dim_weights.get(n, [1] * len(sizes)) for n, sizes in self.dims.items()}
        for combo in itertools.product(*(zip(self.dims[n], weights[n]) for n in self.dims)):
            try:
                self._graphs.append((math.prod(w for _, w in combo),
                                     load_graph(str(path), dict(zip(self.dims, (v for v, _ in combo))) or None)))
            except TunekitError as e:
                raise error([(("model",), str(e), self.model)]) from None
        return self

    def _computation(self, compute: str | dict, base: str):
        if self.op is not None or self.workload is not None:
            raise error([((), "a compute entry takes no op or workload (its function is the op)", None)])
        self._computed = computed_task(compute, self.name, self.outputs, self.args, self.template, base)
        return self

    def on_target(self, target) -> None:
        """Expand a model entry into its tasks in the layout `target` runs the network in."""
        if self.model is not None:
            from tunekit.deploy.plan import NetworkPlan
            from tunekit.graph.dense_rows import dense_layers
            found: dict[str, list] = {}   # a task of several sizes (one whose shapes do not vary) is tuned once
            dense = None   # with dims: the first sizes' choice, as compile_model's
            for weight, graph in self._graphs:
                plan = NetworkPlan(graph, target, precision=self.precision, dense=dense)
                dense = dense_layers(plan.compiled(by_records=False)) if self.dims and dense is None else dense
                for t, n in plan.tasks(self.layouts == "search"):
                    found.setdefault(t.key, [t, 0])[1] += n * weight
            self._model_tasks = [t.weighted(n) for t, n in found.values()]

    def tasks(self) -> list[Task]:
        """Return the Tasks (`tunekit.task.Task`) this entry describes (a model's are weighted by their counts)."""
        if self.model is not None:
            return list(self._model_tasks)
        if self._computed is not None:
            return [self._computed]
        return [make_task(self.op, self.args, workload=self.workload, template=self.template)]


class TuningSection(Section):
    """How long and how to search."""
    trials: int = Field(64, ge=1, description="Trials per task, on average (the scheduler may shift trials "
                        "between tasks); failed trials count.")
    seed: int = Field(0, description="Seed of every random choice; a run is reproducible up to measurement noise.")
    time_budget_s: float | None = Field(None, gt=0, description="Stop after this many seconds (default: no limit).")
    early_stopping: int | None = Field(None, ge=1, description="Stop a task after this many trials without a "
                                       "better config (default: never).")
    batch_size: int = Field(16, ge=1, description="Configs proposed, built and measured per batch.")
    epsilon: float = Field(0.05, ge=0, le=1, description="Fraction of each batch drawn at random instead of from "
                           "the explorer (epsilon-greedy).")
    transfer: bool = Field(False, description="Train a global model on history from other workloads (transfer "
                           "learning).")


RunnerSpec, _runner_field = component_field("runner", "Where kernels are checked and timed: a runner name "
                                             "(\"local\": this machine), or a table whose name picks the plugin "
                                             "and whose other keys are its options.")


class MeasureSection(Section):
    """How candidates are built, timed and checked."""
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    number: int = Field(4, ge=1, description="Runs per timed repeat; their mean is one cost.")
    repeat: int = Field(3, ge=1, description="Timed repeats, one cost each.")
    min_repeat_ms: float = Field(50.0, ge=0, description="Raise number until one repeat lasts at least this long.")
    warmup: int = Field(1, ge=0, description="Untimed runs before timing.")
    timeout_s: float = Field(10.0, gt=0, description="Seconds a run may take before it counts as a run timeout.")
    build_timeout_s: float = Field(60.0, gt=0, description="Seconds a build may take before it counts as a build "
                                   "timeout.")
    check: bool = Field(True, description="Check every measured config against the op's numpy reference.")
    rtol: float | None = Field(None, ge=0, description="Relative tolerance of the check (default: the op's, "
                               "scaled with the reduction length).")
    atol: float | None = Field(None, ge=0, description="Absolute tolerance of the check (default: the op's).")
    flush_cache: bool = Field(False, description="Evict caches before each timed repeat.")
    max_spread: float = Field(0.05, ge=0, description="Re-time a config while its repeats differ by more than "
                              "this fraction of their median (a noisy machine).")
    retries: int = Field(2, ge=0, description="At most this many re-timings per config; the tightest set is kept.")
    cutoff: float | None = Field(10.0, gt=1, description="A config whose first run is slower than this many "
                                 "times the task's best so far is timed by that run alone (None: time fully).")
    runner: RunnerSpec = _runner_field
    build_workers: int = Field(0, ge=0, description="Parallel build processes (0 = number of cores).")

    def timing_policy(self, seed: int = 0) -> TimingPolicy:
        """Return the `tunekit.runners.TimingPolicy` of this section (no cutoff: the tuner sets it per batch)."""
        settings = RunSettings(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                               warmup=self.warmup, flush_cache=self.flush_cache)
        return TimingPolicy(settings, self.timeout_s, self.check, self.rtol, self.atol, seed, None,
                            self.max_spread, self.retries)


class DatabaseSection(Section):
    """Where trials are kept."""
    path: str = Field("tunekit.db", description="SQLite database of all trials and the best configs.")
    log: str | None = Field(None, description="Also append every trial to this JSONL log (portable).")


TargetSpec, _target_field = component_field("target", "Hardware target: a name, or a table whose name picks "
                                             "the plugin and whose other keys are its options.")
ModelSpec, _model_field = component_field("model", "Cost model: a name, or a table whose name picks the plugin "
                                           "and whose other keys are its options.")
ExplorerSpec, _explorer_field = component_field("explorer", "Explorer (search strategy): a name, or a table "
                                                 "whose name picks the plugin and whose other keys are its options.")


class Recipe(Section):
    """A whole tuning job. Build one with `Recipe.from_dict` or `load_recipe`."""
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    _noun: ClassVar[str] = "section"
    _source: str = PrivateAttr("<dict>")

    target: TargetSpec = _target_field
    tasks: list[TaskSpec] = Field(default_factory=list, description="The tasks to tune: tables with op + args or "
                                  "workload (and optionally template), or workload names.")
    model: ModelSpec = _model_field
    explorer: ExplorerSpec = _explorer_field
    tuning: TuningSection = Field(default_factory=TuningSection, description=TuningSection.__doc__)
    measure: MeasureSection = Field(default_factory=MeasureSection, description=MeasureSection.__doc__)
    database: DatabaseSection = Field(default_factory=DatabaseSection, description=DatabaseSection.__doc__)

    @model_validator(mode="after")
    def _templates(self):
        target = self.target.create()
        problems = []
        for i, spec in enumerate(self.tasks):
            try:
                spec.on_target(target)
            except ModelError as e:   # a node of the model the target cannot run (the message names it)
                problems.append((("tasks", i, "model"), str(e), spec.model))
        problems += [p for i, spec in enumerate(self.tasks) for task in spec.tasks()
                     for p in self._task_problems(i, task, target)]
        if problems:
            raise error(problems)
        return self

    def _task_problems(self, i: int, task: Task, target) -> list[tuple]:
        """What keeps `task` (of entry `i`) from being tuned on the target: its args, or no template."""
        try:
            task.serving(self.target.cls)
        except AttributeError as e:  # a target class without `family`
            raise error([(("target",), f"target {self.target.name!r} is broken: {e}", None)]) from None
        if why := target.check_task(task):
            return [(("tasks", i, "args", "dtype") if why.startswith("dtype") else ("tasks", i, "args"), why, None)]
        try:
            task.template_on(self.target.cls)
        except TemplateError as e:
            name = task.template_name
            return [(("tasks", i, "template") if name is not None else ("tasks", i), str(e), name)]
        return []

    @property
    def source(self) -> str:
        """The file this recipe came from ("<dict>" when built from a dict)."""
        return self._source

    @classmethod
    def from_dict(cls, data: Mapping, source: str = "<dict>", base: str = ".") -> Recipe:
        """Validate a recipe given as a dict (the parsed file), against the installed plugins.

        Args:
            data: the sections; components may be names, tables, Options objects or instances.
            source: the name that starts each error line (the file name).
            base: the folder that relative `model` paths of tasks start from (the recipe's).
        Returns:
            the validated Recipe.
        Raises:
            RecipeError: listing every problem, one per line: `SOURCE: field.path: what is wrong`.
        """
        if not isinstance(data, Mapping):
            raise RecipeError(f"{source}: expected a table of sections at the top level, got {type(data).__name__}")
        problems = []
        try:
            recipe = cls.model_validate(data, context={"base": base})
        except ValidationError as e:
            problems = [(tuple(err["loc"]), message(err, "section", "")) for err in e.errors()]
        else:
            if not recipe.tasks:
                problems = [(("tasks",), "no tasks to tune; add [[tasks]] tables with op + args, workload or model")]
        if problems:
            raise RecipeError("\n".join(f"{source}: {path(loc)}: {msg}" if loc else f"{source}: {msg}"
                                        for loc, msg in problems))
        recipe._source = source
        return recipe

    def task_objects(self) -> list[Task]:
        """Return the Task (`tunekit.task.Task`) of every task, in recipe order."""
        return [t for spec in self.tasks for t in spec.tasks()]

    def to_dict(self) -> dict:
        """Return the recipe as plain data (round-trips through `from_dict`)."""
        return self.model_dump(mode="json", exclude_none=True)

    def run_hash(self) -> str:
        """Return a stable hash identifying the run this recipe describes.

        A run is identified by this hash plus `tuning.seed`, which is left out,
        as are the budgets (tuning.trials, time_budget_s, early_stopping: raising
        them continues the same run), where results go (database) and build
        parallelism and place (measure.build_workers, measure.runner). Tasks count by op and canonical
        args, however they were written.
        """
        # options left at their defaults are left out: an option added later keeps old runs' hashes
        data = self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        data["tasks"] = [[t.op.name, t.args, t.template_name, *([t.key] if isinstance(t.op, ComputedOp) else [])]
                         for t in self.task_objects()]
        for key in (*BUDGETS, "seed"):
            data.get("tuning", {}).pop(key, None)
        for key in ("build_workers", "runner"):   # how and where, not what, is measured
            data.get("measure", {}).pop(key, None)
        data.pop("database", None)
        data = {k: v for k, v in data.items() if v != {}}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _parse(path: Path, text: str) -> Any:
    """Parse recipe text by the file's extension; say where a syntax error is."""
    ext = path.suffix.lower()
    try:
        if ext == ".toml":
            return tomllib.loads(text)
        if ext in (".yaml", ".yml"):
            return yaml.safe_load(text)
        if ext == ".json":
            return json.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        where = f"line {m[1]}, column {m[2]}: " if m else ""
        what = str(e)[: m.start()].rstrip() if m else str(e)
        raise RecipeError(f"{path}: {where}invalid TOML: {what}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        ctx, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
        ctx = f" ({ctx} at line {cmark.line + 1}, column {cmark.column + 1})" if ctx and cmark else ""
        raise RecipeError(f"{path}: {where}invalid YAML: {getattr(e, 'problem', None) or e}{ctx}") from None
    except json.JSONDecodeError as e:
        raise RecipeError(f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}") from None
    raise RecipeError(f"{path}: unknown recipe format {ext!r} (use .toml, .yaml, .yml or .json)")


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file (TOML, YAML or JSON, by extension).

    Returns:
        the validated Recipe (its `source` is the path as given).
    Raises:
        RecipeError: the file cannot be read or parsed, or has invalid fields (all listed).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise RecipeError(f"{path}: cannot read: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise RecipeError(f"{path}: cannot read: {e.strerror or e}") from None
    data = _parse(path, text)   # None: an empty YAML file
    return Recipe.from_dict({} if data is None else data, source=str(path), base=str(path.parent))
