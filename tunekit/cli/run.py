"""`tunekit run`: a compiled model's latency, per-layer profile and memory, its outputs
checked against onnxruntime's on the same inputs."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings

import numpy as np

from tunekit.errors import ArgumentError, TunekitError


def sizes(specs: list[str], flag: str, ranged: bool = False, several: bool = False) -> dict:
    """{name: N} of "NAME=N" specs (with `several`, "NAME=N,M": a list), or with `ranged`
    {name: (lo, hi)} of "NAME=LO:HI" ones."""
    out = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        try:
            lo, sep, hi = value.partition(":")
            if ranged != bool(sep) or "," in value and not several:
                raise ValueError
            listed = [int(v) for v in value.split(",")] if several and not ranged else None
            out[name] = (int(lo), int(hi)) if ranged else listed if listed and len(listed) > 1 else int(value)
        except ValueError:
            form = "LO:HI" if ranged else "N[,N...]" if several else "N"
            raise TunekitError(f"{flag} {spec}: write it NAME={form}, e.g. {flag} "
                               f"sequence={'1:512' if ranged else '128'}") from None
    return out


def dims_of(args: argparse.Namespace) -> dict:
    """compile_model's dims and at from --dims and --at (none where --dims is not given)."""
    dims = sizes(args.dims, "--dims", ranged=True)
    return {"dims": dims, "at": sizes(args.at, "--at", several=True)} if dims else {}


def feeds(net, given: list[str], path: str, at: dict | None = None) -> dict[str, np.ndarray]:
    """The model's inputs by name: `given` ("name=file.npy", or "file.npy" for a model of one
    input) and, for the rest, seeded random values: normal floats; integers in [0, the input's
    bound) (token ids within the vocabulary that they index), else 0 or 1 (masks). A symbolic
    dimension of a random input takes its size in `at` (default: its largest)."""
    from tunekit.runtime.dims import shape as sized
    inputs, out = net.inputs, {}
    at = {**{d: hi for d, (_, hi) in getattr(net, "dims", {}).items()}, **(at or {})}
    for spec in given:
        name, sep, file = spec.rpartition("=")
        if not sep:
            if len(inputs) != 1:
                raise TunekitError(f"--input {spec}: the model has {len(inputs)} inputs ({', '.join(inputs)}); "
                                   "give each as --input NAME=FILE.npy")
            name = next(iter(inputs))
        if name not in inputs:
            raise TunekitError(f"--input {spec}: {path} has no input {name!r} (inputs: {', '.join(inputs)})")
        try:
            out[name] = np.load(file)
        except (OSError, ValueError) as e:
            raise TunekitError(f"--input {spec}: cannot read a .npy array from {file}: {e}") from None
    rng = np.random.default_rng(0)
    for name, (shape, dtype) in inputs.items():
        if name not in out:
            shape = sized(shape, at)
            out[name] = (rng.integers(0, net.input_bounds.get(name, 2), shape) if np.dtype(dtype).kind in "iu"
                         else rng.standard_normal(shape)).astype(dtype)
    return out


_MATMULS = ("matmul", "dense", "batch_matmul")


def matmul_share(rows: list[dict]) -> str:
    """A line saying how much of a profile's layer sum is matmul work: the matmul ops, and the
    fused groups that hold one (a frontend names a group after its nodes: "onnx_matmul_add")."""
    total = sum(r["seconds"] for r in rows) or 1.0
    mm = sum(r["seconds"] for r in rows if r["op"] in _MATMULS or "matmul" in r["op"].split("_"))
    return (f"matmul work: {mm * 1e3:.3f} ms, {mm / total:.1%} of the layer sum; other work "
            f"{(total - mm) * 1e3:.3f} ms, {(total - mm) / total:.1%}")


