"""The built-in `tunekit` subcommands and the `command` decorator they are declared with.
Plugins add subcommands by returning `tunekit.commands.Command`s from the `tunekit_commands` hook.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from contextlib import closing

from tunekit.commands import Command, arg
from tunekit.errors import TemplateError, TunekitError

#: the built-in subcommands by name, in the order they were declared
COMMANDS: dict[str, Command] = {}


def command(name: str, *arguments: tuple[tuple, dict], help: str):
    """Register the decorated function `fn(args) -> exit code` as subcommand `name`.

    Args:
        name: the subcommand ("validate").
        arguments: its arguments, each made with `arg(...)`.
        help: one line for `tunekit --help`; the function's docstring is the long help.
    """
    def register(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = Command(name, fn, help, list(arguments))
        return fn
    return register


def _console(stream=None):
    """A rich console on `stream` (stdout by default); wide when not a terminal so tables don't wrap."""
    from rich.console import Console
    stream = stream or sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream, width=None if tty else 200, highlight=False, soft_wrap=not tty)


def _table(title: str, columns: list[str], rows: list[list[str]], header: bool = True):
    from rich.table import Table
    from rich.text import Text  # cells are literal text: "tasks[0]" is not markup
    t = Table(title=title or None, title_justify="left", box=None, pad_edge=False, header_style="bold",
              show_header=header)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(Text(c) for c in r))
    return t


@command("validate", arg("recipe", help="recipe file (.toml, .yaml, .yml or .json)"),
         help="check a recipe against the installed plugins")
def validate(args: argparse.Namespace) -> int:
    """Check a recipe file and print what it would tune, or every problem in it."""
    from tunekit.recipe.model import load_recipe
    recipe = load_recipe(args.recipe)
    out = _console()
    tasks = recipe.task_objects()
    target = recipe.target.create()
    rows: list[list[str]] = []
    notes: dict[str, list[str]] = {}   # why a task has no generated space -> those tasks
    for i, t in enumerate(tasks):
        try:
            summaries = [_space_summary(v, target) for v in t.variants(target)]
        except TemplateError as e:
            raise TemplateError(f"{recipe.source}: tasks[{i}]: {e}") from e
        auto, why = _auto_size(t, target)
        if why:
            notes.setdefault(why, []).append(str(i))
        rows += [[str(i), t.name, t.key, *summary, auto] for summary in summaries]
    out.print(f"OK {recipe.source}", markup=False)
    out.print(_table(f"tasks: {len(tasks)}", ["#", "task", "workload key", "template", "space size",
                                              "valid", f"{AUTO} space"], rows))
    for why, which in notes.items():
        out.print(f"{AUTO} space of tasks[{', '.join(which)}]: {why}", markup=False)
    tuning = recipe.tuning
    budget = [f"{tuning.trials} trials per task", f"seed {tuning.seed}"]
    if tuning.time_budget_s is not None:
        budget.append(f"time budget {tuning.time_budget_s:g} s")
    if tuning.early_stopping is not None:
        budget.append(f"early stopping after {tuning.early_stopping} trials")
    rows = [["target", str(recipe.target)], ["model", str(recipe.model)], ["explorer", str(recipe.explorer)],
            ["tuning", ", ".join(budget)], ["database", recipe.database.path], ["run hash", recipe.run_hash()]]
    out.print(_table("", ["", ""], rows, header=False))
    for spec in (recipe.target, recipe.model, recipe.explorer):
        why = spec.available()
        if why is not None:
            print(f"warning: {recipe.source}: {spec.kind} {spec.name!r} is not available here: {why}", file=sys.stderr)
    return 0


def _space_summary(task, target) -> list[str]:
    """Template name, config space size and estimated valid fraction of a task.
    A template that fails to define its space is an error (TemplateError)."""
    try:
        ts = task.bind(target)
    except TunekitError:
        raise
    except Exception as e:  # best effort: a target may not describe its device here (no driver)
        return ["-", f"unknown ({type(e).__name__}: {e})", "-"]
    return [ts.template.name, f"{ts.space.size:,}", f"{ts.space.valid_fraction():.0%}"]


