"""PopXL's memory-mapped variables at creation: which maps a variable keeps as its host data.

A variable made from an ``np.memmap`` keeps the map itself (``Variable._memmap_arr``), so the
Session reads and writes its values there. Two cases differ, as in PopXL: a read-only map
(``mode="r"``) marks the Ir (``ir._has_read_only_memmap``: its Session never writes weights
back), and a map under a replica grouping that no stride and group size describe is copied,
with a warning, because its values must be put in another order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["is_read_only", "kept_map", "popart_log"]


def popart_log() -> Any:
    """PopART's logger, which PopXL reports memory-map events through (``logging`` is
    imported only then: ``import xlgraph`` loads none of it)."""
    from xlgraph.core.popart_log import popart_logger

    return popart_logger()


def is_read_only(mm: np.ndarray | None) -> bool:
    """Whether ``mm`` is a map that cannot be written (opened with ``mode="r"``)."""
    return isinstance(mm, np.memmap) and not mm.flags.writeable


def kept_map(mm: np.memmap, grouping: Any, name: str, ir: Any) -> np.ndarray:
    """The host data of a variable given the map ``mm``: the map itself, or a copy when
    ``grouping`` is not constant (PopXL warns through PopART's logger, level WARN)."""
    if grouping is not None and not grouping.is_const:
        popart_log().warning(
            "Creating variable %r: you have passed np.memmap data and a non-const replica "
            "grouping, so the data is copied into the order of the groups; the variable is not "
            "memory-mapped and its values never come back into the map.", name)
        return np.array(mm)
    if is_read_only(mm):
        ir._has_read_only_memmap = True
    return mm
