"""Running sums and maxima kept in lanes, compiled as vector code: ``pairwise.lane_sum``
(numpy's eight running sums), ``softmax_loops.lane_sum16`` (sixteen) and
``softmax_loops.lane_max`` (sixteen running maxima).

numba leaves running sums of this kind scalar (its SLP vectorizer is off, and without
reassociation its loop vectorizer may not reorder a sum), so this writes the loops' LLVM IR
itself: one vector load and add (or compare and select) per lane count of items, then the lanes
combined by shuffles in the Python forms' order, so the same bits. Imported by the numba backend
before its first compile (``numba_backend._register_helpers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

from xlgraph.ops import pairwise, softmax_loops

_I64, _I32 = ir.IntType(64), ir.IntType(32)


def _row(xr: Any, m: Any) -> bool:
    """A 1-d C-contiguous float array and an integer count."""
    return (isinstance(xr, types.Array) and xr.ndim == 1 and xr.layout == "C"
            and isinstance(xr.dtype, types.Float) and isinstance(m, types.Integer))


class _Lanes:
    """IR helpers for ``lanes``-wide vectors over one array argument."""

    def __init__(self, context: Any, builder: Any, xr: Any, array: Any, lanes: int) -> None:
        self.builder, self.xr, self.lanes = builder, xr, lanes
        self.data = context.make_array(xr)(context, builder, array).data
        self.vector = ir.VectorType(context.get_value_type(xr.dtype), lanes)

    def load(self, k: Any) -> Any:
        """Items ``k .. k + lanes - 1`` as one vector."""
        at = self.builder.gep(self.data, [k], inbounds=True)
        return self.builder.load(self.builder.bitcast(at, self.vector.as_pointer()),
                                 align=self.xr.dtype.bitwidth // 8)

    def fold(self, first: Any, start: int, count: Any,
             step: Callable[[Any, Any], Any]) -> Any:
        """``first`` folded with the vectors at ``start, start + lanes, ...`` below
        ``count`` (a multiple of ``lanes``) by ``step(acc, items)``."""
        return self.folds([first], [ir.Constant(_I64, 0)], start, count, step)[0]

    def folds(self, firsts: list[Any], offsets: list[Any], start: int, count: Any,
              step: Callable[[Any, Any], Any]) -> list[Any]:
        """``fold`` of the items from each of ``offsets`` at once, ``firsts`` their
        accumulators: independent chains, so one's adds wait less for its last."""
        b = self.builder
        entry = b.block
        loop, done = b.append_basic_block("lanes.loop"), b.append_basic_block("lanes.done")
        begin, stride = ir.Constant(_I64, start), ir.Constant(_I64, self.lanes)
        b.cbranch(b.icmp_signed("<", begin, count), loop, done)
        b.position_at_end(loop)
        k = b.phi(_I64)
        accs = [b.phi(self.vector) for _ in firsts]
        totals = [step(acc, self.load(b.add(off, k))) for acc, off in zip(accs, offsets)]
        after = b.add(k, stride)
        k.add_incoming(begin, entry)
        k.add_incoming(after, loop)
        for acc, first, total in zip(accs, firsts, totals):
            acc.add_incoming(first, entry)
            acc.add_incoming(total, loop)
        b.cbranch(b.icmp_signed("<", after, count), loop, done)
        b.position_at_end(done)
        out = []
        for first, total in zip(firsts, totals):
            lanes = b.phi(self.vector)
            lanes.add_incoming(first, entry)
            lanes.add_incoming(total, loop)
            out.append(lanes)
        return out

    def pick(self, v: Any, idx: list[int]) -> Any:
        return self.builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, len(idx)), idx))

    def tree(self, v: Any, width: int, join: Callable[[Any, Any], Any]) -> Any:
        """``width`` lanes of ``v`` combined as ``((v0 v1) (v2 v3)) ((v4 v5) (v6 v7))``."""
        while width > 1:
            v = join(self.pick(v, list(range(0, width, 2))), self.pick(v, list(range(1, width, 2))))
            width //= 2
        return self.builder.extract_element(v, ir.Constant(_I32, 0))


