"""The IPU model: hardware description, tile mapping, memory, out-of-memory errors, cycles,
and the profile report."""

from __future__ import annotations

import json

import numpy as np
import pytest

import xlgraph as popxl
from benchmarks.models import build_mlp
from xlgraph import errors, ops
from xlgraph.cost import nbytes
from xlgraph.ipu import HARDWARE, IPUModel
from xlgraph.ipu.mapping import bytes_per_tile, intervals, tiles_spanned
from xlgraph.ipu.memory import profile_memory


def test_ipu_model_knobs_and_constants() -> None:
    model = IPUModel()
    assert (model.tiles_per_ipu, model.memory_bytes_per_tile, model.tile_clock_frequency,
            model.num_worker_contexts) == (4, 638_976, 1.33e9, 6)
    assert IPUModel.full().tiles == 1472 and IPUModel.full(num_ipus=2).tiles == 2944
    assert IPUModel("ipu21").tile_clock_frequency == 1.85e9
    assert IPUModel(memory_bytes_per_tile=1000).memory_bytes_per_tile == 1000
    with pytest.raises(ValueError, match="ipu3"):
        IPUModel("ipu3")
    for version, table in HARDWARE.items():
        assert all(fact.source and fact.value > 0 for fact in table.values()), version
    # the table's peak rates reproduce the published chip figures
    gc200 = IPUModel.full()
    tflops = gc200.peak_flops_per_cycle() * gc200.tile_clock_frequency / 1e12
    assert 245 < tflops < 255  # "250 TFLOPS fp16"
    fp32 = gc200.tiles * gc200.flops_per_cycle(4, matrix=True) * gc200.tile_clock_frequency
    assert 62e12 < fp32 < 63e12  # "62.5 TFLOPS fp32"
    assert 890e6 < gc200.tiles * gc200.memory_bytes_per_tile < 1e9  # "~900 MB"


@pytest.mark.parametrize("tiles", [1, 4, 7, 1472])
def test_linear_mapping_puts_every_byte_on_exactly_one_tile(tiles: int) -> None:
    model = IPUModel(tiles_per_ipu=tiles)
    grain = int(model.fact("grain_bytes"))
    for size in [0, 1, 4, 7, 512, 513, 4096, 10_000, 123_457, 3_000_000]:
        runs = intervals(size, model)
        covered = np.zeros(size, np.int64)
        for tile, start, end in runs:
            covered[start:end] += 1
            assert 0 <= tile < tiles and start < end
            assert start % grain == 0  # runs start on grain boundaries
        assert (covered == 1).all(), size  # every byte on exactly one tile
        per_tile = bytes_per_tile(size, model)
        assert per_tile.sum() == size and len(per_tile) == tiles
        assert [t for t, _, _ in runs] == sorted({t for t, _, _ in runs})  # one run per tile
        for tile, start, end in runs:
            assert per_tile[tile] == end - start
        assert tiles_spanned(size, model) == max(1, len(runs))


def _big_ir(n: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((n, n), np.float32), name="big_weight")
        stream = popxl.h2d_stream((n, n), popxl.float32, "x")
        x = ops.host_load(stream)
        y = ops.matmul(x, w)
        ops.host_store(popxl.d2h_stream((n, n), popxl.float32, "y"), y)
    return ir, stream


def test_cpu_never_checks_memory_and_has_no_report() -> None:
    ir, stream = _big_ir(512)  # 1 MiB each for the weight, the input and the product
    session = popxl.Session(ir, "cpu")
    with session:
        session.run({stream: np.ones((512, 512), np.float32)})
    with pytest.raises(errors.UnsupportedDeviceError, match="ipu_model"):
        session.report()
    with pytest.raises(errors.UnsupportedDeviceError, match="ipu_model="):
        popxl.Session(_big_ir(8)[0], "cpu", ipu_model=IPUModel())
    with pytest.raises(errors.OutOfMemoryError):
        popxl.Session(_big_ir(512)[0], "ipu_model")
    popxl.Session(_big_ir(512)[0], "ipu_model", ipu_model=IPUModel.full())  # a whole chip fits


