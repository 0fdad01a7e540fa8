"""Where a tensor's bytes sit: a deterministic linear mapping onto tiles.

As ``poputil::mapTensorLinearly`` does by default, a tensor is cut into grains (one 64-bit
vector) and dealt out in equal contiguous runs to tiles 0, 1, 2, ...; a tensor spreads over more
tiles only while every tile gets at least ``min_bytes_per_tile``. Matmul and convolution
operands get the same even spread over all tiles that their planners aim for. Small tensors
therefore gather on the first tiles, as they do on the chip.
"""

from __future__ import annotations

import numpy as np

from xlgraph.ipu.hardware import IPUModel

__all__ = ["tiles_spanned", "intervals", "bytes_per_tile"]


def _run_bytes(nbytes: int, model: IPUModel) -> tuple[int, int]:
    """(tiles used, bytes per full run) of a tensor of ``nbytes``."""
    grain = int(model.fact("grain_bytes"))
    minimum = int(model.fact("min_bytes_per_tile"))
    used = max(1, min(model.tiles, nbytes // minimum))
    grains = -(-nbytes // grain)
    run = -(-grains // used) * grain
    return max(1, -(-nbytes // run)) if nbytes else 1, run


def tiles_spanned(nbytes: int, model: IPUModel) -> int:
    """How many tiles hold a piece of a tensor of ``nbytes``."""
    return _run_bytes(nbytes, model)[0]


def intervals(nbytes: int, model: IPUModel) -> list[tuple[int, int, int]]:
    """``(tile, first byte, end byte)`` runs covering ``[0, nbytes)`` exactly once."""
    used, run = _run_bytes(nbytes, model)
    return [(t, t * run, min((t + 1) * run, nbytes)) for t in range(used) if t * run < nbytes]


def bytes_per_tile(nbytes: int, model: IPUModel) -> np.ndarray:
    """Bytes of a tensor of ``nbytes`` on each tile (int64, one entry per tile)."""
    out = np.zeros(model.tiles, np.int64)
    used, run = _run_bytes(nbytes, model)
    full = nbytes // run if nbytes else 0
    out[:full] = run
    if full < used:
        out[full] = nbytes - full * run
    return out