#: the generic template that schedules any op from its computation (plugins/auto)
AUTO = "auto"


def _with_template(task, name: str):
    """`task` through template `name` (its op, args, weight and workload kept)."""
    from tunekit.task import Task
    return Task(task.op, task.args, template=name, weight=task.weight, workload=task.workload,
                templates=task.templates)


def _auto_size(task, target) -> tuple[str, str]:
    """The size of the generated (`auto`) space of `task` on `target`, read from the space
    alone (no config is lowered), and why it is "-" when there is none (one line)."""
    if not any(t.name == AUTO for t in task.templates):
        return "-", f"no template {AUTO!r} is installed"
    try:
        size = _with_template(task, AUTO).bind(target).size
    except Exception as e:  # a TunekitError, or a target that cannot describe its device here
        return "-", (str(e).splitlines() or [type(e).__name__])[0]
    return f"{size:,}", ""


@command("schema", arg("-o", "--output", help="write to this file instead of stdout"),
         help="print the JSON Schema of recipes (for editors)")
def schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of recipes, covering the installed plugins' options."""
    from tunekit.recipe.schema import json_schema
    text = json.dumps(json_schema(), indent=2)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as e:
            raise TunekitError(f"cannot write the schema to {args.output}: {e.strerror or e}") from None
    else:
        print(text)
    return 0


@command("plugins", help="list the installed components and the plugins that failed to load")
def plugins(args: argparse.Namespace) -> int:
    """List every component of the installed plugins, whether it is usable here,
    and the plugins that failed to load."""
    from tunekit.plugin.manager import plugins as loaded
    from tunekit.plugin.registry import registry
    reg = registry()
    rows = []
    for kind, table in reg.components.items():
        for name, entry in table.items():
            try:
                why = entry.obj.available()
            except Exception as e:  # report a plugin bug, keep listing
                why = f"available() raised {type(e).__name__}: {e}"
            rows.append([kind, name, entry.plugin, entry.version, "ok" if why is None else why])
    out = _console()
    out.print(_table("components", ["kind", "name", "plugin", "version", "status"], rows))
    templates = sorted(reg.template_entries, key=lambda e: (e.obj.op, -e.obj.priority, e.obj.name))
    out.print()
    out.print(_table("templates", ["op", "template", "targets", "priority", "plugin"],
                     [[e.obj.op, e.obj.name, ", ".join(e.obj.targets), str(e.obj.priority), e.plugin]
                      for e in templates]))
    # each once: a hook that raises is recorded each time the registry is rebuilt
    broken = list({(b.name, b.error): [b.name, b.dist, b.version, b.error] for b in loaded().broken}.values())
    if broken:
        out.print()
        out.print(_table("broken plugins", ["name", "dist", "version", "error"], broken))
    out.print()
    out.print(f"ops: {len(reg.ops)}  workloads: {len(reg.workloads)}  templates: {len(reg.templates)}")
    return 0


@command("tune", arg("recipe", help="recipe file (.toml, .yaml, .yml or .json)"),
         arg("--trials", type=int, help="override tuning.trials"),
         arg("--seed", type=int, help="override tuning.seed"),
         help="run a tuning job; rerunning it resumes from the database")
def tune(args: argparse.Namespace) -> int:
    """Tune every task of a recipe, showing progress, then print a summary table.
    Every trial is committed to the database as it is measured: a killed run resumes
    where it stopped when started again."""
    from tunekit.recipe.model import load_recipe
    from tunekit.tuning.budget import Budget
    from tunekit.tuning.progress import TuneProgress, summary_table
    from tunekit.tuning.tuner import Tuner
    recipe = load_recipe(args.recipe)
    if args.seed is not None:   # the seed is plain data: no need to validate the recipe (or read its model) again
        recipe = recipe.model_copy(update={"tuning": recipe.tuning.model_copy(update={"seed": args.seed})})
    states = Tuner(recipe, TuneProgress(), Budget.of(recipe.tuning).with_trials(args.trials)).run()
    _console().print(summary_table(states))
    return 0


