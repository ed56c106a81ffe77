"""Parallel loops on libgomp.

`for v in range(n): body  # parallel` becomes

    worker(ptr noalias buf..., free vars..., lo, hi):  for v in range(lo, hi): body
    omp_fn(ptr ctx):  unpack ctx; t, nt = omp_get_thread_num(), omp_get_num_threads()
                      worker(..., t * n / nt, (t + 1) * n / nt)   # static contiguous chunks
    caller:           ctx = {buffers, free vars}; GOMP_parallel(omp_fn, &ctx, threads, 0)

The worker takes the buffers as noalias arguments again (a pointer loaded from the
context struct would lose that). Loops nested in a parallel loop run serially.
"""
from __future__ import annotations

from llvmlite import ir as ll

from tunekit import ir
from tunekit.errors import BuildError

from .support import I32, PTR, VOID, value_type


class _Uses(ir.Visitor):
    def __init__(self):
        self.bufs: dict[ir.Buffer, None] = {}
        self.allocated: set[ir.Buffer] = set()
        self.vars: dict[ir.Var, None] = {}

    def visit_Load(self, node):
        self.bufs.setdefault(node.buffer)
        self.generic_visit(node)

    def visit_Store(self, node):
        self.bufs.setdefault(node.buffer)
        self.generic_visit(node)

    def visit_Allocate(self, node):
        self.allocated.add(node.buffer)
        self.generic_visit(node)

    def visit_Var(self, node):
        self.vars.setdefault(node)


def emit(cg, loop: ir.For) -> None:
    uses = _Uses()
    uses.visit(loop.body)
    bufs = [b for b in uses.bufs if b not in uses.allocated]
    for b in bufs:
        if b not in cg.bufs:
            raise BuildError(f"{cg.program.name}: buffer {b.name} is used outside its allocation")
    free = [v for v in uses.vars if v in cg.vars and v is not loop.var]
    consts = {v: cg.vars[v] for v in free if isinstance(cg.vars[v], ll.Constant)}
    passed = [v for v in free if v not in consts]
    ity = value_type(loop.var.dtype)
    symbolic = isinstance(loop.extent, ir.Expr)    # its value goes to the threads in the context
    args = [PTR] * len(bufs) + [cg.vars[v].type for v in passed]
    fields = args + [ity] * symbolic
    extent = cg.index(loop.extent) if symbolic else ity(loop.extent)

    worker = ll.Function(cg.module, ll.FunctionType(VOID, args + [ity, ity]),
                         name=cg.unique(f"{cg.program.name}.parallel"))
    worker.linkage = "internal"
    with cg.function(worker):
        for arg, b in zip(worker.args, bufs):
            arg.add_attribute("noalias")
            cg.bufs[b] = arg
        cg.vars.update(zip(passed, worker.args[len(bufs):]))
        cg.vars.update(consts)
        cg.in_parallel = True
        lo, hi = worker.args[-2:]
        cg.range_loop(loop.var, lo, hi, lambda: cg.stmt(loop.body))
        cg.b.ret_void()

    ctx_ty = ll.LiteralStructType(fields)
    omp_fn = ll.Function(cg.module, ll.FunctionType(VOID, [PTR]), name=cg.unique(f"{cg.program.name}.omp_fn"))
    omp_fn.linkage = "internal"
    omp_fn.type = PTR     # llvmlite would spell its address as a typed pointer, which LLVM 22 rejects
    with cg.function(omp_fn):
        b = cg.b
        ctx = omp_fn.args[0]
        vals = [b.load(b.gep(ctx, [I32(0), I32(k)], inbounds=True, source_etype=ctx_ty), typ=t)
                for k, t in enumerate(fields)]
        tid = b.sext(b.call(cg.declare("omp_get_thread_num", I32, []), []), ity)
        nt = b.sext(b.call(cg.declare("omp_get_num_threads", I32, []), []), ity)
        n = vals.pop() if symbolic else extent
        lo = b.sdiv(b.mul(tid, n, flags=("nsw",)), nt)
        hi = b.sdiv(b.mul(b.add(tid, ity(1), flags=("nsw",)), n, flags=("nsw",)), nt)
        b.call(worker, vals + [lo, hi])
        b.ret_void()

    b = cg.b
    ctx = cg.entry_alloca(ctx_ty, "omp.ctx")
    for k, v in enumerate([cg.bufs[x] for x in bufs] + [cg.vars[v] for v in passed] + [extent] * symbolic):
        b.store(v, b.gep(ctx, [I32(0), I32(k)], inbounds=True, source_etype=ctx_ty))
    gomp = cg.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
    threads = (b.trunc(b.select(b.icmp_signed("<", extent, ity(cg.num_threads)), extent, ity(cg.num_threads)), I32)
               if symbolic else I32(min(loop.extent, cg.num_threads)))
    b.call(gomp, [omp_fn, ctx, threads, I32(0)])
