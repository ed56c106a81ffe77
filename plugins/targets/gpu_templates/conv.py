"""GPU conv2d (NCHW, direct) and depthwise conv2d templates.

`conv2d_shared` (AutoTVM's CUDA conv2d_direct): a block computes a
(F x Y x X) tile of the output; per step of the (rc, ry, rx) reduction it stages
the input patch (padding inlined into the copy) and the weights in shared memory,
copied by all threads; each thread accumulates an (FI x YI x XI) register tile;
virtual threads optional.

`conv2d_register` and `depthwise_register` (no shared memory: Mali, CPU OpenCL):
each thread accumulates its register tile straight from global memory (padding
inlined into the loads), the XI columns vectorized. `conv2d_register` schedules
group_conv2d too (its one GPU template: a block's channels may span groups, which
the shared-memory staging does not tile).

All three fuse an epilogue (bias, residual, activation): the register tile is the
convolution stage itself, in local memory, and the stage that writes it out to
global memory applies the epilogue on the way (no extra pass over the output).
"""
from __future__ import annotations

from tunekit import te
from tunekit.ops import out_size, pair
from tunekit.ops.conv2d import compute as conv_compute
from tunekit.ops.depthwise_conv2d import compute as depthwise_compute
from tunekit.ops.epilogue import accumulator

from .common import bind, block_limits, cooperative_fetch, fits_block

MAX_ACC = 64


def _geometry(H, W, R, S, stride, padding, dilation):
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    return (out_size(H, R, sh, ph, dh), out_size(W, S, sw, pw, dw)), (sh, sw), (dh, dw), bool(ph or pw)


def conv2d_shared(cfg, device, N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                  **epilogue):
    *params, out = conv_compute(N, C, H, W, K_out, R, S, stride, padding, dilation, dtype, **epilogue)
    (OH, OW), (sh, sw), (dh, dw), has_pad = _geometry(H, W, R, S, stride, padding, dilation)
    s = te.create_schedule(out)
    weight = params[1]
    OL = accumulator(s, out, epilogue)
    src = OL.op.inputs[0]
    AA = s.cache_read(src, "shared", [OL])
    WW = s.cache_read(weight, "shared", [OL])
    if has_pad:
        s[src].compute_inline()
    _, _, max_shared = block_limits(device)

    cfg.define_split("tile_f", K_out, num_outputs=4, filter=lambda v: v[1] <= 2)
    cfg.define_split("tile_y", OH, num_outputs=4, filter=lambda v: v[1] <= 2)
    cfg.define_split("tile_x", OW, num_outputs=4, filter=lambda v: v[1] <= 2)
    cfg.define_split("tile_rc", C, num_outputs=2, filter=lambda v: v[1] <= 32)
    cfg.define_split("tile_ry", R, num_outputs=2, candidates=[(R, 1), (1, R)], policy="candidates")
    cfg.define_split("tile_rx", S, num_outputs=2, candidates=[(S, 1), (1, S)], policy="candidates")
    cfg.define_knob("unroll", [False, True])

    def shared_bytes(c):
        rci, ryi, rxi = c["tile_rc"][1], c["tile_ry"][1], c["tile_rx"][1]
        ty_, tx_ = c["tile_y"][2] * c["tile_y"][3], c["tile_x"][2] * c["tile_x"][3]
        patch = rci * ((ty_ - 1) * sh + (ryi - 1) * dh + 1) * ((tx_ - 1) * sw + (rxi - 1) * dw + 1)
        return 4 * (patch + c["tile_f"][2] * c["tile_f"][3] * rci * ryi * rxi)

    cfg.constrain(lambda c: fits_block((c["tile_x"][2], c["tile_y"][2], c["tile_f"][2]), device)
                  and c["tile_f"][3] * c["tile_y"][3] * c["tile_x"][3] <= MAX_ACC
                  and shared_bytes(c) <= max_shared)

    n, f, y, x = s[out].op.axis
    bf, vf, tf, fi = cfg["tile_f"].apply(s, out, f)
    by, vy, ty, yi = cfg["tile_y"].apply(s, out, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, out, x)
    s[out].reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    bz = s[out].fuse(n, bf)
    bind(s[out], [bz, by, bx, vf, vy, vx, tf, ty, tx],
         ["blockIdx.z", "blockIdx.y", "blockIdx.x", "vthread", "vthread", "vthread",
          "threadIdx.z", "threadIdx.y", "threadIdx.x"])
    s[OL].compute_at(s[out], tx)

    n, f, y, x = s[OL].op.axis
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rci = cfg["tile_rc"].apply(s, OL, rc)
    ryo, ryi = cfg["tile_ry"].apply(s, OL, ry)
    rxo, rxi = cfg["tile_rx"].apply(s, OL, rx)
    s[OL].reorder(rco, ryo, rxo, rci, ryi, rxi, n, f, y, x)
    for ax in (f, y, x):
        s[OL].unroll(ax)
    if cfg["unroll"]:
        s[OL].unroll(rxi)
        s[OL].unroll(ryi)
    threads = (cfg["tile_x"][2], cfg["tile_y"][2], cfg["tile_f"][2])
    for cache in (AA, WW):
        s[cache].compute_at(s[OL], rxo)
        cooperative_fetch(s, cache, threads)
    return s, [*params, out]


