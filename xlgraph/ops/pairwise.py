"""numpy's pairwise summation, for the compiled row loops (``xlgraph.ops.loops``).

``np.add.reduce`` of a contiguous float row sums it pairwise: runs of at most 128 items in
eight running sums combined as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))`` (then the
run's remainder in order), a longer run split in two at half its length rounded down to a
multiple of 8, and the row's result is ``0 + that sum``. ``row_sum`` does the same operations
in the same order, so a loop that sums rows with it gets numpy's bits. The eight running sums
are one vector (``lane_sum``), and the tree of runs is worked out once per row length
(``sum_plan``), not per row: 512 rows of 768 float32 in 93 then 79 us of CPU, numpy 94-106
(eight scalar sums walking the tree per row: 210).

The helpers are plain Python; the numba backend compiles them inline into the loops that call
them (``backends.numba_backend``). Indices are unsigned where they can be, so that numba adds
no check for negative indices inside the runs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["row_sum", "sum_plan", "run_sum", "lane_sum", "lane_sum2", "half_run", "STACK"]

STACK = 64  # pending sums ``row_sum`` may hold: one per halving of a run (2**64 items)


def lane_sum(xr, m):  # noqa: ANN001, ANN201 - numba compiles it (an intrinsic)
    """numpy's sum of ``xr[:m]`` for ``m`` a positive multiple of 8: eight running sums (item
    ``i`` into sum ``i % 8``), combined as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 +
    r7))``. The numba backend compiles it to one 8-wide vector add per 8 items
    (``backends.numba_lanes``): numba's compiler leaves eight scalar sums scalar."""
    r0, r1, r2, r3, r4, r5, r6, r7 = xr[0], xr[1], xr[2], xr[3], xr[4], xr[5], xr[6], xr[7]
    for k in range(1, m // 8):
        i = np.uint64(8 * k)
        r0 += xr[i]
        r1 += xr[i + np.uint64(1)]
        r2 += xr[i + np.uint64(2)]
        r3 += xr[i + np.uint64(3)]
        r4 += xr[i + np.uint64(4)]
        r5 += xr[i + np.uint64(5)]
        r6 += xr[i + np.uint64(6)]
        r7 += xr[i + np.uint64(7)]
    return ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))


def lane_sum2(xr, s, t, m):  # noqa: ANN001, ANN201 - numba compiles it (an intrinsic)
    """``lane_sum`` of ``xr[s:]`` and of ``xr[t:]``, ``m`` items each: compiled, two
    independent vector adds per 8 items of each."""
    return lane_sum(xr[s:], m), lane_sum(xr[t:], m)


def run_sum(a, s, n):  # noqa: ANN001, ANN201 - numba compiles it (an overload)
    """numpy's sum of ``a[s:s + n]`` for ``n <= 128``: eight running sums (``lane_sum``),
    then the items past the last multiple of 8 in order (fewer than eight items: one sum,
    from zero)."""
    xr = a[s:s + n]
    if n < 8:
        res = a.dtype.type(0)
        for i in range(n):
            res += xr[i]
        return res
    tail = n - n % 8
    res = lane_sum(xr, tail)
    for i in range(tail, n):
        res += xr[i]
    return res


def half_run(n):  # noqa: ANN001, ANN201
    """Where numpy splits a run of ``n > 128`` items: half, rounded down to a multiple of 8."""
    h = n // 2
    return h - h % 8


def sum_plan(n):  # noqa: ANN001, ANN201
    """The leaves of numpy's summation tree of ``n`` items, left to right, as a ``(runs, 2)``
    int64 array: each run's length, and how many held sums its sum completes (the run is a
    right half, so is its parent, ...: the ``pending`` sums ``row_sum`` adds it to)."""
    runs = np.empty((n // 32 + 2, 2), np.int64)  # runs are longer than 56 items
    todo = np.empty((STACK, 2), np.int64)  # nodes to visit: size, held sums it completes
    todo[0, 0], todo[0, 1] = n, 0
    depth, count = 1, 0
    while depth > 0:
        depth -= 1
        size, completes = todo[depth, 0], todo[depth, 1]
        if size > 128:  # visit the left half first, then the right one
            h = half_run(size)
            todo[depth, 0], todo[depth, 1] = size - h, completes + 1
            todo[depth + 1, 0], todo[depth + 1, 1] = h, 0
            depth += 2
        else:
            runs[count, 0], runs[count, 1] = size, completes
            count += 1
    return runs[:count]


def row_sum(a, s, plan, pending):  # noqa: ANN001, ANN201
    """``np.add.reduce(a[s:s + n])`` of the 1-d float array ``a``, with numpy's bits, for
    ``plan = sum_plan(n)``. numpy recurses; this sums the runs left to right, holding each
    left half's sum in ``pending`` (``STACK`` items of ``a``'s dtype) until its right half is
    summed. A row of one run, or of the two halves of one split (up to 256 items), adds its
    runs' sums directly."""
    zero = a.dtype.type(0)
    if plan.shape[0] == 1:
        return zero + run_sum(a, s, plan[0, 0])
    if plan.shape[0] == 2:  # the left half's sum plus the right half's
        h = plan[0, 0]
        if h == plan[1, 0] and h % 8 == 0:  # two runs of whole vectors: summed side by side
            left, right = lane_sum2(a, s, s + h, h)
        else:
            left, right = run_sum(a, s, h), run_sum(a, s + h, plan[1, 0])
        return zero + (left + right)
    held = 0
    for i in range(plan.shape[0]):
        n = plan[i, 0]
        value = run_sum(a, s, n)
        s += n
        for _ in range(plan[i, 1]):
            held -= 1
            value = pending[held] + value
        pending[held] = value
        held += 1
    return zero + pending[0]
