"""Whole networks, end to end: tunekit's tuned kernels against onnxruntime (CPU, all
cores) and PyTorch CPU eager (the torch.nn module itself, eval mode, inference_mode,
all cores), with the same weights and input, measured in the same run: each side in
its own process, rounds alternating in rotating order; the headline is the median of
the rounds, with their spread (min-max). The latency after 0, 16 and 64 (--quick: 0,
8, 32) trials per task (a curve, PNG), the wall time of tuning, a per-layer table;
the outputs are asserted to agree (PyTorch's and onnxruntime's before tuning,
tunekit's tuned network's with both after).

    python bench/e2e.py [--quick] [--nets resnet18,mobilenet_v2,dqn,dcgan,lstm_lm] [--size 224]
                        [--layouts rule|search]
                        [--stages 16,64] [--rounds 3]
    python bench/e2e.py --nets bert,gpt2 [--quick]
    python bench/e2e.py --precision int8 --nets resnet18,mobilenet_v2,bert [--quick]
    python bench/e2e.py --precision bf16 --nets resnet18,bert [--quick]


The networks are the paper's five, examples/networks.py's (torch.nn modules with seeded
weights, exported to ONNX with torch.onnx.export: the file and the module hold the same
weights): ResNet-18 and MobileNet-v2 (written at --size x --size), the Nature DQN
(1x4x84x84), DCGAN's generator (z 1x100x1x1) and the medium LSTM language model
(int64 token ids [35, 1]); and examples/small_net.py's (ONNX only, --size: no PyTorch
side). The transformers (not in the default list), examples/transformer_nets.py's: BERT-base
and GPT-2 small at 128 tokens, batch 1 (the `transformers` package's models from a config,
seeded random weights, exported by PyTorch's dynamo exporter); for them onnxruntime runs
twice, with its defaults and after its transformer optimizer (`onnxruntime.transformers.
optimizer`: GELU, skip + LayerNorm and attention fusions), and the report adds GFLOPS and
the share of tunekit's latency outside matmuls. Each side gets the same seeded inputs, by
name (`networks.inputs`: float32 N(0, 1) images and z, token ids in [0, vocab)). Needs
`pip install torch==2.13.0 onnxruntime threadpoolctl` (without torch ResNet-18 and
MobileNet-v2 are written with onnx.helper and PyTorch is left out, and the other three are
skipped), and for the transformers `pip install transformers onnxscript`.
Tuning resumes from bench/results/e2e/ (xgboost + annealing, the network's tasks
weighted by their counts, each task over every template that serves it).
PyTorch runs in processes of its own only: the tuner's process never imports it.

With --precision int8, each network is quantized by onnxruntime's own tools (examples/
quantized_nets.py: the CNNs statically, QDQ, per-channel, calibrated on seeded inputs; BERT and
GPT-2 dynamically) and tunekit on the quantized file runs against onnxruntime on the same file,
onnxruntime on the float32 file and tunekit's float32 (its databases shared with the float32
runs), without PyTorch; the report adds the accuracy: each side's largest difference from
onnxruntime's int8 output and from the float32 output, in quantization steps where the output is
quantized. With --precision bf16, tunekit compiles the float32 file with precision "bf16"
(matmuls and convolutions of constant weights on bfloat16 data and weights, float32
accumulation) against
onnxruntime and tunekit on the same float32 file; the report adds the largest difference of
each from onnxruntime's output, relative to its largest value.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import (
    RESULTS,
    alternate,
    in_process,
    load_now,
    machine_facts,
    machine_report,
    per_task,
    time_fn,
    torch_report,
    write_result,
)
from networks import NETS, SIZED  # numpy only: PyTorch is imported by what calls for it
from quantized_nets import quantize
from transformer_nets import SIZES as TRANSFORMERS

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_NETS = (*NETS, *TRANSFORMERS)   # the nets defined as torch.nn modules


def feeds(net: str, size: int, seed: int = 0) -> dict:
    """The network's seeded inputs by name (examples/networks.py's `inputs`; small_net's image "x")."""
    import networks
    import numpy as np
    if net == "small_net":
        return {"x": np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)}
    if net in TRANSFORMERS:
        import transformer_nets
        return transformer_nets.inputs(net, seed)
    return networks.inputs(net, size, seed)


