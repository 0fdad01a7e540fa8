"""Bucket buffers in memory that the instances of a one-host job share, so that no MPI transfer
copies the data.

Without it, each instance packs a bucket into its row of its own buffer and MPI copies every
other instance's row into it (one copy of the whole bucket per instance, by the progress
thread, and on a host without CMA a copy that moves only while MPI is called). When every
instance runs on one host (x86-64 Linux), ``open_rows`` maps one block of ``/dev/shm`` into
every instance instead: each instance packs into its row of that block, then raises its flag;
an instance that needs the bucket waits until every flag is raised, and reads the other rows
where they are. The block holds two buffers used in turn, so an instance that runs ahead
writes the next run's rows while the others still read the last run's: it writes a buffer
again only after it has seen every instance's flag of the run in between, which each raises
after its reads of the run before. ``XLGRAPH_DIST_SHARED=0`` turns this off (MPI copies).
"""

from __future__ import annotations

import mmap
import os
import platform
import secrets
import threading
from collections.abc import Callable

import numpy as np

from xlgraph.core.instances import int_env

__all__ = ["SHARED", "SharedRows", "open_rows"]

SHARED = "XLGRAPH_DIST_SHARED"  # "0": buckets travel by MPI even on one host
DIRECTORY = "/dev/shm"
_NAME_BYTES = 128
_FLAG_BYTES = 64  # each instance's flag on a cache line of its own
_FENCE = threading.Lock()  # acquiring it is a locked instruction: earlier stores land first


class SharedRows:
    """Two ``(instances, nbytes)`` buffers in a shared mapping, and each instance's flag: the
    number of times it has published its row."""

    def __init__(self, mapping: mmap.mmap, instances: int, nbytes: int, index: int) -> None:
        whole = np.frombuffer(mapping, np.uint8)
        size = instances * nbytes
        self.buffers = [whole[k * size:(k + 1) * size].reshape(instances, nbytes)
                        for k in range(2)]
        self._flags = whole[2 * size:2 * size + instances * _FLAG_BYTES].view(np.int64)[::8]
        self.index = index
        self.count = 0  # rows published by this instance

    def turn(self) -> np.ndarray:
        """The buffer that this instance's next row goes into."""
        return self.buffers[self.count % 2]

    def publish(self) -> int:
        """Raise this instance's flag for its row in ``turn()`` (written by now); returns the
        count that every instance's flag reaches once every row of that buffer is written."""
        with _FENCE:  # the row's stores before the flag's
            self.count += 1
        self._flags[self.index] = self.count
        return self.count

    def ready(self, count: int) -> bool:
        """Whether every instance has published its row ``count``."""
        return bool((self._flags >= count).all())


def _block_bytes(instances: int, nbytes: int) -> int:
    return 2 * instances * nbytes + instances * _FLAG_BYTES


def one_host_allowed() -> bool:
    """Whether shared buckets may be tried here: x86-64 Linux with ``/dev/shm``, not turned off
    by ``XLGRAPH_DIST_SHARED=0`` (x86's stores land in order, which the flags rely on); a
    ``ValueError`` naming the variable for a value other than 0 or 1."""
    asked = int_env(SHARED, 1)
    if asked not in (0, 1):
        raise ValueError(f"environment variable {SHARED}={os.environ[SHARED]!r} is not 0 (buckets "
                         "through MPI) or 1 (shared memory where the instances share a host)")
    return (asked == 1 and platform.system() == "Linux"
            and platform.machine() in ("x86_64", "AMD64") and os.access(DIRECTORY, os.W_OK))


def open_rows(gather: Callable[[np.ndarray, str], np.ndarray], index: int, instances: int,
              nbytes: int) -> SharedRows | None:
    """Every instance maps one new block for a bucket of ``nbytes`` bytes per instance
    (instance 0 makes it and names it to the others); None in every instance when any cannot
    (another host, no ``/dev/shm`` or no room in it). ``gather(array, purpose)``: every
    instance's ``array``, stacked (an all-gather); this is collective: every instance calls it
    at the same point of its program."""
    path, mapping = "", None
    if index == 0:
        path = os.path.join(DIRECTORY, f"xlgraph-{os.getpid()}-{secrets.token_hex(8)}")
        try:
            mapping = _map(path, _block_bytes(instances, nbytes), create=True)
        except OSError:
            if os.path.exists(path):
                os.unlink(path)
            path = ""
    name = np.frombuffer(path.encode().ljust(_NAME_BYTES, b"\0"), np.uint8)
    path = gather(name, "the name of its shared block")[0].tobytes()
    path = path.rstrip(b"\0").decode()
    if index != 0 and path:
        try:
            mapping = _map(path, _block_bytes(instances, nbytes), create=False)
        except OSError:
            mapping = None
    mapped = gather(np.array([mapping is not None], np.uint8), "its shared block mapped")
    if index == 0 and path:
        os.unlink(path)  # every instance has it mapped (or gave up): the name is not needed
    if not mapped.all():
        return None
    return SharedRows(mapping, instances, nbytes, index)


def _map(path: str, size: int, create: bool) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:  # the pages reserved now: a full /dev/shm (a container's 64 MiB, say)
            os.posix_fallocate(fd, 0, size)  # fails here, not with SIGBUS at a later write
        elif os.fstat(fd).st_size != size:
            raise OSError(f"{path} holds {os.fstat(fd).st_size} bytes, not {size}")
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
