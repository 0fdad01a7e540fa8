"""Placement ops: ``io_tile_copy`` between the tile sets, ``ipu_copy`` between IPUs,
``linear_layout`` (a copy spread over tiles) and ``remote_code_load`` (a no-op)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from xlgraph.graph import Graph
from xlgraph.op import OpDef, Sample, apply1, register, same_spec
from xlgraph.ops.replicas import unchanged
from xlgraph.tensor import Tensor

__all__ = ["io_tile_copy", "ipu_copy", "linear_layout", "remote_code_load"]

_IO_TILE_COPY = OpDef(
    "io_tile_copy", same_spec, np.copy, lambda g, dy: (dy,),
    samples=lambda rng: [Sample((rng.normal(size=(3, 4)),))],
)


@register(_IO_TILE_COPY)
def io_tile_copy(t: Tensor) -> Tensor:
    """Copy ``t`` to the tile set of the current scope: to the IO tiles inside
    ``xlgraph.io_tiles()``, to the compute tiles outside it. The values are unchanged."""
    return apply1(_IO_TILE_COPY, [t])


_IPU_COPY = OpDef(
    "ipu_copy", same_spec, np.copy, lambda g, dy: (ipu_copy(dy, g.op.inputs[0].ipu),),
    samples=lambda rng: [Sample((rng.normal(size=(2, 3)), 1))],
)


@register(_IPU_COPY)
def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """Copy ``t`` to IPU ``destination`` (``source`` defaults to the IPU ``t`` is on).

    The copy's output is on ``destination`` whatever the enclosing ``xlgraph.ipu`` scope;
    values are unchanged (the simulator holds every IPU's memory in one process).
    """
    if not isinstance(destination, int) or destination < 0:
        raise ValueError(f"ipu_copy: destination must be a non-negative int, got "
                         f"{destination!r}")
    hints = {"ipu": destination, "source_ipu": t.ipu if source is None else int(source)}
    return apply1(_IPU_COPY, [t], hints=hints)


def _linear_layout(x: np.ndarray, bs: int) -> np.ndarray:
    return np.copy(x)


_LINEAR_LAYOUT = OpDef(
    "linear_layout", same_spec, _linear_layout, replicated=unchanged(_linear_layout),
    samples=lambda rng: [Sample((rng.normal(size=(3, 4)),)), Sample((rng.normal(size=(5,)), 4))],
)


@register(_LINEAR_LAYOUT)
def linear_layout(t: Tensor, bs: int = 1) -> Tensor:
    """A copy of ``t`` whose elements are spread linearly over the tiles in grains of ``bs``
    (popxl-addons' ``linear_layout``): a layout hint, the values unchanged; no gradient."""
    if int(bs) < 1:
        raise ValueError(f"linear_layout: bs must be a positive grain size, got {bs!r}")
    return apply1(_LINEAR_LAYOUT, [t], {"bs": int(bs)})


def remote_code_load(graph: Graph, destination: Literal["executable"]) -> None:
    """Load ``graph``'s code from streaming memory before it runs (PopXL's signature).

    The simulator keeps all code resident, so this adds nothing to the graph; the arguments are
    checked as PopXL does.

    Raises:
        TypeError: ``graph`` is not a Graph. ValueError: ``destination`` is not "executable".
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"remote_code_load expects a Graph, got {type(graph).__name__}")
    if destination != "executable":
        raise ValueError(f"remote_code_load: destination must be 'executable', got "
                         f"{destination!r}")
