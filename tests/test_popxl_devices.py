"""Session devices as PopXL programs name them, and the compat runner's ``--device ipu_model``
and ``popart`` stand-in, driven as a user runs a PopXL tutorial."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops
from xlgraph.runtime.device import run_ipu_hw_on

ROOT = Path(__file__).resolve().parent.parent

# A PopXL tutorial's shape: Session(ir, "ipu_hw") and the popart names programs use. The
# 4 MiB variable needs more memory than PopXL's 4-tile ipu_model has, not a whole chip.
TUTORIAL = textwrap.dedent("""
    import numpy as np
    import popart
    import popxl
    import popxl.ops as ops

    opts = popart.SessionOptions()
    opts.enableStochasticRounding = True
    ir = popxl.Ir(replication=2)
    ir._pb_ir.getSessionOptions().enableFloatingPointChecks = True
    grouping = popart.CommGroup(popart.CommGroupType.All).to_replica_grouping(2)
    with ir.main_graph:
        big = popxl.variable(np.ones((1024, 1024), np.float32), name="big")
        w = popxl.variable(np.array([1.0], np.float32), name="w",
                           replica_grouping=grouping,
                           retrieval_mode=popart.VariableRetrievalMode.AllReplicas)
        probs = popxl.constant(np.full((2, 4), 0.25, np.float32))
        labels = popxl.constant(np.array([0, 1], np.int32))
        loss = ops.nll_loss(probs, labels, reduction=popart.ReductionType.Sum)
        ops.var_updates.accumulate_(w, ops.reshape(loss, (1,)))
        out = popxl.d2h_stream((), popxl.float32, "out")
        ops.host_store(out, ops.sum(big) * 0.0 + loss)
    with popxl.Session(ir, "ipu_hw") as session:
        got = session.run()[out]
        tiles = session.device.model.tiles
    print(tiles, round(float(got.ravel()[0]), 4), session.get_tensor_data(w).ravel().tolist())
""")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "tutorial.py"
    script.write_text(TUTORIAL)
    return subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", *args, str(script)],
                          capture_output=True, text=True, cwd=ROOT)


def test_device_flag_runs_an_ipu_hw_program_on_a_whole_chip(tmp_path: Path) -> None:
    done = _run(tmp_path, "--device", "ipu_model")
    assert done.returncode == 0, done.stderr
    tiles, loss, w = done.stdout.split(" ", 2)
    assert int(tiles) == 1472
    assert float(loss) == pytest.approx(2 * np.log(4), abs=1e-4)  # sum over the batch of 2
    want = 2 * np.log(4)
    assert eval(w) == pytest.approx([1 + want, 1 + want], abs=1e-4)  # one value per replica


def test_without_the_flag_ipu_hw_fails_with_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "no IPU hardware" in last and "'ipu_model'" in last and "--device ipu_model" in last


def test_other_device_flags_are_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, "--device", "ipu_hw")
    assert done.returncode == 2 and "only 'ipu_model'" in done.stderr


def test_ipu_hw_in_process_is_refused_unless_a_model_stands_in() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        popxl.variable(np.ones(2, np.float32))
    with pytest.raises(errors.UnsupportedDeviceError) as info:
        popxl.Session(ir, "ipu_hw")
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
    run_ipu_hw_on(popxl.IPUModel(tiles_per_ipu=16))
    try:
        assert popxl.Session(ir, "ipu_hw").device.model.tiles == 16
    finally:
        run_ipu_hw_on(None)
    with pytest.raises(errors.UnsupportedDeviceError):
        popxl.Session(ir, "ipu_hw")


def test_the_popart_alias_is_small_and_says_so() -> None:
    from xlgraph import popart_compat as popart

    assert popart.ReductionType.Mean.value == "mean"
    with pytest.raises(AttributeError, match="provides only SessionOptions"):
        popart.DeviceManager  # noqa: B018 - the access is the test
    with pytest.raises(AttributeError, match="not a PopART session option"):
        popart.SessionOptions().enableStochasticRoundng = True
    assert "popart" not in sys.modules or sys.modules["popart"] is not popart


def test_nll_loss_takes_popart_reduction_types() -> None:
    from xlgraph.popart_compat import ReductionType

    ir = popxl.Ir()
    with ir.main_graph:
        probs = popxl.constant(np.array([[0.5, 0.5], [0.9, 0.1]], np.float32))
        labels = popxl.constant(np.array([0, 0], np.int32))
        outs = []
        for kind in ReductionType:
            loss = ops.nll_loss(probs, labels, reduction=kind)
            outs.append(popxl.d2h_stream(loss.shape, loss.dtype))
            ops.host_store(outs[-1], loss)
    with popxl.Session(ir) as session:
        got = session.run()
    per_item = -np.log([0.5, 0.9])
    np.testing.assert_allclose(got[outs[0]], per_item.sum(), rtol=1e-6)
    np.testing.assert_allclose(got[outs[1]], per_item.mean(), rtol=1e-6)
    np.testing.assert_allclose(got[outs[2]], per_item, rtol=1e-6)