def run_model(args: argparse.Namespace, console, table) -> int:
    from tunekit.deploy.network import compile_model
    from tunekit.deploy.plan import PASSES, passes_without
    if args.list_passes:
        console.print(table("graph passes, in order", ["pass", "what it does"], [[p.name, p.doc] for p in PASSES]))
        return 0
    if args.model is None:
        raise TunekitError("tunekit run: give a model file (or --list-passes)")
    saved = args.model.endswith(".tk")
    if saved:   # a saved model runs as it is: compiled for its target, with its database's configs
        import tunekit.runtime
        net = tunekit.runtime.load(args.model)
    else:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            net = compile_model(args.model, args.target, args.database, passes_without(args.no_pass), args.precision,
                                **dims_of(args))
        for w in said:
            print(f"warning: {w.message}", file=sys.stderr)
    at = {n: v for n, v in sizes(args.at, "--at", several=True).items() if isinstance(v, int)}
    x = feeds(net, args.input or [], args.model, {**at, **sizes(args.size, "--size")})
    outputs = net(**x)
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        net(**x)
        times.append(time.perf_counter() - t0)
    latency = statistics.median(times)
    rows = net.profile()
    total = sum(r["seconds"] for r in rows) or 1.0
    console.print(table(f"{args.model}: {latency * 1e3:.3f} ms per run (median of {len(times)})",
                        ["layer", "op", "template", "ms", "ms in runs", "share", "GFLOPS", "config"],
                        [[r["layer"], r["op"], r["template"], f"{r['seconds'] * 1e3:.3f}", f"{r['in_run'] * 1e3:.3f}",
                          f"{r['seconds'] / total:.0%}", f"{r['gflops']:.1f}", "tuned" if r["tuned"] else "fallback"]
                         for r in rows]))
    console.print(f"layer sum {total * 1e3:.3f} ms alone, {sum(r['in_run'] for r in rows) * 1e3:.3f} ms in runs "
                  "(the gap: data and weights that the run brings from memory)", markup=False)
    console.print(f"memory: activations {net.peak_bytes / 2**20:.2f} MiB (buffers reused across layers), "
                  f"weights {net.weight_bytes / 2**20:.2f} MiB", markup=False)
    console.print(matmul_share(rows), markup=False)
    if saved:
        console.print(f"(a saved model of {net.header['source'] or 'an unnamed file'}: run that file to check its "
                      "outputs against onnxruntime)", markup=False)
        return 0
    try:
        import onnxruntime
    except ImportError:
        console.print("(install onnxruntime to check the outputs against it)", markup=False)
        return 0
    ref = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"]).run(None, x)
    steps = net.graph.output_steps
    for name, o, r in zip(net.graph.outputs, outputs, ref):
        if name in steps:   # a quantized output: told in quantization steps
            diff = np.abs(o.astype(np.float64) - r) / steps[name]
            console.print(f"output {name!r} (quantized, step {steps[name]:.3g}): largest difference from onnxruntime "
                          f"{np.max(diff, initial=0):.2f} steps; {np.mean(diff > 1.01):.2%} of its values differ by "
                          "more than one step", markup=False)
            if np.max(diff, initial=0) > 1.01:
                raise TunekitError(f"{args.model}: output {name!r} differs from onnxruntime's by more than one "
                                   "quantization step")
    floats = [(o, r) for name, o, r in zip(net.graph.outputs, outputs, ref) if name not in steps]
    if not floats:
        return 0
    worst = max(float(np.max(np.abs(o - r)) / (np.max(np.abs(r)) or 1.0)) for o, r in floats)
    # bfloat16 products, or activations quantized per run (dynamic int8), round differently from onnxruntime
    # by about 1e-2 of the range: a larger limit there, and the figure told either way
    loose = args.precision == "bf16" or any(d in ("int8", "uint8") for d in net.graph.dtypes.values())
    if worst > (limit := 5e-2 if loose else 1e-3):
        raise TunekitError(f"{args.model}: the outputs differ from onnxruntime's (max error {worst:.2g} of the "
                           f"output's range, over the {limit:g} allowed)")
    console.print(f"outputs match onnxruntime (max error {worst:.1e} of the output's range, within {limit:g})",
                  markup=False)
    return 0


