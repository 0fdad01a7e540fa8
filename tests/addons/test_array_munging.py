"""``popxl_addons.array_munging``: host-side numpy helpers for shards and replicas."""

from __future__ import annotations

import numpy as np
import pytest

from xlgraph.addons import array_munging as am

X = np.arange(24).reshape(4, 6)


def test_shard_unshard_repeat():
    s = am.shard(X, 2, axis=1)
    assert s.shape == (2, 4, 3) and (s[1] == X[:, 3:]).all()
    assert (am.unshard(s, axis=1) == X).all() and (am.unshard_arrays(list(s), 1) == X).all()
    assert am.repeat(np.array([1, 2]), 3, axis=0).tolist() == [[1, 2]] * 3
    assert am.repeat_axis(np.array([1, 2]), 2).tolist() == [1, 2, 1, 2]


def test_2d_blocks_outer_major():
    blocks = am.shard2D(X, 2, 3, 0, 1)
    assert blocks.shape == (6, 2, 2)
    assert (blocks[1] == X[:2, 2:4]).all() and (blocks[3] == X[2:, :2]).all()
    assert (am.split2D(X, 2, 3, 0, 1) == blocks).all()
    assert (am.unshard2D(blocks, 2, 3, 0, 1) == X).all()


def test_repeat_shard_orders():
    x = np.array([10, 20])
    assert am.repeat_shard(x, 2, 2, 0).ravel().tolist() == [10, 20, 10, 20]
    assert am.repeat_shard(x, 2, 2, 0, "strided").ravel().tolist() == [10, 10, 20, 20]
    with pytest.raises(ValueError):
        am.repeat_shard(x, 2, 2, 0, "other")


def test_tensor_parallel_input_and_output():
    data = np.arange(4 * 3).reshape(4, 3)
    out = am.tensor_parallel_input(data, tp=2, rf=4)
    assert out.shape == (2, 4, 3)
    assert (out[0, 0] == data[0]).all() and (out[0, 1] == data[0]) .all()
    assert (out[0, 2] == data[1]).all() and (out[1, 3] == data[3]).all()
    marked = am.tensor_parallel_input(data[:2], 2, 4, repeat_fn=lambda x, i: x * 10 ** i)
    assert marked.shape == (4, 3) and (marked[1] == data[0] * 10).all()  # length-1 squeezed
    with pytest.raises(ValueError):
        am.tensor_parallel_input(data, 3, 4)
    with pytest.raises(ValueError):
        am.tensor_parallel_input(data, 8, 4)
    # outputs of 3 transfers x 2 data-parallel x 2 tensor-parallel replicas
    host = np.arange(3 * 2 * 2 * 5).reshape(3, 4, 5)
    per_sample = am.tensor_parallel_output(host, 3, 2, 4, (5,), true_num_host_transfers=2)
    assert per_sample.shape == (4, 5) and (per_sample[1] == host[0, 2]).all()
    both = am.tensor_parallel_output(host, 3, 2, 4, (5,), tp_identical=False)
    assert both.shape == (6, 2, 5) and (both[0, 1] == host[0, 1]).all()


def test_pad_squeeze_and_axes():
    assert am.pad_axis(np.ones(2), 4, 0, value=7).tolist() == [1, 1, 7, 7]
    with pytest.raises(AssertionError):
        am.pad_axis(np.ones(3), 2, 0)
    y = np.zeros((1, 3, 1))
    assert am.squeeze_safe(y, (0, 1)).shape == (3, 1)  # axis 1 has length 3: kept
    assert am.squeeze_safe(y).shape == (3,)
    assert am.handle_negative_axis(y, -1) == 2
    with pytest.raises(IndexError):
        am.handle_negative_axis(y, 3)
    with pytest.raises(IndexError):
        am.handle_negative_axis(np.float32(1), 0)
