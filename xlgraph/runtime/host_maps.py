"""Variables whose host data is an ``np.memmap`` (PopXL's memory-mapped weights).

PopXL keeps such a map as the variable's host buffer: ``weights_to_host`` writes through it and
no other host copy exists. Here the map is the Session's host copy too, and every copy to or
from a map goes in chunks that are dropped from the process's resident pages once copied (a
shared map keeps them in the file), so a variable as large as the memory costs its device copy
and a chunk, not two or three copies. A large memmapped variable's snapshot for a failed run is
kept in a temporary file (``Spill``) instead of a second device array.
"""

from __future__ import annotations

import mmap

import numpy as np

from xlgraph.utils import is_large_map

__all__ = ["Spill", "copy", "is_large_map", "restore", "snapshot"]

CHUNK_BYTES = 64 << 20  # the most of a map resident at once while copying


_POPULATE_READ, _POPULATE_WRITE = 22, 23  # Linux >= 5.14; Python 3.11 has no names for them


def _advise(view: np.ndarray, advice: int) -> None:
    """``madvise`` the whole pages of memmap ``view``; a kernel without ``advice`` is ignored."""
    mm = getattr(view, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise"):
        return
    start = view.ctypes.data - np.frombuffer(mm, np.uint8).ctypes.data
    page = mmap.PAGESIZE
    first = -(-start // page) * page
    last = (start + view.nbytes) // page * page
    if last > first:
        try:
            mm.madvise(advice, first, last - first)
        except OSError:
            pass


def _release(view: np.ndarray) -> None:
    """Drop the pages of memmap ``view`` from the resident set. A shared map keeps their
    contents in the file (or the page cache); a private (``mode="c"``) one would lose them, so it
    is left alone."""
    if getattr(view, "mode", "c") != "c" and hasattr(mmap, "MADV_DONTNEED"):
        _advise(view, mmap.MADV_DONTNEED)


def copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(dst, src)``; when either is a memmap, in chunks released as they are done."""
    maps = [a for a in (dst, src) if isinstance(a, np.memmap)]
    flat = dst.shape == src.shape and dst.flags.c_contiguous and src.flags.c_contiguous
    if not maps or not flat or dst.nbytes <= CHUNK_BYTES:
        np.copyto(dst, src)
        for a in maps:
            _release(a)
        return
    d, s = dst.reshape(-1), src.reshape(-1)
    step = max(1, CHUNK_BYTES // dst.itemsize)
    for i in range(0, d.size, step):
        for a, advice in ((d, _POPULATE_WRITE), (s, _POPULATE_READ)):
            if isinstance(a, np.memmap):  # one call maps the chunk's pages, not a fault each
                _advise(a[i:i + step], advice)
        np.copyto(d[i:i + step], s[i:i + step])
        for a in (d, s):
            if isinstance(a, np.memmap):
                _release(a[i:i + step])


class Spill:
    """A snapshot of a device array kept in a temporary file (written and read with file I/O:
    no page of it is mapped into the process), or none at all while the device array equals its
    ``host`` copy (after an attach or ``weights_to_host``): then that copy is the snapshot.
    ``host`` None: always the file (a read-only map is never brought in sync). The file is
    removed when the Spill is freed."""

    def __init__(self, host: np.ndarray | None) -> None:
        import tempfile  # only Sessions that spill snapshots need it

        self._file = tempfile.TemporaryFile(prefix="xlgraph-snapshot-")
        self.host = host
        self._from_host = False

    def save(self, live: np.ndarray, in_sync: bool) -> None:
        self._from_host = in_sync and self.host is not None
        if not self._from_host:
            self._file.seek(0)
            self._file.write(_bytes(live))

    def restore(self, live: np.ndarray) -> None:
        if self._from_host:
            copy(live, self.host)
            return
        self._file.seek(0)
        self._file.readinto(_bytes(live))


def _bytes(a: np.ndarray) -> memoryview:
    return memoryview(a.reshape(-1)).cast("B")  # device arrays are C-contiguous


def snapshot(saved: np.ndarray | Spill, live: np.ndarray, in_sync: bool) -> None:
    """Save ``live`` into ``saved`` (an array, or a Spill: ``in_sync`` tells whether ``live``
    equals the Spill's host copy)."""
    if isinstance(saved, Spill):
        saved.save(live, in_sync)
    else:
        np.copyto(saved, live)


def restore(live: np.ndarray, saved: np.ndarray | Spill) -> None:
    """Put ``saved`` back into ``live``."""
    if isinstance(saved, Spill):
        saved.restore(live)
    else:
        np.copyto(live, saved)
