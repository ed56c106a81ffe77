"""The x86 / arm-cpu schedule templates: random configs on small odd shapes build and
match the op's numpy reference (compiled, and in the reference interpreter on tiny
shapes); every template's space on its named workloads is non-empty and lowers;
every template cross-compiles to aarch64 object code."""
from __future__ import annotations

import platform
import random
import time

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from tunekit_plugins.targets.llvm.cpu import ArmCpuTarget, X86Target
from tunekit_plugins.targets.llvm.templates import TEMPLATES

import tunekit
from tunekit import registry
from tunekit.ir import interp
from tunekit.measure.timing import mismatch

ON_X86 = platform.machine().lower() in ("x86_64", "amd64")
needs_x86 = pytest.mark.skipif(not ON_X86, reason="runs x86 code")
IDS = [f"{t.op}-{t.name}" for t in TEMPLATES]

# small odd shapes: tails everywhere (7, 10, 13 ...), strides, dilation, asymmetric padding
SHAPES = {
    "matmul": [{"M": 7, "N": 10, "K": 13}, {"M": 13, "N": 37, "K": 7}, {"M": 33, "N": 70, "K": 65}],
    "batch_matmul": [{"B": 3, "M": 7, "N": 10, "K": 13}, {"B": 2, "M": 20, "N": 33, "K": 9}],
    "conv2d": [{"N": 1, "C": 3, "H": 7, "W": 10, "K_out": 5, "R": 3, "S": 3, "padding": 1},
               {"N": 2, "C": 6, "H": 13, "W": 9, "K_out": 20, "R": 3, "S": 2, "stride": 2, "padding": (1, 0)},
               {"N": 1, "C": 5, "H": 10, "W": 11, "K_out": 33, "R": 1, "S": 1, "stride": 2},
               {"N": 1, "C": 3, "H": 12, "W": 13, "K_out": 7, "R": 2, "S": 3, "stride": (3, 2), "padding": (0, 2),
                "dilation": (2, 1)}],
    "depthwise_conv2d": [{"N": 1, "C": 3, "H": 7, "W": 10, "R": 3, "S": 3, "padding": 1},
                         {"N": 2, "C": 6, "H": 13, "W": 9, "R": 3, "S": 2, "stride": 2, "padding": (1, 0)},
                         {"N": 1, "C": 5, "H": 20, "W": 37, "R": 3, "S": 3, "padding": 1},
                         {"N": 1, "C": 4, "H": 11, "W": 9, "R": 3, "S": 3, "stride": (2, 1), "padding": 2,
                          "dilation": (1, 2)}],
    "max_pool2d": [{"N": 1, "C": 3, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1},
                   {"N": 2, "C": 4, "H": 8, "W": 7, "R": 2, "S": 2, "stride": 2}],
    "dense": [{"M": 1, "N": 37, "K": 64, "bias": True, "activation": "relu"}, {"M": 3, "N": 10, "K": 13},
              {"M": 2, "N": 20, "K": 48, "bias": True, "residual": True, "activation": "relu6"}],
    "group_conv2d": [{"N": 1, "C": 6, "H": 7, "W": 10, "K_out": 9, "R": 3, "S": 3, "padding": 1, "groups": 3},
                     {"N": 2, "C": 8, "H": 13, "W": 9, "K_out": 4, "R": 3, "S": 2, "stride": 2, "padding": (1, 0),
                      "groups": 2, "bias": True, "activation": "relu"}],
    "avg_pool2d": [{"N": 1, "C": 3, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1},
                   {"N": 2, "C": 4, "H": 8, "W": 7, "R": 3, "S": 2, "padding": (1, 0), "count_include_pad": True}],
    "global_avg_pool2d": [{"N": 1, "C": 5, "H": 7, "W": 7}, {"N": 2, "C": 3, "H": 9, "W": 13}],
    "lstm_step": [{"B": 1, "H": 37}, {"B": 2, "H": 16}],
    "qmatmul": [{"M": 7, "N": 10, "K": 12}, {"M": 13, "N": 37, "K": 64, "out_dtype": "int8", "zero": -3},
                {"M": 33, "N": 70, "K": 20, "out_dtype": "uint8", "zero": 128}],
    "bmatmul": [{"M": 7, "N": 10, "K": 12}, {"M": 13, "N": 37, "K": 64, "bias": True, "activation": "relu"}],
    "qconv2d": [{"N": 1, "H": 9, "W": 10, "C": 12, "K_out": 40, "R": 3, "S": 3, "padding": 1, "pad_value": 7},
                {"N": 2, "H": 11, "W": 9, "C": 4, "K_out": 16, "R": 3, "S": 2, "stride": 2, "padding": (1, 0),
                 "out_dtype": "int8", "zero": -3}],
    "qdepthwise_conv2d": [{"N": 1, "H": 9, "W": 10, "C": 40, "R": 3, "S": 3, "padding": 1, "pad_value": 7},
                          {"N": 2, "H": 11, "W": 9, "C": 12, "R": 3, "S": 2, "stride": 2, "padding": (1, 0),
                           "dtype": "int8", "out_dtype": "int8", "zero": -3, "pad_value": -5}],
}
TINY = {"matmul": {"M": 5, "N": 7, "K": 3}, "batch_matmul": {"B": 2, "M": 3, "N": 5, "K": 2},
        "conv2d": {"N": 1, "C": 2, "H": 5, "W": 6, "K_out": 3, "R": 3, "S": 3, "stride": 2, "padding": 1},
        "depthwise_conv2d": {"N": 1, "C": 3, "H": 5, "W": 6, "R": 3, "S": 3, "padding": 1},
        "max_pool2d": {"N": 1, "C": 2, "H": 5, "W": 6, "R": 3, "S": 3, "stride": 2, "padding": 1},
        "dense": {"M": 2, "N": 5, "K": 16, "bias": True, "activation": "relu"},
        "group_conv2d": {"N": 1, "C": 4, "H": 5, "W": 6, "K_out": 6, "R": 3, "S": 3, "stride": 2, "padding": 1,
                         "groups": 2},
        "avg_pool2d": {"N": 1, "C": 2, "H": 5, "W": 6, "R": 3, "S": 3, "stride": 2, "padding": 1},
        "global_avg_pool2d": {"N": 1, "C": 2, "H": 5, "W": 6}, "lstm_step": {"B": 1, "H": 5},
        "qmatmul": {"M": 3, "N": 5, "K": 8, "out_dtype": "int8"}, "bmatmul": {"M": 3, "N": 5, "K": 6},
        "qconv2d": {"N": 1, "H": 5, "W": 6, "C": 4, "K_out": 5, "R": 3, "S": 3, "stride": 2, "padding": 1},
        "qdepthwise_conv2d": {"N": 1, "H": 5, "W": 6, "C": 5, "R": 3, "S": 3, "stride": 2, "padding": 1}}
