"""PopXL's ipu_model at the edges: a program larger than the 4-tile model's memory (3-D
average pooling), refused by default and run under Poplar's ``debug.allowOutOfMemory``; the
executable-cache options PopXL programs set."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops
from xlgraph.errors import OutOfMemoryError

SHAPE = (2, 10, 50, 50, 10)  # 2 MB of float32: more than 4 tiles of 624 KiB hold with the result


def _pool_ir(engine_options: dict | None) -> tuple[popxl.Ir, object, object]:
    ir = popxl.Ir()
    if engine_options is not None:
        ir._pb_ir.getSessionOptions().engineOptions = engine_options
    with ir.main_graph:
        h2d = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        y = ops.average_pool(ops.host_load(h2d), (2, 2, 2))  # PopXL: stride 1
        d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d2h, y)
    return ir, h2d, d2h


def test_average_pool_3d_over_4_tiles_is_out_of_memory_by_default() -> None:
    ir, *_ = _pool_ir(None)
    with pytest.raises(OutOfMemoryError, match=r"4 tiles of 638,976 bytes"):
        popxl.Session(ir, "ipu_model")


@pytest.mark.parametrize("where", ["session", "environment"])
def test_allow_out_of_memory_runs_and_reports_the_tiles_over(where, monkeypatch) -> None:
    """Poplar's engine option ``debug.allowOutOfMemory`` (session options' engineOptions or
    POPLAR_ENGINE_OPTIONS): the over-memory program still compiles and runs on the IPU Model,
    and its memory report shows how far over the tiles are."""
    options = None
    if where == "session":
        options = {"debug.allowOutOfMemory": "true"}
    else:
        monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"debug.allowOutOfMemory": "true"}')
    ir, h2d, d2h = _pool_ir(options)
    x = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)
    session = popxl.Session(ir, "ipu_model")
    with session:
        y = session.run({h2d: x})[d2h]
    want = np.lib.stride_tricks.sliding_window_view(x, (2, 2, 2), (2, 3, 4)).mean((-3, -2, -1))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    report = session.report()
    peak = sum(report.always_live.values()) + report.not_always_live_peak
    assert (peak > report.model.memory_bytes_per_tile).any()


def test_executable_cache_options_are_accepted_and_change_nothing(tmp_path) -> None:
    """PopXL programs turn on PopART's executable cache with the session options
    ``enableEngineCaching`` and ``cachePath``; accepted and recorded, nothing is written (no
    executable to cache) and the values are the same in a second Session of the same program."""
    results = []
    for _ in range(2):
        ir = popxl.Ir()
        opts = ir._pb_ir.getSessionOptions()
        opts.enableEngineCaching = True
        opts.cachePath = str(tmp_path / "cache")
        with ir.main_graph:
            h2d = popxl.h2d_stream((1, 1, 4, 4, 4), popxl.float32, "x")
            y = ops.average_pool(ops.host_load(h2d), (2, 2, 2), stride=(2, 2, 2))
            d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
            ops.host_store(d2h, y)
        assert opts.enableEngineCaching and opts.cachePath == str(tmp_path / "cache")
        x = np.arange(64, dtype=np.float32).reshape(1, 1, 4, 4, 4)
        with popxl.Session(ir, "ipu_model") as session:
            results.append(session.run({h2d: x})[d2h])
    want = x.reshape(1, 1, 2, 2, 2, 2, 2, 2).mean(axis=(3, 5, 7))
    for got in results:
        np.testing.assert_array_equal(got, want)
    assert not (tmp_path / "cache").exists()
    with pytest.raises(AttributeError, match="enableEngineCaching"):
        ir._pb_ir.getSessionOptions().enableModelCaching = True  # not a PopART option
