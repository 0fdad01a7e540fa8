"""``poptorch.DataLoader`` in ``Sync`` mode loads ahead in a background thread: the same batches
in the same order as torch's loader, the thread gone when the epoch ends or the loop is left."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")
poptorch = pytest.importorskip("xlgraph.poptorch")
from xlgraph.poptorch import prefetch  # noqa: E402
from xlgraph.progress import tqdm  # noqa: E402

NAME = "poptorch-dataloader-prefetch"


def _prefetching() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == NAME]


class Recorded(torch.utils.data.Dataset):
    """Items 0..n-1 as tensors; records the thread that loaded each; item ``bad`` raises."""

    def __init__(self, n: int, bad: int | None = None) -> None:
        self.n, self.bad, self.threads = n, bad, {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        self.threads[i] = threading.current_thread().name
        if i == self.bad:
            raise KeyError(f"item {i} is broken")
        return torch.tensor([float(i)])


def _loader(dataset, prefetch, **kwargs):
    made = poptorch.DataLoader(poptorch.Options(), dataset, batch_size=3, **kwargs)
    made.prefetch = prefetch
    return made


@pytest.mark.parametrize("prefetch", [True, False])
def test_batches_and_order_are_torchs(prefetch):
    data = torch.arange(200.0).view(100, 2)
    torch.manual_seed(3)
    expected = [b.clone() for _ in range(2) for b in
                torch.utils.data.DataLoader(data, batch_size=3, shuffle=True, drop_last=True)]
    torch.manual_seed(3)
    loader = _loader(data, prefetch, shuffle=True)
    got = [b.clone() for _ in range(2) for b in loader]  # two epochs, new orders
    assert len(got) == len(expected) == 66
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not _prefetching()


def test_the_thread_loads_ahead_and_the_first_batch_in_the_callers_thread():
    dataset = Recorded(30)
    batches = iter(_loader(dataset, True))
    first = next(batches)
    assert first.flatten().tolist() == [0.0, 1.0, 2.0]
    assert {dataset.threads[i] for i in range(3)} == {threading.current_thread().name}
    deadline = time.monotonic() + 30
    while not any(name == NAME for name in dataset.threads.values()):
        assert time.monotonic() < deadline, "the background thread loaded nothing"
        time.sleep(0.01)
    assert [b.flatten().tolist() for b in batches] == [[3.0 * k + j for j in range(3)]
                                                       for k in range(1, 10)]
    assert not _prefetching()


def test_no_thread_unless_asked_for():
    batches = iter(poptorch.DataLoader(poptorch.Options(), Recorded(30), batch_size=3))
    next(batches)
    assert not isinstance(batches, prefetch.Ahead) and not _prefetching()


@pytest.mark.parametrize("wrap", [False, True])
def test_leaving_the_loop_early_stops_the_thread(wrap):
    loader = _loader(Recorded(60), True)
    for i, _ in enumerate(tqdm(loader, disable=True) if wrap else loader):
        if i == 4:
            assert _prefetching() or i < 1
            break
    assert not _prefetching()
    with pytest.raises(ValueError, match="in the loop body"):
        for i, _ in enumerate(tqdm(loader, disable=True) if wrap else loader):
            if i == 3:
                raise ValueError("in the loop body")
    assert not _prefetching()


def test_a_failing_item_raises_at_its_batch_and_stops_the_thread():
    seen = []
    with pytest.raises(KeyError, match="item 13 is broken"):
        for batch in _loader(Recorded(30, bad=13), True):
            seen.append(batch.flatten().tolist())
    assert seen == [[3.0 * k + j for j in range(3)] for k in range(4)]  # 12 items, then 13
    assert not _prefetching()


def test_workers_and_async_modes_keep_their_own_loading():
    loader = _loader(torch.arange(12.0), True, mode=poptorch.DataLoaderMode.Async)
    assert [b.tolist() for b in loader] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0],
                                            [6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]
    assert not isinstance(iter(_loader(torch.arange(12.0), True)), list)


@pytest.mark.usefixtures("unverified_data")
@pytest.mark.parametrize("batchable, target_transform", [(True, None), (False, None),
                                                         (True, abs)])
def test_whole_batches_from_vision_datasets_are_torchs_collated_items(tmp_path, batchable,
                                                                      target_transform):
    pytest.importorskip("PIL")
    from example_data import write_synthetic

    from xlgraph.vision import datasets, transforms

    write_synthetic(tmp_path, "FashionMNIST", 70, 8)
    last = transforms.Normalize((0.5,), (0.5,)) if batchable else transforms.Lambda(abs)
    transform = transforms.Compose([transforms.ToTensor(), last])

    class PerItem(datasets.FashionMNIST):
        __getitems__ = None

    asked = []

    class Counted(datasets.FashionMNIST):
        def collated_batch(self, indices):
            batch = super().collated_batch(indices)
            asked.append(batch is not None)
            return batch

    def epochs(cls, make):
        torch.manual_seed(11)
        data = cls(str(tmp_path), transform=transform, target_transform=target_transform)
        loader = make(data)
        return [b for _ in range(2) for b in loader]

    expected = epochs(PerItem, lambda d: torch.utils.data.DataLoader(d, batch_size=16,
                                                                     shuffle=True,
                                                                     drop_last=True))
    got = epochs(Counted, lambda d: poptorch.DataLoader(poptorch.Options(), d, batch_size=16,
                                                        shuffle=True))
    assert len(got) == len(expected) == 8 and len(asked) == 8
    assert all(asked) == (batchable and target_transform is None)
    for (x, y), (x_1, y_1) in zip(got, expected):
        assert torch.equal(x, x_1) and torch.equal(y, y_1) and y.dtype == y_1.dtype
