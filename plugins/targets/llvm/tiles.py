"""AMX: a loop nest tensorized as "amx" (`Stage.tensorize`) runs on the CPU's matrix tiles.

The nest is three perfectly nested loops (in any order) over one update

    C[i, j] += dot4_u8s8(A[i, k], B[k, j])   (int32 C; A four uint8 of a row, B four int8 of a column: tdpbusd)
    C[i, j] += dot2_bf16(A[i, k], B[k, j])   (float32 C; A and B two bfloat16 each: tdpbf16ps)

with unit stride in j (C and B) and in k (A), every extent a multiple of 16, and row strides
that are constants. That is the instructions' contract: a C tile is 16 rows of 16 32-bit values,
an A tile 16 rows of 64 bytes (16 k), a B tile 16 rows of 64 bytes (16 k of 16 columns).
The nest runs as blocks of up to 2 x 2 C tiles that stay in tile registers across the whole k
loop (tiles 0-3; A in 4-5, B in 6-7), loaded from C before it and stored after it. Each
nest configures the tiles (`ldtilecfg`) itself, as every thread of a parallel loop must."""
from __future__ import annotations

from llvmlite import ir as ll

from tunekit import ir
from tunekit.errors import BuildError

from .cpu import AMX
from .support import I8, I64, PTR, VOID
from .vectorize import lane_coef

_TILE = 16                       # rows of a tile, columns of a C tile, k (groups of 4 or 2) of an A tile
#: the update's product -> (C's dtype, the tile instruction)
_PRODUCTS = {"dot4_u8s8": ("int32", "llvm.x86.tdpbusd"), "dot2_bf16": ("float32", "llvm.x86.tdpbf16ps")}


