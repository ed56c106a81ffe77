"""Templates that misbehave on purpose, to test measurement (registered by tests only)."""
from tunekit import Template, hookimpl, te


def wrong(cfg, device, M, N, K, dtype="float32"):
    """Computes A @ B + 1: every run is a wrong answer."""
    A = te.placeholder((M, K), "A", dtype)
    B = te.placeholder((K, N), "B", dtype)
    k = te.reduce_axis(K, "k")
    C0 = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C0")
    C = te.compute((M, N), lambda i, j: C0[i, j] + 1.0, name="C")
    cfg.define_knob("x", [0, 1, 2])
    return te.create_schedule(C), [A, B, C]


def hang(cfg, device, M, N, K, dtype="float32"):
    """A reduction over 2**40 steps: the kernel never returns in practice."""
    A = te.placeholder((M, K), "A", dtype)
    B = te.placeholder((K, N), "B", dtype)
    k = te.reduce_axis(1 << 40, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k % K] * B[k % K, j], axis=k), name="C")
    cfg.define_knob("x", [0, 1, 2])
    return te.create_schedule(C), [A, B, C]


def killer(cfg, device, M, N, K, dtype="float32"):
    """Kills the build worker that lowers a config with x == 1 (a crashing compiler)."""
    import multiprocessing
    import os
    A = te.placeholder((M, K), "A", dtype)
    B = te.placeholder((K, N), "B", dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    cfg.define_knob("x", [0, 1, 2, 3])
    if cfg["x"] == 1 and multiprocessing.parent_process() is not None:
        os._exit(9)
    return te.create_schedule(C), [A, B, C]


@hookimpl
def tunekit_templates():
    return [Template("matmul", "wrong", ("cpu",), wrong, priority=-100),
            Template("matmul", "hang", ("cpu",), hang, priority=-100),
            Template("matmul", "killer", ("cpu",), killer, priority=-100)]
