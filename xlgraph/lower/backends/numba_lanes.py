"""``xlgraph.ops.pairwise.lane_sum`` compiled: numpy's eight running sums as one vector.

numpy sums a contiguous run in eight running sums, item ``i`` into sum ``i % 8``: eight lanes
of one 8-wide vector add per 8 items. numba leaves such code scalar (its SLP vectorizer is
off), so this writes the loop's LLVM IR itself: a vector load and add per 8 items, then the
lanes combined pairwise by shuffles, in numpy's order, so the same bits. Imported by the numba
backend before its first compile (``numba_backend._register_helpers``).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

from xlgraph.ops import pairwise

_LANES = 8


@intrinsic
def _lane_sum(typingctx: Any, xr: Any, m: Any) -> Any:
    """``pairwise.lane_sum(xr, m)`` of a 1-d C-contiguous float array."""
    if not (isinstance(xr, types.Array) and xr.ndim == 1 and xr.layout == "C"
            and isinstance(xr.dtype, types.Float) and isinstance(m, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array = context.make_array(xr)(context, builder, args[0])
        count = context.cast(builder, args[1], m, types.int64)
        vector = ir.VectorType(context.get_value_type(xr.dtype), _LANES)
        i64, i32 = ir.IntType(64), ir.IntType(32)
        step = ir.Constant(i64, _LANES)

        def load(k: Any) -> Any:
            at = builder.gep(array.data, [k], inbounds=True)
            return builder.load(builder.bitcast(at, vector.as_pointer()),
                                align=xr.dtype.bitwidth // 8)

        first = load(ir.Constant(i64, 0))
        entry = builder.block
        loop = builder.append_basic_block("lanes.loop")
        done = builder.append_basic_block("lanes.done")
        builder.cbranch(builder.icmp_signed(">", count, step), loop, done)
        builder.position_at_end(loop)
        k, acc = builder.phi(i64), builder.phi(vector)
        total = builder.fadd(acc, load(k))
        after = builder.add(k, step)
        k.add_incoming(step, entry)
        k.add_incoming(after, loop)
        acc.add_incoming(first, entry)
        acc.add_incoming(total, loop)
        builder.cbranch(builder.icmp_signed("<", after, count), loop, done)
        builder.position_at_end(done)
        lanes = builder.phi(vector)
        lanes.add_incoming(first, entry)
        lanes.add_incoming(total, loop)

        def pick(v: Any, idx: list[int]) -> Any:
            return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, len(idx)), idx))

        pairs = builder.fadd(pick(lanes, [0, 2, 4, 6]), pick(lanes, [1, 3, 5, 7]))
        halves = builder.fadd(pick(pairs, [0, 2]), pick(pairs, [1, 3]))
        return builder.fadd(builder.extract_element(halves, ir.Constant(i32, 0)),
                            builder.extract_element(halves, ir.Constant(i32, 1)))

    return xr.dtype(xr, m), codegen


@overload(pairwise.lane_sum)
def _lane_sum_overload(xr, m):  # noqa: ANN001, ANN202 - numba compares the signatures
    return lambda xr, m: _lane_sum(xr, m)
