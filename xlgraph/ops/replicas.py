"""Kernels over a leading replica axis: the context collectives exchange through, and helpers
that ops use to declare their ``OpDef.replicated`` form.

When an Ir has several replicas, every value of the program carries a leading axis with one
entry per replica of this instance (DESIGN §7). An op's ``replicated(ctx, *arrays, **attrs)``
computes all replicas in one call and returns its outputs, or None where it cannot (the caller
then loops over replicas with the plain kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from xlgraph.ops.matmul_kernel import matmul_out
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.tensor import TensorSpec

__all__ = ["Exchange", "ReplicaContext", "aligned", "shift_axes", "unchanged", "matmul_rule",
           "held_once", "batch_rule"]


class Exchange(Protocol):
    """How instances swap replica data (``xlgraph.dist`` implements it over MPI)."""

    def allgather(self, local: np.ndarray, what: str = "collective") -> np.ndarray: ...


@dataclass
class ReplicaContext:
    """The replicas this process runs: ``local`` of ``total``, starting at global ``offset``."""

    local: int
    total: int
    offset: int = 0
    exchange: Exchange | None = None

    def gather(self, x: np.ndarray, what: str = "collective") -> np.ndarray:
        """Every replica's value, ``(total, ...)``, from this instance's ``(local, ...)``;
        ``what`` names the collective to the other instances (they check that it matches)."""
        if self.exchange is None:
            return x
        return self.exchange.allgather(np.ascontiguousarray(x), what)

    def grouping(self, group: ReplicaGrouping | None) -> ReplicaGrouping:
        return group if group is not None else ReplicaGrouping.from_stride(self.total)

    def per_group(self, x: np.ndarray, group: ReplicaGrouping | None,
                  combine: Callable[[np.ndarray], np.ndarray],
                  what: str = "collective") -> np.ndarray:
        """Apply ``combine`` to the stacked values of each group's members, ``(G, ...)``; it
        returns one result per member (or one broadcast to all). Returns the local replicas'
        (a read-only broadcast view when one group of every replica has one result)."""
        everyone = self.gather(x, what)
        mine = range(self.offset, self.offset + self.local)
        out: np.ndarray | None = None
        for members in self.grouping(group).groups:
            if not any(r in mine for r in members):
                continue
            stacked = everyone[list(members)] if len(members) < self.total else everyone
            result = combine(stacked)
            if len(members) == self.total and len(result) == 1:
                return np.broadcast_to(result[0], (self.local, *result.shape[1:]))
            if out is None:
                out = np.empty((self.local, *result.shape[1:]), result.dtype)
            for i, r in enumerate(members):
                if r in mine:
                    out[r - self.offset] = result[i] if len(result) > 1 else result[0]
        return out

    def reduce_groups(self, x: np.ndarray, group: ReplicaGrouping | None,
                      reduce: Callable[[np.ndarray], np.ndarray],
                      what: str = "collective") -> np.ndarray:
        """``reduce`` (over axis 0) of the values of each group's members, for every member:
        one array operation over the replicas arranged as ``(group size, groups, ...)``; with
        one group of every replica a read-only broadcast of the one result."""
        grouping = self.grouping(group)
        everyone = self.gather(x, what)
        if grouping.num_groups == 1:
            return np.broadcast_to(reduce(everyone), (self.local, *everyone.shape[1:]))
        reduced = reduce(everyone[np.asarray(grouping.groups).T])
        return reduced[np.asarray(grouping.assignment[self.offset:self.offset + self.local])]

    def positions(self, group: ReplicaGrouping | None) -> list[tuple[int, int]]:
        """``(index within its group, group size)`` for each local replica."""
        grouping = self.grouping(group)
        where = {r: i for members in grouping.groups for i, r in enumerate(members)}
        return [(where[r], grouping.group_size)
                for r in range(self.offset, self.offset + self.local)]


# -- helpers for OpDef.replicated ----------------------------------------------------------------
def aligned(arrays: tuple[np.ndarray, ...], rank: int) -> list[np.ndarray]:
    """Batched arrays reshaped so numpy broadcasting lines up every axis after the replica
    axis with an output of ``rank`` (one replica's rank)."""
    out = []
    for a in arrays:
        missing = rank - (a.ndim - 1)
        out.append(a.reshape(a.shape[:1] + (1,) * missing + a.shape[1:]) if missing > 0 else a)
    return out


def shift_axes(kernel: Callable[..., Any], *names: str) -> Callable[..., Any]:
    """A replicated form for kernels whose attributes ``names`` hold non-negative axes (an int,
    a tuple of ints, or None for all): the same kernel with every axis moved past the replica
    axis. Its ``shift(attrs, rank)`` moves them for the op's ``kernel_out`` and loop form too."""

    def shifted(value: Any, rank: int) -> Any:
        if value is None:
            return tuple(range(1, rank))
        if isinstance(value, int | np.integer):
            return int(value) + 1
        return tuple(int(v) + 1 for v in value)

    def shift(attrs: dict[str, Any], rank: int) -> dict[str, Any]:
        return {k: shifted(v, rank) if k in names else v for k, v in attrs.items()}

    def replicated(ctx: ReplicaContext, *arrays: np.ndarray, **attrs: Any) -> Any:
        return kernel(*arrays, **shift(attrs, arrays[0].ndim))

    replicated.shift = shift  # type: ignore[attr-defined]  # for the op's other forms
    return replicated


def unchanged(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """A replicated form for kernels that already treat a leading axis as a batch."""
    return lambda ctx, *arrays, **attrs: kernel(*arrays, **attrs)


def held_once(x: np.ndarray) -> bool:
    """Whether batched ``x`` holds one value for every replica: a replica axis of length 1 or
    of stride 0 (a broadcast). With one local replica every value counts as held once."""
    return x.ndim > 0 and (x.shape[0] == 1 or x.strides[0] == 0)


def _fold(x: np.ndarray) -> np.ndarray:
    """``(replicas, batch, ...)`` as ``(replicas * batch, ...)``."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def batch_rule(kernel: Callable[..., Any], batch: tuple[int, ...] = (0,),
               sums: bool = False) -> Callable[..., Any]:
    """A replicated form for kernels whose inputs at ``batch`` lead with a batch axis that the
    outputs keep (convolutions, pooling): the replicas fold into that axis, so one call serves
    all of them, provided every other input is held once. With ``sums`` the kernel sums over
    the batch instead (a weight gradient): the form then has no batched result of its own
    (None: the caller loops), only ``.summed(*arrays, out=)``, the sum of its results over the
    replicas written into ``out`` (None where it does not apply). Summed forms are linear in
    each input."""

    def replicated(ctx: ReplicaContext, *arrays: np.ndarray, **attrs: Any) -> Any:
        if sums or not all(held_once(a) for i, a in enumerate(arrays) if i not in batch):
            return None
        lead = (max(arrays[i].shape[0] for i in batch), arrays[batch[0]].shape[1])
        args = [a[0] if i not in batch else _fold(np.broadcast_to(a, (lead[0], *a.shape[1:])))
                for i, a in enumerate(arrays)]
        result = kernel(*args, **attrs)
        if isinstance(result, tuple):
            return tuple(r.reshape(*lead, *r.shape[1:]) for r in result)
        return result.reshape(*lead, *result.shape[1:])

    def summed(*arrays: np.ndarray, out: np.ndarray, **attrs: Any) -> Any:
        if any(held_once(arrays[i]) for i in batch):
            return None
        args = [_fold(a) if i in batch else a[0] for i, a in enumerate(arrays)]
        np.copyto(out, kernel(*args, **attrs))
        return out

    def folds(specs: list[TensorSpec], local: int) -> list[tuple[None, tuple[int, ...]]] | None:
        """The summed form as the kernel on inputs whose replica axis folds into the batch."""
        if len(batch) != len(specs):
            return None
        return [(None, (local * s.shape[0], *s.shape[1:])) for s in specs]

    summed.folds = folds  # type: ignore[attr-defined]  # see ``lower.replica_folds``
    replicated.summed = summed if sums else None  # type: ignore[attr-defined]
    replicated.batch = None if sums else lambda specs: batch  # type: ignore[attr-defined]
    return replicated


def _matmul_summed(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray | None:
    """The sum over replicas of ``a[r] @ b[r]`` (matrices) as one product over the joined
    contraction axis, into ``out``."""
    if a.ndim != 3 or b.ndim != 3 or held_once(a) or held_once(b):
        return None
    r, m, k = a.shape
    return matmul_out(a.transpose(1, 0, 2).reshape(m, r * k), b.reshape(r * k, b.shape[-1]),
                      out=out)


def matmul_rule(ctx: ReplicaContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``matmul`` of batched operands: 1-D operands become matrices, batch dims line up. A
    matrix ``b`` held once multiplies every replica's rows of ``a`` in one product."""
    if b.ndim == 3 and a.ndim >= 3 and held_once(b):
        rows = matmul_out(a.reshape(-1, a.shape[-1]), b[0])
        return rows.reshape(*a.shape[:-1], b.shape[-1])
    a2 = a[:, None, :] if a.ndim == 2 else a
    b2 = b[..., None] if b.ndim == 2 else b
    rank = max(a2.ndim, b2.ndim)
    a2, b2 = (x.reshape(x.shape[:1] + (1,) * (rank - x.ndim) + x.shape[1:]) for x in (a2, b2))
    out = matmul_out(a2, b2)
    if b.ndim == 2:
        out = out[..., 0]
    if a.ndim == 2:
        out = out[..., 0, :] if b.ndim > 2 else out[..., 0]
    return out


def _matmul_folds(specs: list[TensorSpec], local: int) -> list[Any] | None:
    """``_matmul_summed`` as one product of matrices: ``a`` with its replica axis moved next
    to (and joined with) its columns, ``b`` with it joined with its rows."""
    if len(specs[0].shape) != 2 or len(specs[1].shape) != 2:
        return None
    (m, k), (_, n) = specs[0].shape, specs[1].shape
    return [((1, 0, 2), (m, local * k)), (None, (local * k, n))]


_matmul_summed.folds = _matmul_folds  # type: ignore[attr-defined]
matmul_rule.summed = _matmul_summed  # type: ignore[attr-defined]
matmul_rule.batch = lambda specs: (  # type: ignore[attr-defined]
    (0,) if len(specs[0].shape) >= 2 and len(specs[1].shape) == 2 else None)
