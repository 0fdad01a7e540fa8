"""Tests for xlgraph.data.DataLoader."""

from __future__ import annotations

import numpy as np
import pytest

from xlgraph.data import DataLoader


def _arrays(n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return x, np.arange(n, dtype=np.int32) * 10


def _rows(loader: DataLoader) -> list[list[int]]:
    """The label rows of each item of one epoch (labels are 10 * row index)."""
    return [(y // 10).ravel().tolist() for _, y in loader]


def test_batches_cover_data_in_order():
    x, y = _arrays(10)
    loader = DataLoader(x, y, batch_size=4)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    assert [b[0].shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)


def test_single_array_yields_tuples():
    batches = list(DataLoader(np.arange(5), batch_size=2))
    assert [len(b) for b in batches] == [1, 1, 1]
    assert batches[-1][0].tolist() == [4]


def test_drop_last():
    loader = DataLoader(*_arrays(10), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert _rows(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_exact_multiple_keeps_all_batches():
    loader = DataLoader(*_arrays(8), batch_size=4, drop_last=True)
    assert len(loader) == len(list(loader)) == 2


def test_shuffle_is_seeded_and_changes_per_epoch():
    x, y = _arrays(50)
    first = DataLoader(x, y, batch_size=8, shuffle=True, seed=3)
    second = DataLoader(x, y, batch_size=8, shuffle=True, seed=3)
    epochs = [_rows(first) for _ in range(3)]
    assert epochs == [_rows(second) for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    for epoch in epochs:
        assert sorted(sum(epoch, [])) == list(range(50))
    other = DataLoader(x, y, batch_size=8, shuffle=True, seed=4)
    assert _rows(other) != epochs[0]


def test_shuffle_keeps_arrays_aligned():
    x, y = _arrays(20)
    for xb, yb in DataLoader(x, y, batch_size=6, shuffle=True, seed=0):
        np.testing.assert_array_equal(xb[:, 0], (yb // 10) * 3)


def test_grouping_per_host_transfer():
    x, y = _arrays(20)
    loader = DataLoader(x, y, batch_size=3, num_host_transfers=2)
    groups = list(loader)
    assert len(loader) == len(groups) == 3
    assert all(xb.shape == (2, 3, 3) and yb.shape == (2, 3) for xb, yb in groups)
    assert groups[1][1].tolist() == [[60, 70, 80], [90, 100, 110]]
    np.testing.assert_array_equal(groups[2][0].reshape(-1, 3), x[12:18])


def test_grouping_with_shuffle():
    x, y = _arrays(25)
    loader = DataLoader(x, y, batch_size=4, num_host_transfers=3, shuffle=True, seed=1)
    groups = list(loader)
    assert len(groups) == len(loader) == 2
    rows = np.concatenate([yb.ravel() // 10 for _, yb in groups])
    assert len(set(rows.tolist())) == 24
    for xb, yb in groups:
        np.testing.assert_array_equal(xb[..., 0], (yb // 10) * 3)


def test_too_few_rows_for_a_group_is_refused():
    """An empty epoch would train on nothing without a word (issue 9, item 13)."""
    with pytest.raises(ValueError, match="5 rows make no complete group of 6 rows"):
        DataLoader(np.arange(5), batch_size=3, num_host_transfers=2)
    with pytest.raises(ValueError, match="no complete group of 6"):
        DataLoader(np.arange(5), batch_size=6, drop_last=True)
    assert len(DataLoader(np.arange(5), batch_size=6)) == 1  # a short last batch is kept


@pytest.mark.parametrize(
    "arrays, kwargs, message",
    [
        ((np.zeros(4), np.zeros(5)), {"batch_size": 2}, "first dimension"),
        ((np.zeros(4), np.float32(1.0)), {"batch_size": 2}, "first dimension"),
        ((), {"batch_size": 2}, "at least one"),
        ((np.zeros(4),), {"batch_size": 0}, "positive"),
        ((np.zeros(4),), {"batch_size": 2, "num_host_transfers": 0}, "positive"),
    ],
    ids=["lengths", "scalar", "none", "batch-size", "host-transfers"],
)
def test_invalid_arguments(arrays, kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataLoader(*arrays, **kwargs)