def _register_tiles(cfg, s, out, OL, f_extent, OH, OW, device, dtype, red_axes):
    """The shared no-shared-memory schedule of conv2d and depthwise: output
    (n, f, y, x) split into block/thread/register tiles, XI vectorized."""
    lanes = max(1, min(16, device.lanes(dtype)))
    cfg.define_split("tile_f", f_extent, num_outputs=3, filter=lambda v: v[2] <= 16)
    cfg.define_split("tile_y", OH, num_outputs=3, filter=lambda v: v[2] <= 8)
    cfg.define_split("tile_x", OW, num_outputs=3, filter=lambda v: v[2] <= 4 * lanes)
    cfg.define_knob("vec", [w for w in (1, 2, 4, 8, 16) if w <= lanes])
    cfg.define_knob("unroll", [False, True])
    cfg.constrain(lambda c: fits_block((c["tile_x"][1], c["tile_y"][1], c["tile_f"][1]), device)
                  and c["tile_f"][2] * c["tile_y"][2] * c["tile_x"][2] <= MAX_ACC * max(1, lanes // 4)
                  and c["tile_x"][2] % c["vec"] == 0)
    n, f, y, x = s[out].op.axis
    bf, tf, fi = cfg["tile_f"].apply(s, out, f)
    by, ty, yi = cfg["tile_y"].apply(s, out, y)
    bx, tx, xi = cfg["tile_x"].apply(s, out, x)
    s[out].reorder(n, bf, by, bx, tf, ty, tx, fi, yi, xi)
    bz = s[out].fuse(n, bf)
    bind(s[out], [bz, by, bx, tf, ty, tx], ["blockIdx.z", "blockIdx.y", "blockIdx.x",
                                            "threadIdx.z", "threadIdx.y", "threadIdx.x"])
    vec = cfg["vec"]
    if vec > 1:
        _, xv = s[out].split(xi, factor=vec)
        s[out].vectorize(xv)
    s[OL].compute_at(s[out], tx)
    n, f, y, x = s[OL].op.axis
    red = red_axes(s[OL])
    xo, xv = s[OL].split(x, factor=vec)
    s[OL].reorder(*red, n, f, y, xo, xv)
    for ax in (f, y, xo):
        s[OL].unroll(ax)
    if vec > 1:
        s[OL].vectorize(xv)
    if cfg["unroll"]:
        for ax in red[-2:]:
            s[OL].unroll(ax)


def conv2d_register(cfg, device, N, C, H, W, K_out, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                    groups=1, **epilogue):
    *params, out = conv_compute(N, C, H, W, K_out, R, S, stride, padding, dilation, dtype, groups=groups,
                                **epilogue)
    (OH, OW), _, _, has_pad = _geometry(H, W, R, S, stride, padding, dilation)
    s = te.create_schedule(out)
    OL = accumulator(s, out, epilogue)
    if has_pad:
        s[OL.op.inputs[0]].compute_inline()
    cfg.define_split("tile_rc", C // groups, num_outputs=2, filter=lambda v: v[1] <= 16)

    def red(st):
        rc, ry, rx = st.op.reduce_axis
        rco, rci = cfg["tile_rc"].apply(s, OL, rc)
        return [rco, rci, ry, rx]
    _register_tiles(cfg, s, out, OL, K_out, OH, OW, device, dtype, red)
    return s, [*params, out]


def depthwise_register(cfg, device, N, C, H, W, R, S, stride=1, padding=0, dilation=1, dtype="float32",
                       **epilogue):
    *params, out = depthwise_compute(N, C, H, W, R, S, stride, padding, dilation, dtype, **epilogue)
    (OH, OW), _, _, has_pad = _geometry(H, W, R, S, stride, padding, dilation)
    s = te.create_schedule(out)
    OL = accumulator(s, out, epilogue)
    if has_pad:
        s[OL.op.inputs[0]].compute_inline()
    _register_tiles(cfg, s, out, OL, C, OH, OW, device, dtype, lambda st: list(st.op.reduce_axis))
    return s, [*params, out]
