"""The IPU model reads PopXL's placement facts: ``numIOTiles`` with ``io_tiles()`` in its tile
accounting, ``merge_exchange()`` groups in its syncs; planning arguments it has no term for
leave the report unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops, transforms
from xlgraph.ipu import IPUModel

MODEL = IPUModel(tiles_per_ipu=16)
N = 128


def _staged_matmul_ir(io_tiles: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream]:
    """x arrives on the IO tiles, is copied to the compute tiles and multiplied by w."""
    ir = popxl.Ir()
    ir.session_options.numIOTiles = io_tiles
    with ir.main_graph:
        w = popxl.variable(np.arange(N * N, dtype=np.float32).reshape(N, N) / N ** 2, name="w")
        stream = popxl.h2d_stream((N, N), popxl.float32, "x")
        with popxl.io_tiles():
            staged = ops.host_load(stream)
        y = ops.matmul(ops.io_tile_copy(staged), w)
        ops.host_store(popxl.d2h_stream((N, N), popxl.float32, "y"), y)
    return ir, stream


def _run(session: popxl.Session, stream: popxl.HostToDeviceStream) -> np.ndarray:
    x = np.random.default_rng(0).normal(size=(N, N)).astype(np.float32)
    with session:
        return next(iter(session.run({stream: x}).values()))


def test_io_tiles_are_reserved_and_hold_the_io_tile_tensors() -> None:
    io = 4
    plain = popxl.Session(_staged_matmul_ir(0)[0], "ipu_model", ipu_model=MODEL).report()
    reserved = popxl.Session(_staged_matmul_ir(io)[0], "ipu_model", ipu_model=MODEL).report()
    tiles = reserved.tiles()
    compute, io_set = tiles[:-io], tiles[-io:]
    # variables live on the compute tiles only; the staged input on the IO tiles
    assert all(t["always_live"]["variables"] == 0 for t in io_set)
    assert sum(t["always_live"]["variables"] for t in compute) == N * N * 4
    assert all(t["not_always_live_peak"] >= N * N * 4 // io for t in io_set)
    assert all(t["always_live"]["variables"] > 0 for t in plain.tiles())  # before: every tile
    # the matmul has fewer tiles to spread over, so it takes longer
    matmul = {r.op: r for r in reserved.cycles.rows}["matmul"]
    matmul_plain = {r.op: r for r in plain.cycles.rows}["matmul"]
    assert (matmul.tiles, matmul_plain.tiles) == (MODEL.tiles - io, MODEL.tiles)
    assert matmul.cycles > matmul_plain.cycles
    assert reserved.cycles.device_cycles > plain.cycles.device_cycles


def test_io_tiles_must_leave_compute_tiles_and_cpu_ignores_them() -> None:
    ir, stream = _staged_matmul_ir(MODEL.tiles_per_ipu)
    with pytest.raises(errors.ArgumentError, match="numIOTiles=16"):
        popxl.Session(ir, "ipu_model", ipu_model=MODEL)
    reference_ir, reference_stream = _staged_matmul_ir(0)
    np.testing.assert_array_equal(_run(popxl.Session(ir, "cpu"), stream),
                                  _run(popxl.Session(reference_ir, "cpu"), reference_stream))


def _chain_ir(merged: bool, links: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((N, N), popxl.float32, "x")
        x = ops.host_load(stream)
        with transforms.merge_exchange() if merged else popxl.context.op_hints():
            for k in range(links):
                x = x + float(k)
        ops.host_store(popxl.d2h_stream((N, N), popxl.float32, "y"), x)
    return ir, stream


def test_a_merge_exchange_group_pays_one_sync() -> None:
    links = 5
    (merged, m_stream), (each, e_stream) = _chain_ir(True, links), _chain_ir(False, links)
    saved = (popxl.Session(each, "ipu_model", ipu_model=MODEL).report().cycles.device_cycles
             - popxl.Session(merged, "ipu_model", ipu_model=MODEL).report().cycles.device_cycles)
    assert saved == pytest.approx((links - 1) * MODEL.sync_cycles)
    np.testing.assert_array_equal(_run(popxl.Session(merged, "cpu"), m_stream),
                                  _run(popxl.Session(each, "cpu"), e_stream))


def test_planning_arguments_without_a_model_term_leave_the_report_unchanged() -> None:
    """The model has one float16 AMP rate (partials in half or float alike) and charges no
    per-op temporary memory to matmuls, so these are recorded and change nothing."""

    def report(**planning: object) -> dict:
        ir = popxl.Ir()
        if planning:
            ir.session_options.partialsTypeMatMuls = "half"
        with ir.main_graph:
            a = popxl.variable(np.ones((N, N), np.float16))
            c = ops.matmul(a, a, **planning)
            ops.host_store(popxl.d2h_stream((N, N), popxl.float16, "c"), c)
        assert c.producer.hints.get("partials_type") == planning.get("partials_type")
        data = popxl.Session(ir, "ipu_model", ipu_model=MODEL).report().to_dict()
        return {k: data[k] for k in ("memory", "liveness", "time")}

    assert report(partials_type="half", available_memory_proportion=0.1) == report()