def write_net(net: str, path: str, size: int, torch: bool) -> str:
    """Write the network's ONNX file (a spawned process: PyTorch stays out of the tuner's)."""
    if net == "small_net":
        from small_net import small_net
        return small_net(path, size=size)
    import networks
    if net in TRANSFORMERS:
        import transformer_nets
        return transformer_nets.export(net, path)
    if net not in SIZED:   # PyTorch only, a fixed input size
        return getattr(networks, net)(path)
    return getattr(networks, net)(path, size=size, exporter="torch" if torch else "onnx")


def quantize_net(net: str, src: str, dst: str, size: int) -> str:
    """Write the network quantized as --precision int8 says (see the module's doc)."""
    return quantize(src, dst, None if net in TRANSFORMERS else lambda seed: feeds(net, size, seed))


def int8_accuracy(outputs: dict, steps: dict, name: str) -> str:
    """Each int8 output's largest difference from onnxruntime's int8 one and from the float32 one (in
    quantization steps where `steps` has the output's); asserts that tunekit's difference from
    onnxruntime is no larger than quantizing itself makes (onnxruntime int8 against float32)."""
    import numpy as np
    step = steps.get(name)
    unit = (lambda d: f"{d / step:.2f} steps") if step else (lambda d: f"{d:.3g}")
    diff = lambda a, b: float(np.abs(outputs[a].astype(np.float64) - outputs[b]).max())
    to_ort, quant = diff("tunekit", "onnxruntime"), diff("onnxruntime", "onnxruntime-float32")
    assert to_ort <= max(quant, 1.01 * (step or 0)), f"tunekit's int8 output is {to_ort:.3g} off onnxruntime's"
    line = (f"output {name!r} (max |output| {float(np.abs(outputs['onnxruntime-float32']).max()):.3g}): tunekit "
            f"int8 against onnxruntime int8 {unit(to_ort)}")
    if step:
        share = float(np.mean(np.abs(outputs["tunekit"].astype(np.float64) - outputs["onnxruntime"]) > 1.01 * step))
        line += f" ({share:.2%} of values more than one step)"
    return (line + f"; against float32: tunekit int8 {unit(diff('tunekit', 'onnxruntime-float32'))}, "
            f"onnxruntime int8 {unit(quant)}")


def _compiled(path: str, db: str | None, precision: str = "float32"):
    import warnings

    import tunekit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the fallback warning: expected before tuning
        return tunekit.compile_model(path, target="x86", database=db, precision=precision)


def run_times(net, x: dict) -> list[float]:
    """Seconds per run of a compiled model on the inputs `x` (name -> array)."""
    return time_fn(lambda: net(**x), min_s=0.3, repeat=7)


def tunekit_times(path: str, db: str | None, x: dict, precision: str = "float32") -> list[float]:
    return run_times(_compiled(path, db, precision), x)


def _ort(path: str):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, x)[0]


def ort_optimized(path: str, out: str, net: str) -> str:
    """Write `path` after onnxruntime's transformer optimizer to `out`; returns what it fused.
    Its GPT-2 pass fails on the dynamo export (an IndexError in its Gemm post-processing), so a
    GPT-2 gets the BERT passes (GELU, skip + LayerNorm, attention): the fusions that apply to both."""
    import contextlib
    import io

    from onnxruntime.transformers import optimizer
    s = TRANSFORMERS[net]
    tried = []
    for kind in dict.fromkeys((net, "bert")):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                model = optimizer.optimize_model(path, model_type=kind, num_heads=s["heads"], hidden_size=s["hidden"])
        except Exception as e:   # its own failure on this export: said, and the next kind tried
            tried.append(f"model_type {kind!r} failed ({type(e).__name__}: {e})")
            continue
        model.save_model_to_file(out)
        fused = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
        return "; ".join([*tried, f"model_type {kind!r} fused {fused or 'nothing'}"])
    raise RuntimeError("onnxruntime's transformer optimizer: " + "; ".join(tried))


def ort_times(path: str, x: dict) -> list[float]:
    run = _ort(path)
    return time_fn(lambda: run(x), min_s=0.3, repeat=7)


def ort_output(path: str, x: dict):
    return _ort(path)(x)


def ort_report() -> str:
    import onnxruntime as ort
    return (f"onnxruntime {ort.__version__}: CPUExecutionProvider (its own MLAS kernels), "
            f"{os.cpu_count()} intra-op threads")


def _torch(net: str, x: dict):
    """The network's torch.nn module (eval mode, the seeded weights of its ONNX file) and its inputs as
    tensors, in the file's input order (the modules take them positionally)."""
    import networks
    import torch
    import transformer_nets
    torch.set_num_threads(os.cpu_count())
    nets = transformer_nets if net in TRANSFORMERS else networks
    return getattr(nets, f"{net}_module")(), [torch.from_numpy(v) for v in x.values()]