def emit(cg, loop: ir.For) -> None:
    """Emit the tensorized nest `loop` (see the module's doc) into `cg`."""
    name = cg.program.name
    if loop.tag != "amx":
        raise BuildError(f"{name}: loop {loop.var.name} is tensorized as {loop.tag!r}; this target knows 'amx'")
    fn, roles, (C, A, B), (base_c, base_a, base_b), (sc, sa, sb) = _match(name, loop)
    if not AMX[fn] <= cg.features:
        raise BuildError(f"{name}: loop {loop.var.name} is tensorized as 'amx', but this CPU lacks "
                         f"{', '.join(sorted(AMX[fn] - cg.features))}; choose a schedule without it")
    ext = {r: lp.extent for r, lp in roles.items()}
    b, index = cg.b, ir.INDEX
    mt, nt = (2 if ext[r] % (2 * _TILE) == 0 else 1 for r in "ij")
    b.call(cg.declare("llvm.x86.ldtilecfg", VOID, [PTR]), [_config(cg.module)])
    load = cg.declare("llvm.x86.tileloadd64", VOID, [I8, PTR, I64])
    store = cg.declare("llvm.x86.tilestored64", VOID, [I8, PTR, I64])
    dot = cg.declare(_PRODUCTS[fn][1], VOID, [I8, I8, I8])
    bi, bj, bk = (ir.Var(f"{loop.var.name}.amx.{r}", index) for r in "ijk")

    def tile(op, t: int, buf: ir.Buffer, at: ir.Expr, stride: int):
        b.call(op, [I8(t), cg.element_ptr(buf, cg.index(at)), I64(stride * 4)])

    def c_tiles(op):
        for ti in range(mt):
            for tj in range(nt):
                row, col = bi * (mt * _TILE) + ti * _TILE, bj * (nt * _TILE) + tj * _TILE
                tile(op, ti * nt + tj, C, base_c + row * sc + col, sc)

    def k_step():
        k0 = bk * _TILE
        for ti in range(mt):
            tile(load, 4 + ti, A, base_a + (bi * (mt * _TILE) + ti * _TILE) * sa + k0, sa)
        for tj in range(nt):
            tile(load, 6 + tj, B, base_b + k0 * sb + bj * (nt * _TILE) + tj * _TILE, sb)
        for ti in range(mt):
            for tj in range(nt):
                b.call(dot, [I8(ti * nt + tj), I8(4 + ti), I8(6 + tj)])

    def block():
        c_tiles(load)
        cg.range_loop(bk, I64(0), I64(ext["k"] // _TILE), k_step, guarded=False)
        c_tiles(store)

    cg.range_loop(bi, I64(0), I64(ext["i"] // (mt * _TILE)), lambda: cg.range_loop(
        bj, I64(0), I64(ext["j"] // (nt * _TILE)), block, guarded=False), guarded=False)
    b.call(cg.declare("llvm.x86.tilerelease", VOID, []), [])


def _match(name: str, loop: ir.For):
    """The nest's product, its loops by role (i, j, k), its buffers (C, A, B), their bases (the
    indices at i = j = k = 0) and row strides; a BuildError that says what does not fit."""
    loops, body = [], loop
    while isinstance(body, ir.For):
        loops.append(body)
        body = body.body
    shape = "three nested loops over C[i, j] += dot4_u8s8 or dot2_bf16(A[i, k], B[k, j])"
    v = body.value if isinstance(body, ir.Store) else None
    call = next((x for x in (v.a, v.b) if isinstance(x, ir.Call)), None) \
        if isinstance(v, ir.BinOp) and v.op == "+" else None
    acc = next((x for x in (v.a, v.b) if isinstance(x, ir.Load) and x.buffer is body.buffer), None) if call else None
    if len(loops) != 3 or acc is None or call.fn not in _PRODUCTS \
            or not all(isinstance(x, ir.Load) for x in call.args) or body.buffer.dtype != _PRODUCTS[call.fn][0]:
        raise BuildError(f"{name}: the nest tensorized as 'amx' at {loop.var.name} is not {shape}")
    (la, lb), ls = call.args, [lp.var for lp in loops]
    coefs, bases = [], []
    for what, e in (("C", body.index), ("A", la.index), ("B", lb.index)):
        c = {}
        for var in ls:
            form = lane_coef(e, var)
            if form is None:
                raise BuildError(f"{name}: 'amx': the index of {what} is not affine in {var.name}")
            c[var], e = form
        coefs.append(c)
        bases.append(e)
    cc, ca, cb = coefs
    # a loop's role is where it appears: rows in C and A, columns in C and B, the reduction in A and B
    sig = {(bool(cc[x]), bool(ca[x]), bool(cb[x])): x for x in ls}
    i, j, k = (sig.get(r) for r in ((True, True, False), (True, False, True), (False, True, True)))
    if None in (i, j, k):
        raise BuildError(f"{name}: 'amx': the loops do not split into rows, columns and a reduction ({shape})")
    if (cc[j], cb[j], ca[k]) != (1, 1, 1):
        raise BuildError(f"{name}: 'amx' needs C and B contiguous in the columns and A in k")
    roles = {r: next(lp for lp in loops if lp.var is v) for r, v in zip("ijk", (i, j, k))}
    bad = [f"{lp.var.name} ({lp.extent})" for lp in roles.values() if lp.extent % _TILE]
    if bad:
        raise BuildError(f"{name}: 'amx' needs extents that are multiples of {_TILE}: {', '.join(bad)}")
    return call.fn, roles, (body.buffer, la.buffer, lb.buffer), tuple(bases), (cc[i], ca[i], cb[k])


def _config(module: ll.Module) -> ll.GlobalVariable:
    """The tile configuration (palette 1; eight tiles of 16 rows of 64 bytes), once per module."""
    if "amx.config" in module.globals:
        return module.globals["amx.config"]
    data = bytearray(64)
    data[0] = 1
    for t in range(8):
        data[16 + 2 * t] = 4 * _TILE          # bytes per row (16-bit, little-endian)
        data[48 + t] = _TILE                  # rows
    g = ll.GlobalVariable(module, ll.ArrayType(I8, 64), "amx.config")
    g.global_constant, g.linkage, g.align = True, "private", 64
    g.initializer = ll.Constant(ll.ArrayType(I8, 64), data)
    return g
