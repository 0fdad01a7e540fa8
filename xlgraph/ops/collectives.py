"""Collectives across replicas. The simulator runs one replica, so these are identities."""

from __future__ import annotations

from xlgraph.ops.movement import identity
from xlgraph.tensor import Tensor

__all__ = ["replicated_all_reduce"]

_OPS = ("add", "mean", "mul", "min", "max", "and", "or", "square_add")


def replicated_all_reduce(t: Tensor, op: str = "add", group: object = None) -> Tensor:
    """Reduce ``t`` across replicas; with one replica the result equals ``t``."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {_OPS}, got {op!r}")
    return identity(t)
