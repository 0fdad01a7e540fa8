"""Where a tensor's bytes sit: a deterministic linear mapping onto tiles.

As ``poputil::mapTensorLinearly`` does by default, a tensor is cut into grains (one 64-bit
vector) and dealt out in equal contiguous runs to tiles 0, 1, 2, ...; a tensor spreads over more
tiles only while every tile gets at least ``min_bytes_per_tile``. Matmul and convolution
operands get the same even spread over all tiles that their planners aim for. Small tensors
therefore gather on the first tiles, as they do on the chip. With ``numIOTiles`` IO tiles
reserved (``tile_sets``), compute tensors map onto the first tiles and IO-tile tensors onto the
reserved ones, each linearly from the start of its set.
"""

from __future__ import annotations

import numpy as np

from xlgraph.errors import ArgumentError
from xlgraph.ipu.hardware import IPUModel

__all__ = ["TileRange", "tile_sets", "tiles_spanned", "intervals", "bytes_per_tile"]

TileRange = tuple[int, int]
"""``(first tile, number of tiles)`` of a set of tiles."""


def tile_sets(model: IPUModel, io_tiles_per_ipu: int = 0) -> dict[str, TileRange]:
    """The ``"compute"`` and ``"io"`` tile sets when ``io_tiles_per_ipu`` tiles of every IPU
    are reserved for IO (PopART's ``numIOTiles``); the IO tiles are the last ones. With none
    reserved, IO-tile ops use the compute tiles."""
    if not 0 <= io_tiles_per_ipu < model.tiles_per_ipu:
        raise ArgumentError(f"numIOTiles={io_tiles_per_ipu} must leave compute tiles on an IPU "
                            f"of {model.tiles_per_ipu} tiles ({model.describe()})")
    io = io_tiles_per_ipu * model.num_ipus
    compute = (0, model.tiles - io)
    return {"compute": compute, "io": (model.tiles - io, io) if io else compute}


def _run_bytes(nbytes: int, model: IPUModel, count: int | None = None) -> tuple[int, int]:
    """(tiles used, bytes per full run) of a tensor of ``nbytes`` on ``count`` tiles."""
    grain = int(model.fact("grain_bytes"))
    minimum = int(model.fact("min_bytes_per_tile"))
    used = max(1, min(model.tiles if count is None else count, nbytes // minimum))
    grains = -(-nbytes // grain)
    run = -(-grains // used) * grain
    return max(1, -(-nbytes // run)) if nbytes else 1, run


def tiles_spanned(nbytes: int, model: IPUModel, count: int | None = None) -> int:
    """How many tiles (of ``count``, default all) hold a piece of a tensor of ``nbytes``."""
    return _run_bytes(nbytes, model, count)[0]


def intervals(nbytes: int, model: IPUModel) -> list[tuple[int, int, int]]:
    """``(tile, first byte, end byte)`` runs covering ``[0, nbytes)`` exactly once."""
    used, run = _run_bytes(nbytes, model)
    return [(t, t * run, min((t + 1) * run, nbytes)) for t in range(used) if t * run < nbytes]


def bytes_per_tile(nbytes: int, model: IPUModel, tile_set: TileRange | None = None) -> np.ndarray:
    """Bytes of a tensor of ``nbytes`` on each tile (int64, one entry per tile), mapped onto
    ``tile_set`` (default all tiles)."""
    first, count = (0, model.tiles) if tile_set is None else tile_set
    out = np.zeros(model.tiles, np.int64)
    used, run = _run_bytes(nbytes, model, count)
    full = nbytes // run if nbytes else 0
    out[first:first + full] = run
    if full < used:
        out[first + full] = nbytes - full * run
    return out