def torch_times(net: str, x: dict) -> list[float]:
    import torch
    module, args = _torch(net, x)
    with torch.inference_mode():
        return time_fn(lambda: module(*args), min_s=0.3, repeat=7)


def torch_output(net: str, x: dict):
    import torch
    module, args = _torch(net, x)
    with torch.inference_mode():
        return module(*args).numpy()


def check(outputs: dict, ref: str) -> str:
    """Assert that every output agrees with `ref`'s (rtol 1e-3, atol 1e-4 of its largest magnitude);
    returns the differences as a line."""
    import numpy as np
    want = outputs[ref]
    scale = float(np.abs(want).max())
    diffs = {k: float(np.abs(v - want).max()) for k, v in outputs.items() if k != ref}
    for k, v in outputs.items():
        assert v.shape == want.shape and np.allclose(v, want, rtol=1e-3, atol=1e-4 * scale), \
            f"{k}'s output differs from {ref}'s by up to {diffs[k]:.3g} (max |output| {scale:.3g})"
    return (f"outputs agree: max |difference| from {ref}'s (max |output| {scale:.3g}): "
            + ", ".join(f"{k} {d:.2e}" for k, d in diffs.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="0, 8 and 32 trials per task")
    ap.add_argument("--nets", default=",".join(NETS), help=f"of {', '.join((*NETS, *TRANSFORMERS))}, small_net "
                                                          f"(default: {', '.join(NETS)})")
    ap.add_argument("--size", type=int, default=224,
                    help=f"input height and width of {', '.join(SIZED)} and small_net (the others' are fixed)")
    ap.add_argument("--stages", default=None,
                    help="trials per task to tune to, in turn, after the untuned run (default 16,64; --quick 8,32; "
                         "0: untuned only)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    ap.add_argument("--layouts", choices=("rule", "search"), default="rule",
                    help="search: also tune each layer in the other channel blocks it may take, the compiled "
                         "network's blocks picked per tensor by the records (the graph tuner)")
    ap.add_argument("--precision", choices=("float32", "int8", "bf16"), default="float32",
                    help="int8: the networks quantized by onnxruntime; bf16: tunekit's bfloat16 products (see above)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "e2e"), help="databases and ONNX files")
    ap.add_argument("--results", default=RESULTS, help="where the figures' JSON files go (the README's: default)")
    a = ap.parse_args()
    stages = sorted({int(s) for s in (a.stages or ("8,32" if a.quick else "16,64")).split(",") if s} - {0})
    has_torch = importlib.util.find_spec("torch") is not None
    nets = a.nets.split(",")
    if unknown := [n for n in nets if n not in (*NETS, *TRANSFORMERS, "small_net")]:
        ap.error(f"--nets: no network {', '.join(unknown)} (of {', '.join((*NETS, *TRANSFORMERS))}, small_net)")
    if not has_torch and (skip := [n for n in nets if n not in (*SIZED, "small_net")]):
        print(f"skipping {', '.join(skip)}: writing them needs PyTorch (pip install torch==2.13.0)")
        nets = [n for n in nets if n not in skip]
    facts = machine_facts()
    print(machine_report(facts))
    facts["baselines"] = [in_process(ort_report),
                          in_process(torch_report) if has_torch else "PyTorch: not installed (no PyTorch side)"]
    print("\n".join(facts["baselines"]))
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    curves = {net: bench(net, a.size, a.out, stages, a.rounds, has_torch, a.layouts, facts, a.results, a.precision)
              for net in nets}
    print(f"\nwhole benchmark: {time.monotonic() - t0:.0f} s; machine load now {load_now()}")
    plot(curves, os.path.join(a.out, f"e2e_{'' if a.precision == 'float32' else a.precision + '_'}{a.size}.png"))


def _ms(r) -> str:
    med, lo, hi = r
    return f"{med * 1e3:.3f} ms ({lo * 1e3:.3f}-{hi * 1e3:.3f})"


def bench(net: str, size: int, out: str, stages: list, rounds: int, has_torch: bool,
          layouts: str, facts: dict, results: str = RESULTS, precision: str = "float32") -> dict:
    """Tune and time one network; write its figures to bench/results/e2e-<tag>.json. Returns the curve."""
    import tunekit
    started = time.time()
    exported = has_torch and net in TORCH_NETS   # the float32 file written by PyTorch from its module
    torch_side = exported and precision == "float32"
    tag = f"{net}_{size}" if net in (*SIZED, "small_net") else net   # names its file and databases
    path = in_process(write_net, net, os.path.join(out, f"{tag}.onnx"), size, exported)
    x = feeds(net, size)
    print(f"\n{net}: " + ", ".join(f"{k} {list(v.shape)} {v.dtype}" for k, v in x.items())
          + ("" if torch_side else f" ({precision if precision != 'float32' else 'no PyTorch module'}: "
                                   "onnxruntime and tunekit only)"))
    if torch_side:   # the module and the file hold the same network, else the comparison means nothing
        print("  " + check({"onnxruntime": in_process(ort_output, path, x),
                            "pytorch": in_process(torch_output, net, x)}, "onnxruntime"))
    sides = {"tunekit": None, "onnxruntime": (ort_times, (path, x))}
    tuned = {"tunekit": (path, tag, "float32")}   # side -> (the file tunekit runs, its databases' name, precision)
    if precision == "int8":
        qpath = in_process(quantize_net, net, path, os.path.join(out, f"{tag}_int8.onnx"), size)
        print(f"  quantized by onnxruntime: {'dynamically' if net in TRANSFORMERS else 'static QDQ, per-channel'}")
        tuned = {"tunekit": (qpath, f"{tag}_int8", "float32"), "tunekit-float32": (path, tag, "float32")}
        sides = {"tunekit": None, "onnxruntime": (ort_times, (qpath, x)),
                 "onnxruntime-float32": (ort_times, (path, x)), "tunekit-float32": None}
    elif precision == "bf16":
        tuned = {"tunekit": (path, f"{tag}_bf16", "bf16"), "tunekit-float32": (path, tag, "float32")}
        sides["tunekit-float32"] = None
    elif net in TRANSFORMERS:
        opt = os.path.join(out, f"{tag}_ortopt.onnx")
        print("  onnxruntime's transformer optimizer: " + in_process(ort_optimized, path, opt, net))
        print("  " + check({"onnxruntime": in_process(ort_output, path, x),
                            "onnxruntime-optimized": in_process(ort_output, opt, x)}, "onnxruntime"))
        sides["onnxruntime-optimized"] = (ort_times, (opt, x))
    if torch_side:
        sides["pytorch"] = (torch_times, (net, x))
    points = {side: [] for side in sides}
    t_tune, dbs, done = 0.0, dict.fromkeys(tuned), 0
    name = tuned["tunekit"][1]
    figures = {"net": net, "tag": name, "precision": precision, "rounds": rounds, "layouts": layouts, "stages": []}
    if net in TRANSFORMERS:
        import transformer_nets
        figures["flops"] = transformer_nets.flops(net)
    for trials in (0, *stages):
        for side, (file, dbname, how) in tuned.items() if trials else ():
            # each stage tunes on in its own copy of the previous stage's database (resumable, and
            # the latency after 8 trials is measured on the records of 8 trials, not of the last stage)
            db, before = os.path.join(out, f"{dbname}.t{trials}.db"), dbs[side]
            if before is not None and not os.path.exists(db):
                copy_database(before, db)
            dbs[side] = db
            t0 = time.monotonic()
            states = tunekit.tune([{"model": file, "layouts": layouts, "precision": how}], target="x86",
                                  model="xgboost", explorer="annealing", trials=trials, database=db,
                                  tuning={"batch_size": 8})
            tasks = per_task(states)
            print(f"  {side}: tuned to {trials} trials per task: {sum(t.done for t in tasks)} trials this run, "
                  f"{sum(len(t.trials) for t in tasks)} known, over {len(tasks)} tasks ({len(states)} "
                  f"task-templates) in {time.monotonic() - t0:.0f} s (a resumed run measures only what is missing)")
            if side == "tunekit":   # the stages share one run (a task list keys it): done counts them all
                t_tune += time.monotonic() - t0
                done = sum(t.done for t in tasks)
                known, n_tasks = sum(len(t.trials) for t in tasks), len(tasks)
        for side, (file, _, how) in tuned.items():
            sides[side] = (tunekit_times, (file, dbs[side], x, how))
        r = alternate(sides, rounds)
        # the trials behind the figure: this run's (all stages so far) and all the database knows; a run
        # whose database held nothing before it is from scratch
        figures["stages"].append({"trials_per_task": trials, "tuning_s": round(t_tune, 1),
                                  **({"tasks": n_tasks, "trials_this_run": done, "trials_known": known,
                                      "from_scratch": known == done} if trials else {}),
                                  "seconds": {k: v.as_dict()
                                              for k, v in r.items() if v}})
        for side in points:
            points[side].append((trials, r[side][0]))
        tk = r["tunekit"][0]
        others = [k for k in sides if k != "tunekit"]
        vs = [f"{k} {_ms(r[k])}" for k in others]
        speed = [f"{r[k][0] / tk:.2f}x {k}'s speed" for k in others]
        if net in TRANSFORMERS:
            import transformer_nets
            gf = transformer_nets.flops(net) / 1e9
            ort = min(r[k][0] for k in ("onnxruntime", "onnxruntime-optimized") if k in r)
            speed.append(f"{gf / tk:.0f} G{'OPS' if precision == 'int8' else 'FLOPS'} effective ({gf:.1f} "
                         f"GFLOP a run; onnxruntime {gf / ort:.0f})")
        print(f"  latency after {trials:3d} trials/task, median of {rounds} rotating rounds (min-max): "
              f"tunekit {_ms(r['tunekit'])}, {', '.join(vs)}: tunekit is {', '.join(speed)}")
    (file, _, how), db = tuned["tunekit"], dbs["tunekit"]
    model = _compiled(file, db, how)
    outs = {"onnxruntime": in_process(ort_output, file, x), "tunekit": model(**x)[0]}
    if precision == "int8":
        outs["onnxruntime-float32"] = in_process(ort_output, path, x)
        figures["check"] = int8_accuracy(outs, model.graph.output_steps, model.graph.outputs[0])
    elif precision == "bf16":   # bfloat16's 8 bits are not float32's: told, not asserted to 1e-3
        outs["tunekit-float32"] = _compiled(path, dbs["tunekit-float32"])(**x)[0]
        top = float(abs(outs["onnxruntime"]).max())
        figures["check"] = ("largest difference from onnxruntime's output, relative to its largest value: "
                            + ", ".join(f"{k} {float(abs(outs[k] - outs['onnxruntime']).max()) / top:.2e}"
                                        for k in ("tunekit", "tunekit-float32")))
    else:
        if torch_side:
            outs["pytorch"] = in_process(torch_output, net, x)
        figures["check"] = check(outs, "onnxruntime")
    print("  tuned: " + figures["check"])
    rows = model.profile(repeat=20)
    total = sum(r["seconds"] for r in rows)
    print(f"per layer of {net} (tuned):")
    width = max(len(r["layer"]) for r in rows)
    for r in rows:
        print(f"  {r['layer']:{width}s} {r['op']:17s} {r['template']:7s} {r['seconds'] * 1e3:7.3f} ms "
              f"{r['seconds'] / total:5.0%} {r['gflops']:7.1f} GFLOPS {'tuned' if r['tuned'] else 'fallback'} "
              f"(in runs {r['in_run'] * 1e3:.3f} ms)")
    print(f"  activation buffers {model.peak_bytes / 2**20:.2f} MiB; layer sum {total * 1e3:.3f} ms alone, "
          f"{sum(r['in_run'] for r in rows) * 1e3:.3f} ms in runs; median run "
          f"{statistics.median(run_times(model, x)) * 1e3:.3f} ms")
    from tunekit.cli.run import matmul_share
    print(f"  {matmul_share(rows)}")
    print(f"  figures: {write_result(f'e2e-{name}', facts, figures, started, results)}")
    return points


def copy_database(src: str, dst: str) -> None:
    """Copy a tuning database with sqlite's backup (consistent with its write-ahead log)."""
    import sqlite3
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    with b:
        a.backup(b)
    a.close()
    b.close()


def plot(curves: dict, png: str) -> None:
    """Latency against trials per task, one panel per network (the baselines as flat lines)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(install matplotlib for the latency curve PNG)")
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6), squeeze=False)
    styles = {"tunekit": "o-", "onnxruntime": "s--", "onnxruntime-optimized": "d--", "pytorch": "^:",
              "onnxruntime-float32": "x--", "tunekit-float32": "v-"}
    for ax, (net, points) in zip(axes[0], curves.items()):
        for side, pts in points.items():
            xs, ys = zip(*pts)
            ax.plot(xs, [y * 1e3 for y in ys], styles[side], label=side)
        ax.set(title=net, xlabel="trials per task", ylabel="latency (ms)")
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"latency curve: {png}")


if __name__ == "__main__":
    main()