def test_out_of_memory_at_the_exact_threshold_names_tile_step_and_tensors() -> None:
    fits = popxl.Session(build_mlp(8).ir, "ipu_model")
    peak = fits.report().memory.peak
    tile = int(np.argmax(peak))
    popxl.Session(build_mlp(8).ir, "ipu_model",
                  ipu_model=IPUModel(memory_bytes_per_tile=int(peak.max())))  # exactly fits
    with pytest.raises(errors.OutOfMemoryError) as info:
        popxl.Session(build_mlp(8).ir, "ipu_model",
                      ipu_model=IPUModel(memory_bytes_per_tile=int(peak.max()) - 1))
    text = str(info.value)
    assert f"tile {tile} needs {int(peak.max()):,} bytes of its {int(peak.max()) - 1:,}" in text
    assert "always-live" in text and "not-always-live" in text
    assert "created at models.py:" in text  # the op at the peak and the user's line
    assert "largest live tensors there: " in text and "f32[784,32]" in text
    assert "more tiles" in text and "smaller batch" in text and "recomput" in text


def test_memory_uses_the_plans_liveness_and_counts_every_live_value() -> None:
    session = popxl.Session(build_mlp(8, loop=3).ir, "ipu_model")
    ex = session.executable
    memory = session.report().memory
    plan = ex.plans[ex.program]
    assert memory.plan is plan and memory.plan.live is plan.live  # one shared liveness
    again = profile_memory(ex.program, ex.plans, memory.model)
    np.testing.assert_array_equal(again.curve, memory.curve)
    live = plan.live
    for pos in range(1, live.end + 1):  # curve = bytes of storage roots live there
        expect = sum(size for start, end, size, *_ in memory.live_roots if start <= pos <= end)
        assert memory.curve[pos].sum() == expect, pos  # no simulator scratch
    variables = sum(nbytes(v.spec) for v in ex.program.variable_slots.values())
    assert memory.always_live["variables"].sum() == variables


def _device_cycles(batch: int, model: IPUModel | None = None, loop: int = 1):
    session = popxl.Session(build_mlp(batch, loop=loop).ir, "ipu_model", ipu_model=model)
    return session.report()


def test_estimates_grow_with_problem_size_and_loops_multiply() -> None:
    reports = [_device_cycles(b) for b in (8, 32, 128)]
    cycles = [r.cycles.device_cycles for r in reports]
    assert cycles[0] < cycles[1] < cycles[2]
    once, four = _device_cycles(8), _device_cycles(8, loop=4)
    matmuls = [r for r in four.cycles.rows if r.op == "matmul"]
    assert matmuls and all(r.executions == 4 for r in matmuls)
    assert four.cycles.device_cycles == pytest.approx(4 * once.cycles.device_cycles, rel=0.01)


@pytest.mark.parametrize("model", [IPUModel(), IPUModel.full(), IPUModel("ipu21", 2, 64)])
def test_no_op_beats_the_peak(model: IPUModel) -> None:
    report = _device_cycles(64, model)
    peak = model.peak_flops_per_cycle()
    for row in report.cycles.rows:
        assert row.flops <= row.cycles * peak, row
    total_flops = sum(r.flops for r in report.cycles.rows)
    assert total_flops <= report.estimated_cycles_per_run * peak
    assert report.cycles.device_cycles > 0


def test_report_json_schema_and_text() -> None:
    report = _device_cycles(8)
    data = json.loads(report.to_json())
    assert (data["schema"], data["version"]) == ("xlgraph-profile", 1)
    memory = data["memory"]
    assert all(len(v) == 4 for v in memory["always_live"].values())
    assert len(memory["not_always_live_peak"]) == 4
    for tile in report.tiles():
        assert set(tile) == {"tile", "always_live", "not_always_live_peak", "peak", "capacity"}
        assert tile["peak"] == sum(tile["always_live"].values()) + tile["not_always_live_peak"]
    steps = data["liveness"]["steps"]
    assert steps and {"position", "step", "kind", "where", "bytes", "max_tile_bytes"} <= set(
        steps[0])
    assert data["liveness"]["peak"]["bytes"] == max(s["bytes"] for s in steps)
    for row in data["operations"]:
        assert {"name", "where", "flops", "bytes", "cycles", "positions"} <= set(row)
    time = data["time"]
    kernel_rows = [r for r in data["operations"] if not r["op"].startswith("host_")]
    assert sum(r["cycles"] for r in kernel_rows) == pytest.approx(time["device_cycles_per_run"])
    assert time["cycles_per_run"] == pytest.approx(
        time["device_cycles_per_run"] + time["host_cycles_per_run"])
    text = str(report)
    top = report.cycles.rows[0]
    assert "estimates" in text and "4 tiles" in text and top.name in text and top.where in text
    assert "always-live" in text and "steps/s" in text


def test_report_plot_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    path = _device_cycles(8).plot(tmp_path / "report.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
