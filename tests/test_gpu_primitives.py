"""GPU-only schedule primitives (bind to blocks/threads, virtual threads, shared and
local memory with barriers), lowered and run in the reference interpreter."""
import numpy as np
import pytest

from tunekit import ir, te
from tunekit.errors import ScheduleError
from tunekit.ir import interp
from tunekit.ops.matmul import compute as matmul


def gpu_matmul(M, N, K, tile=4, threads=2, kt=4, vthread=False, copy_threads_x=None):
    A, B, C = matmul(M, N, K)
    s = te.create_schedule(C)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    by, ty_i = s[C].split(i, tile * threads)
    bx, tx_j = s[C].split(j, tile * threads)
    ty, yi = s[C].split(ty_i, tile)
    tx, xi = s[C].split(tx_j, tile)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, "blockIdx.y")
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(ty, "threadIdx.y")
    s[C].bind(tx, "threadIdx.x")
    if vthread:
        vy, yi2 = s[C].split(yi, 2)
        s[C].bind(vy, "vthread")
    s[CL].compute_at(s[C], tx)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(k, kt)
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ci)
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        a, b = s[S].op.axis
        f = s[S].fuse(a, b)
        fo, fi = s[S].split(f, threads * threads)
        t_y, t_x = s[S].split(fi, copy_threads_x or threads)
        s[S].bind(t_y, "threadIdx.y")
        s[S].bind(t_x, "threadIdx.x")
    return s, [A, B, C]


def check(s, tensors, M, N, K):
    p = te.lower(s, tensors)
    rng = np.random.default_rng(0)
    a, b = rng.random((M, K), np.float32), rng.random((K, N), np.float32)
    c = np.full((M, N), np.nan, np.float32)
    interp.run(p, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    return p


@pytest.mark.parametrize("shape", [(16, 16, 8), (16, 24, 12), (13, 11, 7)])
def test_shared_local_threads_match_numpy(shape):
    M, N, K = shape
    p = check(*gpu_matmul(M, N, K), M, N, K)
    text = str(p)
    assert "scope='shared'" in text and "scope='local'" in text and "barrier('shared')" in text
    loops = []

    class V(ir.Visitor):
        def visit_For(self, node):
            loops.append(node)
            self.generic_visit(node)
    V().visit(p.body)
    tags = [lp.tag for lp in loops if lp.kind == ir.THREAD]
    # the copy stages' thread loops merge into the launch's: each tag is bound once
    assert sorted(tags) == ["blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"]


def test_virtual_threads_match_numpy():
    check(*gpu_matmul(16, 16, 8, vthread=True), 16, 16, 8)


def test_shared_region_spans_the_block_and_local_one_thread():
    p = te.lower(*gpu_matmul(16, 16, 8, tile=4, threads=2, kt=4))
    text = str(p)
    assert "A_shared = alloc(float32, [8, 4], scope='shared')" in text   # block rows x k-tile
    assert "C_local = alloc(float32, [4, 4], scope='local')" in text     # one thread's tile


def test_more_threads_than_the_launch_is_an_error():
    s, tensors = gpu_matmul(16, 16, 8, copy_threads_x=4)   # the launch has 2 on threadIdx.x
    with pytest.raises(ScheduleError, match="needs 4 threads"):
        te.lower(s, tensors)