@command("best", arg("database", help="SQLite database written by `tunekit tune`"),
         arg("--workload", help="only this workload (name or key)"), arg("--target", help="only this target"),
         arg("--wide", action="store_true", help="show the configs in a table column, not under the table"),
         help="print the best config per workload and target")
def best(args: argparse.Namespace) -> int:
    """Print the best measured config of every (workload, target, device) in a database:
    a table, then each best config in full (or in a column of the table with --wide)."""

    from rich.text import Text

    from tunekit.deploy.kernels import checked_best
    from tunekit.store.database import Database
    with closing(Database(args.database, readonly=True)) as db, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")   # records of older templates, named once each
        rows = [checked_best(db, r) for r in db.best(args.workload, args.target)]
    for w in said:
        print(f"warning: {w.message}", file=sys.stderr)
    if not rows:
        raise TunekitError(f"{args.database}: no trials recorded" + (" matching the filters" if
                                                                       args.workload or args.target else ""))
    columns = ["workload", "target", "device", "GFLOPS", "ms", "trials", "errors"]
    table = [[r["name"] or r["op"], r["target"], r["device"], f"{r['gflops']:.1f}",
              f"{r['cost'] * 1e3:.4f}" if r["cost"] else "-", str(r["trials"]), str(r["errors"])] for r in rows]
    configs = [f"#{r['index']} {json.dumps(r['config'])}" if r["index"] is not None else "(none succeeded)"
               for r in rows]
    out = _console()
    if args.wide:
        out.print(_table("", [*columns, "best config"], [[*row, c] for row, c in zip(table, configs)]))
        return 0
    out.print(_table("", columns, table))
    names = [row[0] for row in table]
    for row, config in zip(table, configs):  # name a workload's target and device when it has several rows
        label = row[0] if names.count(row[0]) == 1 else f"{row[0]} ({row[1]}, {row[2]})"
        out.print(Text(f"{label}: {config}"))
    return 0


@command("show", arg("recipe", help="recipe file"), arg("--config", type=int, default=None,
                                                         help="config index (default: the best recorded, else the "
                                                              "space's default config)"),
         arg("--task", type=int, default=0, help="task number in the recipe (default 0)"),
         arg("--template", default=None, help="the template to show the task through, e.g. 'auto' (default: the "
                                              "best record's, else the task's)"),
         help="print the lowered program of a config")
def show(args: argparse.Namespace) -> int:
    """Print a task's config space and the loop program of one config: --config N, else the
    best recorded (of --template's when given), else the space's default config."""
    from tunekit.recipe.model import load_recipe
    recipe = load_recipe(args.recipe)
    tasks = recipe.task_objects()
    if not 0 <= args.task < len(tasks):
        raise TunekitError(f"{recipe.source}: --task {args.task}: the recipe has {len(tasks)} task(s)")
    task, target = tasks[args.task], recipe.target.create()
    if args.template is not None:
        serving = [t.name for t in task.serving(target)]
        if args.template not in serving:
            raise TunekitError(f"{recipe.source}: --template {args.template!r} does not serve {task.name} on target "
                               f"{target.name!r} (templates that do: {', '.join(serving) or 'none'})")
        task = _with_template(task, args.template)
    ts, index, which = task.bind(target), args.config, "--config"
    if index is None:
        best = _recorded_best(recipe.database.path, task, target)
        if best is not None:
            (ts, index), which = best, "the best recorded"
        else:
            index, which = ts.space.default(), f"the space's default: no successful trial in {recipe.database.path}"
    print(f"{ts.task.name} on {ts.target.name}, template {ts.template.name!r}: {ts.space}")
    print(f"config {ts.space.get(index)} ({which})")
    print(ts.program(index))
    return 0


