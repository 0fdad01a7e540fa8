"""``poptorch.DataLoader`` as PopTorch programs meet it: worker counts as given, iterable
datasets whose workers each leave a partial batch, ``AsyncRebatched`` cutting them into combined
batches, ``len()``, ``batch_size=None``, distributed processes reading contiguous blocks, and the
accessor made with the loader."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import xlgraph.poptorch as poptorch  # noqa: E402


class Stream(torch.utils.data.IterableDataset):
    """``n`` items, each torch worker reading its contiguous ``ceil(n / workers)`` share."""

    def __init__(self, n: int = 101) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        workers, wid = (1, 0) if info is None else (info.num_workers, info.id)
        share = math.ceil(self.n / workers)
        for i in range(wid * share, min(self.n, (wid + 1) * share)):
            yield torch.tensor([float(i)])


def test_workers_are_not_capped_and_each_leaves_its_partial_batch():
    loader = poptorch.DataLoader(poptorch.Options(), Stream(), batch_size=4, num_workers=7)
    assert loader.num_workers == 7
    batches = list(loader)
    assert len(batches) == 20 and all(b.shape == (4, 1) for b in batches)  # 6*3 + 2
    assert len(loader) == 25  # torch's theoretical length
    with pytest.warns(UserWarning, match="drop_last=False"):
        short = poptorch.DataLoader(poptorch.Options(), Stream(), batch_size=6, num_workers=7,
                                    drop_last=False)
    sizes = sorted(b.shape[0] for b in short)
    assert sizes == [3] * 6 + [5] + [6] * 13


@pytest.mark.parametrize("worker_size", [None, 1, 3, 4])
def test_async_rebatched_cuts_the_workers_batches_into_whole_batches(worker_size):
    opts = poptorch.Options()
    loader = poptorch.DataLoader(opts, Stream(), batch_size=4, num_workers=7,
                                 mode=poptorch.DataLoaderMode.AsyncRebatched,
                                 rebatched_worker_size=worker_size)
    assert loader._accessor is not None and len(loader) == 25
    batches = list(loader)
    assert len(batches) == 25 and all(b.shape == (4, 1) for b in batches)
    items = torch.cat(batches).flatten().tolist()
    assert len(set(items)) == 100 and set(items) <= set(range(101))  # only one item dropped
    loader.terminate()


def test_async_without_drop_last_rebatches_and_keeps_the_remainder():
    with pytest.warns(UserWarning, match="drop_last=False"):
        loader = poptorch.DataLoader(poptorch.Options().deviceIterations(2), Stream(),
                                     batch_size=2, num_workers=3, drop_last=False,
                                     mode=poptorch.DataLoaderMode.Async)
    assert len(loader) == 26
    sizes = [b.shape[0] for b in loader]
    assert sizes == [4] * 25 + [1]
    loader.terminate()


def test_rebatched_worker_size_cannot_exceed_the_combined_batch():
    with pytest.raises(AssertionError):
        poptorch.DataLoader(poptorch.Options(), Stream(), batch_size=4,
                            mode=poptorch.DataLoaderMode.AsyncRebatched,
                            rebatched_worker_size=5)


def test_batch_size_none_yields_items_unbatched():
    data = [torch.full((2, 3), float(i)) for i in range(5)]
    loader = poptorch.DataLoader(poptorch.Options(), data, batch_size=None)
    assert loader.combinedBatchSize is None and len(loader) == 5
    items = list(loader)
    assert [t.shape for t in items] == [(2, 3)] * 5 and items[3][0, 0] == 3.0


@pytest.mark.parametrize("drop_last,blocks", [
    (True, [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))]),
    (False, [list(range(0, 9)), list(range(9, 18)), list(range(18, 26))]),
])
def test_distributed_processes_read_contiguous_blocks(drop_last, blocks):
    got = []
    for rank in range(3):
        opts = poptorch.Options()
        opts.Distributed.configureProcessId(rank, 3)
        if drop_last:
            loader = poptorch.DataLoader(opts, list(range(26)), batch_size=2)
        else:
            with pytest.warns(UserWarning, match="drop_last=False"):
                loader = poptorch.DataLoader(opts, list(range(26)), batch_size=2,
                                             drop_last=False)
        got.append([i for b in loader for i in b.tolist()])
    assert got == blocks


def test_distributed_shuffling_needs_a_seed_and_shares_one_permutation():
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(0, 2)
    with pytest.raises(AssertionError):
        poptorch.DataLoader(opts, list(range(12)), batch_size=2, shuffle=True)
    seen = []
    for rank in range(2):
        opts = poptorch.Options().randomSeed(7)
        opts.Distributed.configureProcessId(rank, 2)
        loader = poptorch.DataLoader(opts, list(range(12)), batch_size=2, shuffle=True)
        seen.append([i for b in loader for i in b.tolist()])
    assert sorted(seen[0] + seen[1]) == list(range(12))


def test_a_loader_with_an_accessor_cannot_get_another():
    loader = poptorch.DataLoader(poptorch.Options(), list(range(8)), batch_size=2,
                                 mode=poptorch.DataLoaderMode.Async)
    assert loader._accessor is not None
    with pytest.raises(poptorch.Error, match="^The DataLoader already uses an "
                                             "AsynchronousDataAccessor internally"):
        poptorch.AsynchronousDataAccessor(loader)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    loader.terminate()
    assert poptorch.DataLoader(poptorch.Options(), list(range(4)))._accessor is None