def _running(lanes: int, join: Callable[[Any], Callable[[Any, Any], Any]]) -> Any:
    """The codegen of an intrinsic ``(xr, m)``: ``lanes`` running values of ``xr[:m]`` from its
    first vector, each later vector joined in by ``join(builder)``, then the lanes by it too."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        xr, m = signature.args
        v = _Lanes(context, builder, xr, args[0], lanes)
        count = context.cast(builder, args[1], m, types.int64)
        step = join(builder)
        return v.tree(v.fold(v.load(ir.Constant(_I64, 0)), lanes, count, step), lanes, step)

    return codegen


def _larger(builder: Any) -> Callable[[Any, Any], Any]:
    """The lanes of ``items`` larger than those of ``acc``, else ``acc``'s."""
    return lambda acc, items: builder.select(builder.fcmp_ordered(">", items, acc), items, acc)


@intrinsic
def _lane_sum(typingctx: Any, xr: Any, m: Any) -> Any:
    """``pairwise.lane_sum(xr, m)``."""
    return (xr.dtype(xr, m), _running(8, lambda builder: builder.fadd)) if _row(xr, m) else None


@intrinsic
def _lane_sum2(typingctx: Any, xr: Any, s: Any, t: Any, m: Any) -> Any:
    """``pairwise.lane_sum2(xr, s, t, m)``."""
    if not (_row(xr, m) and isinstance(s, types.Integer) and isinstance(t, types.Integer)):
        return None
    pair = types.UniTuple(xr.dtype, 2)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        v = _Lanes(context, builder, xr, args[0], 8)
        offsets = [context.cast(builder, a, ty, types.int64) for a, ty in zip(args[1:3], (s, t))]
        count = context.cast(builder, args[3], m, types.int64)
        lanes = v.folds([v.load(off) for off in offsets], offsets, 8, count, builder.fadd)
        sums = [v.tree(x, 8, builder.fadd) for x in lanes]
        return context.make_tuple(builder, pair, sums)

    return pair(xr, s, t, m), codegen


@intrinsic
def _lane_max(typingctx: Any, xr: Any, m: Any) -> Any:
    """``softmax_loops.lane_max(xr, m)``."""
    return (xr.dtype(xr, m), _running(16, _larger)) if _row(xr, m) else None


@intrinsic
def _lane_sum16(typingctx: Any, a: Any, m: Any, zero: Any) -> Any:
    """``softmax_loops.lane_sum16(a, m, zero)``."""
    if not (_row(a, m) and zero == a.dtype):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        v = _Lanes(context, builder, a, args[0], 16)
        count = context.cast(builder, args[1], m, types.int64)
        first = builder.insert_element(ir.Constant(v.vector, ir.Undefined), args[2],
                                       ir.Constant(_I32, 0))
        lanes = v.fold(v.pick(first, [0] * 16), 0, count, builder.fadd)
        both = builder.fadd(v.pick(lanes, list(range(8))), v.pick(lanes, list(range(8, 16))))
        return v.tree(both, 8, builder.fadd)

    return a.dtype(a, m, zero), codegen


@overload(pairwise.lane_sum)
def _lane_sum_overload(xr, m):  # noqa: ANN001, ANN202 - numba compares the signatures
    return lambda xr, m: _lane_sum(xr, m)


@overload(pairwise.lane_sum2)
def _lane_sum2_overload(xr, s, t, m):  # noqa: ANN001, ANN202
    return lambda xr, s, t, m: _lane_sum2(xr, s, t, m)


@overload(softmax_loops.lane_sum16)
def _lane_sum16_overload(a, m, zero):  # noqa: ANN001, ANN202
    return lambda a, m, zero: _lane_sum16(a, m, zero)


@overload(softmax_loops.lane_max)
def _lane_max_overload(xr, m):  # noqa: ANN001, ANN202
    return lambda xr, m: _lane_max(xr, m)