def generate_tokens(args: argparse.Namespace) -> int:
    """`tunekit generate` (see its help)."""
    from tunekit.runtime.generate import generate
    n, m = args.prompt_tokens, args.new_tokens
    if args.model.endswith(".tk"):
        import tunekit.runtime
        net = tunekit.runtime.load(args.model)
    else:
        from tunekit.deploy.network import compile_model
        given = dims_of(args)
        dims = given or {"dims": {"past": (0, max(n + m - 2, 1)), "sequence": (1, max(n, 2))},
                         "at": {"past": max(n + m // 2, 2), "sequence": 2}}
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            net = compile_model(args.model, args.target, args.database, **dims, generation=True)
        for w in said:
            print(f"warning: {w.message}", file=sys.stderr)
        print(f"compiled {args.model} for {dims['dims']} for generation in {time.perf_counter() - t0:.1f} s")
    ids = next(name for name in net.inputs if "." not in name)
    prompt = np.random.default_rng(0).integers(0, net.input_bounds.get(ids, 2), (1, n), dtype=np.int64)
    out = generate(net, prompt, m)
    per_token = statistics.median(out.token_s) if out.token_s else float("nan")
    print(f"tokens: {' '.join(map(str, out.tokens))}")
    print(f"first token {out.first_token_s * 1e3:.1f} ms (the {n}-token prompt); then {per_token * 1e3:.2f} ms per "
          f"token (median of {len(out.token_s)}), {1 / per_token:.1f} tokens/s")
    if args.model.endswith(".tk"):
        return 0
    try:
        want = onnxruntime_tokens(args.model, prompt, m)
    except ImportError:
        print("(install onnxruntime to check the tokens against it)")
        return 0
    if not np.array_equal(want, out.tokens):
        first = int(np.argmax(want != out.tokens))
        raise TunekitError(f"{args.model}: token {first} is {out.tokens[first]}, onnxruntime's is {want[first]}")
    print(f"the {m} tokens match onnxruntime's (its own cache loop on the same file)")
    return 0


def onnxruntime_tokens(path: str, prompt: np.ndarray, new_tokens: int) -> np.ndarray:
    """Greedy decoding with onnxruntime on the model file at `path`: the present of each run fed
    back as the next run's past (its own cache loop, the cache empty for the prompt)."""
    import onnxruntime
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ids_name = next(i.name for i in sess.get_inputs() if "." not in i.name)
    names = [o.name for o in sess.get_outputs()]
    # a present output feeds the past input whose name agrees after the first "."
    fed = {o: i.name for i in sess.get_inputs() for o in names
           if "." in o and o.split(".", 1)[1] == i.name.split(".", 1)[-1]}
    feeds = {i.name: np.zeros([0 if isinstance(d, str) and "past" in d else d for d in i.shape], np.float32)
             for i in sess.get_inputs() if i.name in fed.values()}
    ids, tokens = prompt, []
    for _ in range(new_tokens):
        out = dict(zip(names, sess.run(None, {**feeds, ids_name: ids})))
        tokens.append(int(np.argmax(next(v for o, v in out.items() if o not in fed)[0, -1])))
        feeds = {fed[o]: out[o] for o in fed}
        ids = np.array([[tokens[-1]]], np.int64)
    return np.array(tokens, np.int64)


def dataset_action(args: argparse.Namespace) -> int:
    """`tunekit dataset export|train` (see `commands.dataset`)."""
    from tunekit.tuning import dataset as ds
    if args.action == "export":
        data = ds.export(args.inputs, args.output)
        print(f"{args.output}: {len(data.seconds)} trials of {len(data.tasks)} tasks, {data.features.shape[1]} "
              f"features each, from {len(data.devices)} device(s)")
        return 0
    if len(args.inputs) != 1:
        raise ArgumentError(f"dataset train reads one dataset, got {len(args.inputs)}: {' '.join(args.inputs)}")
    from pydantic import ValidationError
    from pydantic_core import PydanticCustomError

    from tunekit.recipe.components import component_spec
    try:
        spec = json.loads(args.model) if args.model.lstrip().startswith("{") else args.model
        model = component_spec("cost model", "xgboost", spec).create()
    except (ValueError, PydanticCustomError, ValidationError) as e:
        raise ArgumentError(f"--model {args.model}: {e}") from None
    data = ds.train(args.inputs[0], model, args.output)
    print(f"{args.output}: {model.name} trained on {len(data.seconds)} trials of {len(data.tasks)} tasks")
    return 0
