"""The dot-product instructions of the loop IR's `dot4_u8s8` and `dot2_bf16` (`te.dot4_u8s8`,
`te.dot2_bf16`) and bfloat16 rounding (`te.bf16x2`), as LLVM values on what the CPU has: a mixin
of `ExpressionEmitter` (it uses `b`, `features`, `declare`, `intrinsic` and `_splat`)."""
from __future__ import annotations

from llvmlite import ir as ll

from .support import FAST, I8, I32


class DotEmitter:
    """Emit the dot products into `self.b` (see the module's doc)."""

    def dot4(self, x: ll.Value, y: ll.Value, acc: ll.Value | None) -> ll.Value:
        """acc + dot4_u8s8(x, y) per lane (acc None: 0), on what the CPU has (`features`): VNNI's
        vpdpbusd; else vpmaddwd on the bytes widened to 16 bits (exact: vpmaddubsw, which onnxruntime
        uses, saturates a pair of products at 32767); on ARM usdot (i8mm), or sdot (dotprod) on the
        data less 128 with 128 times the weights' sum added back; else four shifted byte products."""
        acc = acc if acc is not None else ll.Constant(x.type, None)
        n = x.type.count if isinstance(x.type, ll.VectorType) else 0
        widths = [w for w, need in ((16, {"avx512vnni"}), (8, {"avx512vnni", "avx512vl"}), (8, {"avxvnni"}),
                                    (4, {"avx512vnni", "avx512vl"}), (4, {"avxvnni"})) if need <= self.features]
        w = next((w for w in widths if n and n % w == 0), None)
        if w is not None:
            vt = ll.VectorType(I32, w)
            fn = self.declare(f"llvm.x86.avx512.vpdpbusd.{w * 32}", vt, [vt] * 3)
            return self._join([self.b.call(fn, [self._lanes(v, k, w) for v in (acc, x, y)]) for k in range(0, n, w)])
        madd = [(w, name) for w, need, name in ((16, "avx512bw", "avx512.pmaddw.d.512"), (8, "avx2", "avx2.pmadd.wd"),
                                                (4, "sse2", "sse2.pmadd.wd")) if need in self.features]
        w, name = next(((w, name) for w, name in madd if n and n % w == 0), (None, None))
        if w is not None:
            return self._join([self._madd(f"llvm.x86.{name}", *(self._lanes(v, k, w) for v in (acc, x, y)))
                               for k in range(0, n, w)])
        if n and n % 4 == 0 and "dotprod" in self.features:
            return self._join([self._sdot(*(self._lanes(v, k, 4) for v in (acc, x, y))) for k in range(0, n, 4)])
        b, total = self.b, acc
        for s in (0, 8, 16, 24):
            u = b.and_(b.lshr(x, self._splat(x.type, s)), self._splat(x.type, 255))
            v = b.ashr(b.shl(y, self._splat(y.type, 24 - s)), self._splat(y.type, 24))
            total = b.add(total, b.mul(u, v))
        return total

    def _madd(self, name: str, acc: ll.Value, x: ll.Value, y: ll.Value) -> ll.Value:
        """acc + dot4_u8s8(x, y) on vpmaddwd (`name`): bytes 0 and 2 of each lane as 16-bit halves, then 1 and 3."""
        b, w = self.b, x.type.count
        ht = ll.VectorType(ll.IntType(16), 2 * w)
        c = lambda v: self._splat(ht, v)
        xh, yh = b.bitcast(x, ht), b.bitcast(y, ht)
        fn = self.declare(name, x.type, [ht, ht])
        even = b.call(fn, [b.and_(xh, c(255)), b.ashr(b.shl(yh, c(8)), c(8))])
        odd = b.call(fn, [b.lshr(xh, c(8)), b.ashr(yh, c(8))])
        return b.add(acc, b.add(even, odd))

    def _sdot(self, acc: ll.Value, x: ll.Value, y: ll.Value) -> ll.Value:
        """acc + dot4_u8s8(x, y) on 4 lanes: usdot where the CPU has i8mm, else sdot of x - 128 and y plus
        128 sum(y) (= sdot of -128 and y, subtracted)."""
        b, bt = self.b, ll.VectorType(I8, 16)
        xb, yb = b.bitcast(x, bt), b.bitcast(y, bt)
        dot = lambda kind: self.declare(f"llvm.aarch64.neon.{kind}.v4i32.v16i8", x.type, [x.type, bt, bt])
        if "i8mm" in self.features:
            return b.call(dot("usdot"), [acc, xb, yb])
        low = self._splat(bt, -128)
        return b.sub(b.call(dot("sdot"), [acc, b.xor(xb, low), yb]),
                     b.call(dot("sdot"), [ll.Constant(x.type, None), low, yb]))

    def bf16x2(self, lo: ll.Value, hi: ll.Value) -> ll.Value:
        """int32 lanes: float32 `lo` and `hi` rounded to bfloat16 (to nearest, ties to even; integer
        arithmetic on their bits, any CPU), `lo` in the low half."""
        b = self.b
        it = ll.VectorType(I32, lo.type.count) if isinstance(lo.type, ll.VectorType) else I32

        def rounded(x):
            u = b.bitcast(x, it)
            odd = b.and_(b.lshr(u, self._splat(it, 16)), self._splat(it, 1))
            return b.lshr(b.add(b.add(u, self._splat(it, 0x7FFF)), odd), self._splat(it, 16))
        return b.or_(rounded(lo), b.shl(rounded(hi), self._splat(it, 16)))

    def dot2(self, x: ll.Value, y: ll.Value, acc: ll.Value | None) -> ll.Value:
        """acc + dot2_bf16(x, y) per lane (acc None: 0): vdpbf16ps on 16 lanes where the CPU has
        AVX512-BF16, else the pairs decoded (their bits shifted into float32) and multiplied."""
        b = self.b
        n = x.type.count if isinstance(x.type, ll.VectorType) else 0
        ft = ll.VectorType(ll.FloatType(), n) if n else ll.FloatType()
        acc = acc if acc is not None else ll.Constant(ft, None)
        if n and n % 16 == 0 and "avx512bf16" in self.features:
            vf, vi = ll.VectorType(ll.FloatType(), 16), ll.VectorType(I32, 16)
            fn = self.declare("llvm.x86.avx512bf16.dpbf16ps.512", vf, [vf, vi, vi])
            return self._join([b.call(fn, [self._lanes(v, k, 16) for v in (acc, x, y)]) for k in range(0, n, 16)])
        it = ll.VectorType(I32, n) if n else I32
        high = self._splat(it, -65536)   # 0xFFFF0000

        def halves(v):
            return b.bitcast(b.shl(v, self._splat(it, 16)), ft), b.bitcast(b.and_(v, high), ft)
        (xl, xh), (yl, yh) = halves(x), halves(y)
        fma = self.intrinsic("llvm.fmuladd", [ft], ft, [ft] * 3)
        return b.call(fma, [xh, yh, b.call(fma, [xl, yl, acc], fastmath=FAST)], fastmath=FAST)

    def _join(self, parts: list) -> ll.Value:
        """Vectors of one width w, concatenated: each widened to all the lanes, then lanes [k w, (k+1) w)
        of the result taken from part k."""
        if len(parts) == 1:
            return parts[0]
        w = parts[0].type.count
        n, out = w * len(parts), None
        for k, part in enumerate(parts):
            wide = self.b.shuffle_vector(part, ll.Constant(part.type, ll.Undefined),
                                         ll.Constant(ll.VectorType(I32, n), [j % w for j in range(n)]))
            out = wide if out is None else self.b.shuffle_vector(
                out, wide, ll.Constant(ll.VectorType(I32, n), [n + j if k * w <= j < (k + 1) * w else j
                                                                for j in range(n)]))
        return out

    def _lanes(self, v: ll.Value, start: int, w: int) -> ll.Value:
        """Lanes [start, start + w) of vector `v` (itself if that is all of it)."""
        if v.type.count == w:
            return v
        return self.b.shuffle_vector(v, ll.Constant(v.type, ll.Undefined),
                                     ll.Constant(ll.VectorType(I32, w), list(range(start, start + w))))