# blocked layouts: blocks of a vector, of half one (short vectors) and of two (unrolled vectors)
BLOCKED = {
    "conv2d": [{"N": 1, "C": 16, "H": 7, "W": 10, "K_out": 24, "R": 3, "S": 3, "padding": 1, "layout": "NCHW8c"},
               {"N": 2, "C": 3, "H": 13, "W": 9, "K_out": 8, "R": 3, "S": 2, "stride": 2, "padding": (1, 0),
                "layout": "NCHW4c", "data_layout": "NCHW"},
               {"N": 1, "C": 32, "H": 9, "W": 11, "K_out": 32, "R": 1, "S": 1, "stride": 2, "layout": "NCHW16c"},
               {"N": 1, "C": 8, "H": 12, "W": 13, "K_out": 16, "R": 2, "S": 3, "stride": (3, 2), "padding": (0, 2),
                "dilation": (2, 1), "layout": "NCHW8c"}],
    "bconv2d": [{"N": 1, "C": 16, "H": 7, "W": 10, "K_out": 24, "R": 3, "S": 3, "padding": 1, "layout": "NCHW8c",
                 "bias": True, "activation": "relu"},
                {"N": 2, "C": 6, "H": 13, "W": 9, "K_out": 8, "R": 3, "S": 2, "stride": 2, "padding": (1, 0),
                 "layout": "NCHW4c", "data_layout": "NCHW"}],
    "depthwise_conv2d": [{"N": 1, "C": 16, "H": 7, "W": 10, "R": 3, "S": 3, "padding": 1, "layout": "NCHW8c"},
                         {"N": 2, "C": 8, "H": 13, "W": 9, "R": 3, "S": 2, "stride": 2, "padding": (1, 0),
                          "layout": "NCHW4c"},
                         {"N": 1, "C": 32, "H": 7, "W": 7, "R": 7, "S": 7, "layout": "NCHW16c"},
                         {"N": 1, "C": 8, "H": 11, "W": 9, "R": 3, "S": 3, "stride": (2, 1), "padding": 2,
                          "dilation": (1, 2), "layout": "NCHW8c"}],
    "max_pool2d": [{"N": 1, "C": 16, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1, "layout": "NCHW8c"},
                   {"N": 2, "C": 8, "H": 8, "W": 7, "R": 2, "S": 2, "stride": 2, "layout": "NCHW4c"}],
    "avg_pool2d": [{"N": 1, "C": 16, "H": 9, "W": 10, "R": 3, "S": 3, "stride": 2, "padding": 1, "layout": "NCHW8c"},
                   {"N": 2, "C": 32, "H": 8, "W": 7, "R": 3, "S": 2, "padding": (1, 0), "count_include_pad": True,
                    "layout": "NCHW16c"}],
    "global_avg_pool2d": [{"N": 1, "C": 16, "H": 7, "W": 7, "layout": "NCHW8c"},
                          {"N": 2, "C": 8, "H": 20, "W": 20, "layout": "NCHW4c"}],
    "conv2d_winograd": [{"N": 1, "C": 16, "H": 7, "W": 10, "K_out": 32, "R": 3, "S": 3, "padding": 1, "tile": 2,
                         "layout": "NCHW16c", "data_layout": "NCHW8c"},
                        {"N": 2, "C": 8, "H": 11, "W": 9, "K_out": 8, "R": 3, "S": 3, "tile": 4, "layout": "NCHW4c"}],
    "mbconv": [{"N": 1, "C": 16, "H": 7, "W": 10, "E": 48, "K_out": 16, "residual": True, "layout": "NCHW8c"},
               {"N": 2, "C": 8, "H": 9, "W": 7, "E": 24, "K_out": 16, "stride": 2, "layout": "NCHW4c"},
               {"N": 1, "C": 32, "H": 6, "W": 5, "E": 32, "K_out": 32, "expand": False, "layout": "NCHW16c"}],
}
TINY_BLOCKED = {"conv2d": {"N": 1, "C": 3, "H": 5, "W": 6, "K_out": 4, "R": 3, "S": 3, "stride": 2, "padding": 1,
                           "layout": "NCHW4c", "data_layout": "NCHW"},
                "bconv2d": {"N": 1, "C": 4, "H": 5, "W": 6, "K_out": 4, "R": 3, "S": 3, "stride": 2, "padding": 1,
                            "layout": "NCHW4c"},
                "depthwise_conv2d": {"N": 1, "C": 4, "H": 5, "W": 6, "R": 3, "S": 3, "padding": 1,
                                     "layout": "NCHW4c"},
                "max_pool2d": {"N": 1, "C": 4, "H": 5, "W": 6, "R": 3, "S": 3, "stride": 2, "padding": 1,
                               "layout": "NCHW4c"},
                "avg_pool2d": {"N": 1, "C": 4, "H": 5, "W": 6, "R": 3, "S": 3, "stride": 2, "padding": 1,
                               "layout": "NCHW4c"},
                "global_avg_pool2d": {"N": 1, "C": 8, "H": 5, "W": 6, "layout": "NCHW4c"},
                "conv2d_winograd": {"N": 1, "C": 4, "H": 5, "W": 6, "K_out": 4, "R": 3, "S": 3, "padding": 1,
                                    "tile": 4, "layout": "NCHW4c"},
                "mbconv": {"N": 1, "C": 4, "H": 5, "W": 6, "E": 8, "K_out": 4, "residual": True, "layout": "NCHW4c"}}


