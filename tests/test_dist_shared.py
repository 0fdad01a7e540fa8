"""Buckets in shared memory (``xlgraph.dist.shared``): instances on one host exchange their
gradients through one mapped block, with the bits of one process of every replica and of the
exchange through MPI, run after run."""

from __future__ import annotations

import mmap
import sys
import threading

import numpy as np
import pytest

from tests.test_dist import ROOT, _run, console_script, run_alone
from xlgraph.dist.shared import SHARED, SharedRows, one_host_allowed, open_rows

PROGRAM = ROOT / "tests" / "programs" / "dist_shared.py"
R = 8


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return run_alone(PROGRAM, tmp_path_factory.mktemp("one") / "out", R)


def _job(monkeypatch, tmp_path, instances: int, replicas: int, shared: str) -> list:
    monkeypatch.setenv(SHARED, shared)
    done = _run([*console_script(), "--num-instances", str(instances), "--num-replicas",
                 str(replicas), "--timeout", "30", "--", sys.executable, str(PROGRAM),
                 str(tmp_path / "i")])
    assert done.returncode == 0, done.stderr
    return [np.load(tmp_path / f"i.{i}.npz") for i in range(instances)]


@pytest.mark.parametrize("instances, shared", [(2, "1"), (2, "0"), (4, "1")])
def test_instances_train_with_the_bits_of_one_process(instances, shared, one_process,
                                                      monkeypatch, tmp_path):
    pytest.importorskip("mpi4py", reason="the 'dist' extra is not installed")
    parts = _job(monkeypatch, tmp_path, instances, R, shared)
    for part in parts:
        assert bool(part["shared"]) == (shared == "1" and one_host_allowed())
        for name in ("loss", "w", "b", "total"):
            assert part[name].tobytes() == one_process[name].tobytes(), name
    losses = one_process["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_one_replica_per_instance_matches_one_process_of_two(monkeypatch, tmp_path):
    """The benchmark's layout: instances of one replica (the one-replica plan)."""
    pytest.importorskip("mpi4py", reason="the 'dist' extra is not installed")
    want = run_alone(PROGRAM, tmp_path / "one", 2)
    for part in _job(monkeypatch, tmp_path, 2, 2, "1"):
        assert bool(part["shared"]) == one_host_allowed()
        for name in ("loss", "w", "b", "total"):
            assert part[name].tobytes() == want[name].tobytes(), name


def _open_together(instances: int, nbytes: int) -> list[SharedRows | None]:
    """``open_rows`` of ``instances`` instances, each in a thread of its own, over an
    all-gather that waits for every instance as MPI's does."""
    slots: list[np.ndarray | None] = [None] * instances
    meet = threading.Barrier(instances)
    rows: list[SharedRows | None] = [None] * instances

    def gather_for(index: int):
        def gather(local: np.ndarray, purpose: str) -> np.ndarray:
            slots[index] = local
            meet.wait()
            everyone = np.stack(slots)
            meet.wait()
            return everyone
        return gather

    def instance(index: int) -> None:
        rows[index] = open_rows(gather_for(index), index, instances, nbytes)

    threads = [threading.Thread(target=instance, args=(i,)) for i in range(instances)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


@pytest.mark.skipif(not one_host_allowed(), reason="shared buckets need x86-64 Linux")
@pytest.mark.parametrize("instances", [1, 2, 4, 8])
def test_rows_alternate_and_wait_for_every_instance(instances):
    """Every instance sees every row written into the buffer of its turn, and a buffer is
    ready only once every instance has published its row there."""
    rows = _open_together(instances, 4096)
    assert all(isinstance(r, SharedRows) for r in rows)
    for run in range(1, 5):
        for i, r in enumerate(rows):
            r.turn()[i] = run * 10 + i
            assert not r.ready(run) or i == instances - 1
            r.publish()
        assert all(r.ready(run) and not r.ready(run + 1) for r in rows)
        for r in rows:
            seen = r.buffers[(run - 1) % 2]
            assert (seen[:, 0] == run * 10 + np.arange(instances)).all()
    assert not np.shares_memory(rows[0].buffers[0], rows[0].buffers[1])


def test_a_block_that_cannot_be_opened_shares_nothing(monkeypatch):
    """Instance 0's block name means nothing on another host: every instance gets None."""
    def gather_elsewhere(local: np.ndarray, purpose: str) -> np.ndarray:
        if "name" in purpose:  # the name of a block on another host
            local = np.frombuffer(b"/dev/shm/xlgraph-elsewhere".ljust(local.size, b"\0"),
                                  np.uint8)
        return np.stack([local, local])

    assert open_rows(gather_elsewhere, 1, 2, 4096) is None
    monkeypatch.setenv(SHARED, "0")
    assert not one_host_allowed()


@pytest.mark.parametrize("value", ["yes", "2", ""])
def test_a_bad_setting_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(SHARED, value)
    with pytest.raises(ValueError, match=f"environment variable {SHARED}={value!r} is not"):
        one_host_allowed()


@pytest.mark.skipif(not one_host_allowed(), reason="shared buckets need x86-64 Linux")
def test_a_full_shared_memory_shares_nothing_and_leaves_no_file(monkeypatch):
    """No room in ``/dev/shm`` for the block (a container's 64 MiB): no instance shares, and
    the file made for it is gone (it would have failed with SIGBUS at a later write)."""
    import errno
    import os

    from xlgraph.dist import shared

    before = set(os.listdir(shared.DIRECTORY))

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    assert _open_together(2, 1 << 20) == [None, None]
    assert {n for n in os.listdir(shared.DIRECTORY) if n.startswith("xlgraph-")} <= before


def test_rows_lie_in_one_mapping():
    mapping = mmap.mmap(-1, 2 * 3 * 128 + 3 * 64)
    rows = SharedRows(mapping, 3, 128, 1)
    assert rows.turn() is rows.buffers[0] and rows.buffers[0].shape == (3, 128)
    assert rows.publish() == 1 and rows.turn() is rows.buffers[1]
    assert not rows.ready(1)
