"""``poptorch.AsynchronousDataAccessor`` with its real worker process, as PopTorch's behaves:
each ``iter()`` is one epoch from its start (an epoch left early restarts the worker),
``load_indefinitely=False`` ends the worker with the epoch, ``terminate()`` stops it and
iterating again starts a new one, and a killed worker raises ``poptorch.Error`` at once instead
of leaving the caller waiting."""

from __future__ import annotations

import os
import signal
import time

import pytest
from process_helpers import gone

torch = pytest.importorskip("torch")
poptorch = pytest.importorskip("xlgraph.poptorch")

EPOCH = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


def _accessor(**kwargs) -> poptorch.AsynchronousDataAccessor:
    loader = torch.utils.data.DataLoader(torch.arange(8.0), batch_size=2)
    return poptorch.AsynchronousDataAccessor(loader, **kwargs)



def test_the_worker_is_a_process_and_each_iteration_is_one_epoch():
    accessor = _accessor(early_preload=True)
    pid = accessor.worker_pid
    assert pid is not None and pid != os.getpid()
    assert [b.tolist() for b in accessor] == EPOCH
    assert [b.tolist() for b in accessor] == EPOCH  # load_indefinitely: the next one was ready
    assert accessor.worker_pid == pid
    for i, _ in enumerate(accessor):
        if i == 1:
            break
    # left early: the next iteration starts at the beginning, from a new worker
    assert [b.tolist() for b in accessor] == EPOCH
    assert accessor.worker_pid != pid and gone(pid)
    accessor.terminate()


def test_single_epoch_worker_ends_with_the_epoch_and_iterating_again_restarts():
    accessor = _accessor(load_indefinitely=False)
    pid = accessor.worker_pid  # started by the constructor
    assert pid is not None
    it = iter(accessor)
    assert next(it).tolist() == EPOCH[0]
    assert accessor.worker_pid == pid
    assert [b.tolist() for b in it] == EPOCH[1:]
    assert accessor.worker_pid is None and gone(pid)
    assert [b.tolist() for b in accessor] == EPOCH


def test_terminate_stops_the_worker_and_iterating_again_starts_a_new_one():
    accessor = _accessor()
    assert next(iter(accessor)).tolist() == EPOCH[0]
    pid = accessor.worker_pid
    accessor.terminate()
    assert accessor.worker_pid is None and gone(pid)
    accessor.terminate()  # twice: nothing to stop
    assert [b.tolist() for b in accessor] == EPOCH
    del accessor  # collecting the accessor stops its worker too


class Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        i = 0
        while True:
            yield torch.full((2,), float(i))
            i += 1


def test_a_killed_worker_raises_instead_of_hanging():
    accessor = poptorch.AsynchronousDataAccessor(Endless(), buffer_size=2)
    start = time.monotonic()
    with pytest.raises(poptorch.Error, match=r"worker process \(pid \d+\) ended unexpectedly "
                                             r"\(killed by SIGKILL\).*iterate again"):
        for i, batch in enumerate(accessor):
            assert batch.tolist() == [float(i)] * 2
            if i == 0:
                os.kill(accessor.worker_pid, signal.SIGKILL)
    assert time.monotonic() - start < 120  # raised, not waited for ever (however loaded)
    assert accessor.worker_pid is None
    # iterating again starts a new worker at the beginning of the dataset
    assert next(iter(accessor)).tolist() == [0.0, 0.0]
    accessor.terminate()


def test_a_worker_exception_keeps_its_type():
    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                raise IndexError(f"item {i} is missing")
            return torch.tensor([float(i)])

    accessor = poptorch.AsynchronousDataAccessor(torch.utils.data.DataLoader(Broken()))
    seen = []
    with pytest.raises(IndexError, match="item 2 is missing"):
        for batch in accessor:
            seen.append(batch.item())
    assert seen == [0.0, 1.0] and accessor.worker_pid is None


def test_restarted_epochs_shuffle_anew_and_the_first_is_torchs():
    data = torch.arange(16.0)

    def loader():
        return torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)

    torch.manual_seed(3)
    eager = [torch.cat(list(loader())).tolist() for _ in range(3)]
    torch.manual_seed(3)
    accessor = poptorch.AsynchronousDataAccessor(loader(), load_indefinitely=False)
    epochs = [torch.cat(list(accessor)).tolist() for _ in range(3)]
    assert epochs[0] == eager[0]
    assert all(sorted(e) == data.tolist() for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3, "a restarted worker repeated an epoch's order"
