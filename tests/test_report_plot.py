"""``report.plot()``: memory axes fitted to the data in binary units, cycles named by user code."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph.ipu import IPUModel
from xlgraph.ipu.report import byte_unit, format_bytes

pytest.importorskip("matplotlib")

from benchmarks.models import build_mlp  # noqa: E402


def _report(batch: int, model: IPUModel | None = None):
    return popxl.Session(build_mlp(batch).ir, "ipu_model", ipu_model=model).report()


@pytest.mark.parametrize("largest, unit", [(0, "B"), (1023, "B"), (1024, "KiB"),
                                           (5 << 20, "MiB"), (3 << 30, "GiB")])
def test_byte_units(largest, unit):
    assert byte_unit(largest)[0] == unit


def test_format_bytes():
    assert format_bytes(638976) == "624 KiB" and format_bytes(512) == "512 B"


@pytest.mark.parametrize("batch", [8, 128])
def test_memory_axis_is_scaled_to_the_data_not_the_capacity(batch):
    import matplotlib.pyplot as plt

    report = _report(batch)
    fig = report.figure()
    try:
        ax_mem, ax_live, ax_ops = fig.axes[:3]
        peak = float(report.memory.peak.max())
        unit, size = byte_unit(peak)
        assert ax_mem.get_ylabel() == unit and unit in ("KiB", "MiB")
        low, high = ax_mem.get_ylim()
        assert low == 0 and peak / size <= high <= 1.2 * peak / size  # the fullest tile fills it
        assert report.model.memory_bytes_per_tile / size > high  # capacity is off this axis
        assert "capacity 624 KiB per tile, above this axis" in ax_mem.get_title()
        tallest = max(p.get_y() + p.get_height() for p in ax_mem.patches)
        assert tallest == pytest.approx(peak / size)
        live = ax_live.get_lines()[0].get_ydata()
        assert ax_live.get_ylabel() == byte_unit(report.memory.curve.sum(axis=1).max())[0]
        assert np.max(live) * byte_unit(report.memory.curve.sum(axis=1).max())[1] == \
            pytest.approx(report.memory.curve.sum(axis=1)[1:].max())
    finally:
        plt.close(fig)


def test_capacity_line_shows_when_the_data_reaches_it():
    import matplotlib.pyplot as plt

    capacity = int(_report(128).memory.peak.max() * 1.05)  # 5% above the fullest tile
    report = _report(128, IPUModel(memory_bytes_per_tile=capacity))
    fig = report.figure()
    try:
        ax_mem = fig.axes[0]
        unit, size = byte_unit(float(report.memory.peak.max()))
        assert [line.get_ydata()[0] for line in ax_mem.get_lines()] == [capacity / size]
        assert ax_mem.get_ylim()[1] >= capacity / size
        assert "above this axis" not in ax_mem.get_title()
    finally:
        plt.close(fig)


def test_cycles_chart_names_the_users_code():
    import matplotlib.pyplot as plt

    report = _report(8)
    fig = report.figure()
    try:
        labels = [t.get_text() for t in fig.axes[2].get_yticklabels()]
        top = report.cycles.rows[0]
        assert labels[-1] == f"{top.op} at {top.where}" and ".py:" in top.where
        assert any(lb.startswith("Linear: matmul at models.py:") for lb in labels)
        assert any(lb.startswith("Linear gradient: matmul at models.py:") for lb in labels)
        assert not any("_subgraph(" in lb or "matmul." in lb for lb in labels)
    finally:
        plt.close(fig)