def _recorded_best(path: str, task, target):
    """(TaskSpace, index) of the best recorded config of `task` in database `path`, or None
    (a database not written yet has none)."""
    import os

    from tunekit.deploy.kernels import best_config
    from tunekit.store.database import Database
    if not os.path.exists(path):
        return None
    with closing(Database(path, readonly=True)) as db:
        return best_config(db, task, target)


@command("report", arg("database", help="SQLite database written by `tunekit tune`"),
         arg("--png", default="tunekit-report.png", help="where to write the plot ('' for none)"),
         help="plot best-so-far GFLOPS vs trials per task and print a summary")
def report(args: argparse.Namespace) -> int:
    """Plot the best GFLOPS found against the number of trials for every task (and
    every run, when several models or explorers ran), and print a summary table."""

    from tunekit.cli.report import report as make_report
    rows = make_report(args.database, args.png or None)
    _console().print(_table("", ["task", "trials", "best GFLOPS"], rows))
    if args.png:
        print(f"plot: {args.png}")
    return 0


#: the options of a model with symbolic dimensions (`tunekit.compile_model`'s dims and at)
DIMS_ARGS = (arg("--dims", action="append", default=[], metavar="NAME=LO:HI", help="a symbolic dimension's range "
                 "of sizes (repeatable): one compiled model runs them all"),
             arg("--at", action="append", default=[], metavar="NAME=N[,N...]", help="the size a symbolic "
                 "dimension's kernels are scheduled for and read their records at (default: its largest); several: "
                 "kernels for each, a call runs those of the nearest"))


@command("compile", arg("model", help="model file (.onnx)"),
         arg("-o", "--output", required=True, help="the file to write (model.tk)"),
         arg("--target", default="x86", help="target: x86 (this CPU) or arm-cpu (cross-linked for aarch64); "
             "default x86"),
         arg("--database", help="tuning records to use (default: none, every kernel a default config)"),
         arg("--precision", choices=("float32", "bf16"), default="float32", help="as for tunekit run"),
         *DIMS_ARGS,
         arg("--generation", action="store_true", help="a language model with a key/value cache, for tunekit "
             "generate: each step appends to the cache in place (the cache then laid out [length, batch, heads, "
             "head size])"),
         help="compile a model once into one file that tunekit.runtime runs with numpy alone")
def compile_model(args: argparse.Namespace) -> int:
    """Compile a model with the best records of a database and save it as one file (the
    kernels as a shared library, the plan, the weights in their compiled layouts) that
    `tunekit run model.tk` or `tunekit.runtime.load` runs without the compiler."""
    import os
    import time

    from tunekit.cli.run import dims_of
    from tunekit.deploy.network import compile_model as compile_
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        net = compile_(args.model, args.target, args.database, precision=args.precision, **dims_of(args),
                       generation=args.generation)
    for w in said:
        print(f"warning: {w.message}", file=sys.stderr)
    net.save(args.output)
    print(f"{args.output}: {len(net.kernels)} kernels, {os.path.getsize(args.output) / 2**20:.1f} MiB, "
          f"compiled in {time.perf_counter() - t0:.1f} s")
    return 0


@command("run", arg("model", nargs="?", help="model file (.onnx), or a saved one (.tk, from tunekit compile)"),
         arg("--target", default="x86", help="target (default x86)"),
         arg("--database", help="tuning records to use (default: none, every kernel a default config)"),
         arg("--input", action="append", metavar="NAME=FILE.npy", help="an input's values (repeatable; FILE.npy "
             "alone for a model of one input); default: seeded random values (integer inputs: ids within the "
             "range they index)"),
         arg("--repeat", type=int, default=20, help="timed runs of the whole network (default 20)"),
         arg("--no-pass", action="append", default=[], metavar="NAME", help="leave out a graph pass (repeatable), "
             "to see what it buys; --list-passes lists them"),
         arg("--list-passes", action="store_true", help="list the graph passes, in order, and exit"),
         arg("--precision", choices=("float32", "bf16"), default="float32", help="bf16: matmuls of constant "
             "weights on bfloat16 data and weights (tune with the same precision); default float32"),
         *DIMS_ARGS,
         arg("--size", action="append", default=[], metavar="NAME=N", help="a symbolic dimension's size to run "
             "at (repeatable; default: its --at size, else its largest)"),
         help="run a model with its tuned kernels: latency, per-layer profile, check against onnxruntime")