def shapes(template) -> list[dict]:
    return (BLOCKED if template.blocked else SHAPES)[template.op]


WORKLOADS = {"matmul": ["matmul-1024"], "conv2d": [f"resnet18.C{i}" for i in range(1, 13)],
             "depthwise_conv2d": [f"mobilenet.D{i}" for i in range(1, 10)]}


@pytest.fixture(scope="module")
def x86():
    return X86Target()


def configs(space, seed: int, n: int) -> list[int]:
    """`n` valid configs and `n` unconstrained ones (constraints shape speed, not correctness)."""
    rng = random.Random(seed)
    return space.sample(rng, n) + [rng.randrange(space.size) for _ in range(n)]


def check(ts, index: int, run) -> None:
    op, args = ts.task.op, ts.task.args
    inputs = op.random_inputs(args, np.random.default_rng(index))
    outs = [np.full(shape, np.nan, dtype) for shape, dtype in op.output_shapes(args)]
    run(ts.program(index), inputs, outs)
    bad = mismatch(outs, op.reference(*inputs, **args), *op.tolerance(args, inputs))
    assert not bad, f"{ts.task.name}: {ts.space.get(index)}: {bad}"


@needs_x86
@pytest.mark.parametrize("template", TEMPLATES, ids=IDS)
def test_random_configs_build_and_match_numpy(x86, template):
    def run(program, inputs, outs):
        x86.load(x86.build(program))(*inputs, *outs)
    for k, args in enumerate(shapes(template)):
        ts = tunekit.Task(template.op, args, template=template.name).bind(x86)
        for index in configs(ts.space, k, 2):
            check(ts, index, run)