def run_model(args: argparse.Namespace) -> int:
    """Compile a model with the best records of a database, run it, and print its
    latency (median of --repeat runs), a per-layer profile (each layer alone and within
    whole runs) and its buffer memory; when
    onnxruntime is installed, check the outputs against it on the same inputs."""
    from tunekit.cli.run import run_model as run
    return run(args, _console(), _table)


@command("generate", arg("model", help="a language model exported with its key/value cache (.onnx: "
                               "past_key_values.N.key in, present.N.key out), or a saved one (.tk)"),
         arg("--prompt-tokens", type=int, default=32, help="tokens of the prompt (seeded random ids; default 32)"),
         arg("--new-tokens", type=int, default=64, help="tokens to generate (default 64)"),
         arg("--target", default="x86", help="target (default x86)"),
         arg("--database", help="tuning records to use (default: none, every kernel a default config)"),
         *DIMS_ARGS,
         help="generate tokens greedily with one compiled model and its key/value cache")
def generate(args: argparse.Namespace) -> int:
    """Compile a language model once for every cache length, for generation (default dims:
    past 0 to the prompt and new tokens, sequence 1 to the prompt; --dims and --at override
    them), or load one saved by `tunekit compile --generation`; then decode greedily: the
    prompt in one run, then one run per new token, each appending to the cache in place.
    Prints the tokens, the time to the first token and the latency per token; with
    onnxruntime installed, checks the tokens against its own cache loop."""
    from tunekit.cli.run import generate_tokens
    return generate_tokens(args)


@command("dataset", arg("action", choices=["export", "train"], help="export: the successful trials of databases "
                              "as one dataset of program features; train: a cost model on a dataset"),
         arg("inputs", nargs="+", metavar="FILE", help="export: tuning databases; train: a dataset (.npz)"),
         arg("-o", "--output", required=True, help="the dataset (.npz) or the trained model (.json) to write"),
         arg("--model", default="xgboost", help="train: the cost model, a name or a JSON table of its options "
                                                "(default xgboost)"),
         help="make a dataset of measured programs, and train cost models across tasks on it")
def dataset(args: argparse.Namespace) -> int:
    """`tunekit dataset export DB... -o data.npz`: the successful trials of the databases, each as its
    program's relation features (one feature space for every task), its measured seconds, its task
    and its device (`tunekit.tuning.dataset`). `tunekit dataset train data.npz -o model.json`: a
    cost model trained across the dataset's tasks, which a recipe starts from with
    `model = { name = "xgboost", pretrained = "model.json" }`."""
    from tunekit.cli.run import dataset_action
    return dataset_action(args)


@command("db", arg("action", choices=["import", "recover"], help="import: add a JSONL log's records to a database; "
                  "recover: copy the readable rows of a damaged database into a new one"),
         arg("source", help="the JSONL log (import) or the damaged database (recover)"),
         arg("dest", help="the database to write (recover: a new file)"),
         help="import a JSONL log, or recover a damaged database")
def db(args: argparse.Namespace) -> int:
    """Get trials back: `tunekit db import LOG DB` adds the log's records to DB
    (skipping those it has, and torn lines); `tunekit db recover BAD.db NEW.db`
    copies every readable trial of a damaged database into a new one."""
    from tunekit.store.tools import import_log, recover
    if args.action == "import":
        added, dup, bad = import_log(args.source, args.dest)
        print(f"{args.dest}: {added} trials imported from {args.source} ({dup} already there, {bad} bad lines "
              "skipped)")
    else:
        got, lost = recover(args.source, args.dest)
        print(f"{args.dest}: {got} trials recovered from {args.source} ({lost} unreadable)")
    return 0