@pytest.mark.parametrize("template", TEMPLATES, ids=IDS)
def test_random_configs_in_the_interpreter(template):
    tiny = (TINY_BLOCKED if template.blocked else TINY)[template.op]
    ts = tunekit.Task(template.op, tiny, template=template.name).bind(X86Target())
    for index in configs(ts.space, 0, 1):
        check(ts, index, lambda program, inputs, outs: interp.run(program, *inputs, *outs))


@pytest.mark.parametrize("template", [t for t in TEMPLATES if t.op in WORKLOADS and not t.blocked],
                         ids=[i for t, i in zip(TEMPLATES, IDS) if t.op in WORKLOADS and not t.blocked])
def test_spaces_of_the_named_workloads(template, capsys):
    sizes = {}
    for wl in WORKLOADS[template.op]:
        ts = tunekit.Task(workload=wl, template=template.name).bind(X86Target())
        (index,) = ts.space.sample(random.Random(0), 1)
        program = ts.program(index)
        assert [b.shape for b in program.params] == [t.shape for t in ts.task.op.compute(**ts.task.args)]
        sizes[wl] = (ts.space.size, ts.space.valid_fraction())
    with capsys.disabled():
        print(f"\n{template.op}/{template.name}: "
              + ", ".join(f"{w} {n} ({v:.0%} valid)" for w, (n, v) in sizes.items()))


def test_default_templates():
    x86 = X86Target()
    names = {op: tunekit.Task(op, SHAPES[op][0]).bind(x86).template.name for op in SHAPES}
    assert names == {"matmul": "packed", "batch_matmul": "packed", "conv2d": "direct", "depthwise_conv2d": "rows",
                     "max_pool2d": "rows", "dense": "rows", "group_conv2d": "direct", "avg_pool2d": "rows",
                     "global_avg_pool2d": "rows", "lstm_step": "panels", "qmatmul": "tiled",
                     "bmatmul": "tiled", "qconv2d": "tiled", "qdepthwise_conv2d": "rows"}
    assert {t.name for t in registry().templates if t.op == "matmul" and t.serves(x86)} >= {"tiled", "packed"}


@pytest.mark.parametrize("target", [ArmCpuTarget(), X86Target(X86Target.Options(mcpu="haswell"))],
                         ids=["aarch64", "x86-avx2"])
def test_cross_compiles(target):
    """NEON (4 lanes, 32 registers) and AVX2 (8 lanes, 16 registers) spaces build."""
    machine = {"arm-cpu": 183, "x86": 62}[target.name]     # ELF e_machine: EM_AARCH64, EM_X86_64
    for template in TEMPLATES:
        args = shapes(template)[-1]
        ts = tunekit.Task(template.op, args, template=template.name).bind(target)
        (index,) = ts.space.sample(random.Random(1), 1)
        data = target.build(ts.program(index)).data
        assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == machine


# -- performance sanity check (not a test) ---------------------------------------------------

# hand-picked configs (x86, 2 cores, AVX-512) for `python tests/test_cpu_templates.py [threads [rounds]]`
HAND = {
    "matmul-1024": {"tile_n": [16, 64], "tile_m": [86, 2, 6], "tile_k": [4, 256], "k_outer": False, "pack_root": False},
    "resnet18.C2": {"tile_oc": [16, 4], "tile_p": [34, 96], "tile_rc": [2, 32]},
    "resnet18.C6": {"tile_oc": [16, 8], "tile_p": [27, 32], "tile_rc": [2, 64]},
    "resnet18.C9": {"tile_oc": [16, 16], "tile_p": [14, 16], "tile_rc": [1, 256]},
    "resnet18.C12": {"tile_oc": [32, 16], "tile_p": [4, 16], "tile_rc": [2, 256]},
}


def _side(conn, side: str, workload: str, threads: int) -> None:
    """One side of the comparison in its own process: times a run each time it is asked."""
    task = tunekit.Task(workload=workload)
    op, args = task.op, task.args
    inputs = op.random_inputs(args, np.random.default_rng(0))
    if side == "tunekit":
        target = X86Target(X86Target.Options(num_threads=threads))
        ts = task.bind(target)
        kernel = target.load(target.build(ts.program(ts.space.from_json(HAND[workload]).index)))
        outs = [np.empty(shape, dtype) for shape, dtype in op.output_shapes(args)]
        run = lambda: kernel(*inputs, *outs)
    elif op.name == "matmul":                   # numpy / OpenBLAS (threads from OPENBLAS_NUM_THREADS)
        run = lambda: inputs[0] @ inputs[1]
    else:
        import torch
        torch.set_num_threads(threads)
        x, w = (torch.from_numpy(a) for a in inputs)
        run = lambda: torch.nn.functional.conv2d(x, w, stride=args["stride"], padding=args["padding"])
    for _ in range(5):
        run()
    number = max(3, int(0.05 / max(1e-6, min(_timed(run, 1) for _ in range(3)))))
    while conn.recv():
        conn.send(_timed(run, number))


def _timed(run, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        run()
    return (time.perf_counter() - t0) / number


def _report(threads: int = 2, rounds: int = 9) -> None:
    """Each hand-picked config beside its baseline (numpy for matmul, PyTorch for conv2d),
    each side in its own process, alternating; median GFLOPS and the ratio's spread.
    numpy's threads follow OPENBLAS_NUM_THREADS (unset: all cores)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    for workload in HAND:
        pipes = {}
        for side in ("tunekit", "baseline"):
            a, b = ctx.Pipe()
            ctx.Process(target=_side, args=(b, side, workload, threads), daemon=True).start()
            pipes[side] = a
        costs = {side: [] for side in pipes}
        for _ in range(rounds):
            for side, pipe in pipes.items():
                time.sleep(0.3)       # the other side's threads stop spinning (OpenBLAS spins ~0.1 s)
                pipe.send(True)
                costs[side].append(pipe.recv())
        for pipe in pipes.values():
            pipe.send(False)
        flops = tunekit.Task(workload=workload).flops
        ours, base = np.array(costs["tunekit"]), np.array(costs["baseline"])
        ratio = base / ours
        print(f"{workload:13s} {threads} threads: tunekit {flops / np.median(ours) / 1e9:6.1f} GFLOPS, "
              f"baseline {flops / np.median(base) / 1e9:6.1f} GFLOPS, ratio {np.median(ratio):.2f} "
              f"(quartiles {np.percentile(ratio, 25):.2f}-{np.percentile(ratio, 75):.2f})", flush=True)


if __name__ == "__main__":
    import sys
    _report(*[int(a) for a in sys.argv[1:3]])
