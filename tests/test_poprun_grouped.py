"""Grouped, replica-sharded remote variables in a multi-instance PopXL program
(tests/programs/poprun_grouped_rts.py), launched as PopXL programs launch it:
``poprun --only-output-from-instance 0 --num-replicas 8 --num-instances I --vipu-partition P
"--mpi-local-args=-x VAR" python prog.py OUT`` for I in 1, 2 and 4, against the same program
on one instance of 8 replicas, and that one against numpy."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.test_poprun import PROGRAM, _poprun, _run

GROUPED = PROGRAM.parent / "poprun_grouped_rts.py"
R = 8


def _group(r: int, stride: int, size: int) -> int:
    """PopXL's group of replica ``r``, written from the definition."""
    return (r // (stride * size)) * stride + r % stride


@pytest.fixture(scope="module")
def mpi():
    pytest.importorskip("mpi4py", reason="the 'dist' extra is not installed")


def test_grouped_sharded_variables_agree_over_instances(mpi, tmp_path):
    single = _run([sys.executable, "-m", "xlgraph.popxl_compat", "--device", "ipu_model",
                   str(GROUPED), str(tmp_path / "one"), "--replicas", str(R)])
    assert single.returncode == 0, single.stderr
    one = np.load(tmp_path / "one.0.npz")
    configs = [tuple(int(n) for n in c) for c in one["configs"]]  # (stride, size, shard_over)
    for k, (stride, size, _) in enumerate(configs):
        data = one[f"d{k}"] if size < R else one[f"d{k}"][None]
        groups = [_group(r, stride, size) for r in range(R)]
        np.testing.assert_array_equal(one[f"g{k}"][0], data[groups])
        np.testing.assert_allclose(one[f"g{k}"][1], 2 * data[groups] + 1, rtol=1e-6)
        np.testing.assert_allclose(one[f"v{k}"], 4 * one[f"d{k}"] + 3, rtol=1e-6)
    for instances in (1, 2, 4):
        job = _run([*_poprun(), "--only-output-from-instance", "0", "--num-replicas", str(R),
                    "--num-instances", str(instances), "--vipu-partition", "part",
                    "--mpi-local-args=-x PYTHONPATH", sys.executable, str(GROUPED),
                    str(tmp_path / f"i{instances}")])
        assert job.returncode == 0, job.stderr
        assert f"instance 0 of {instances}" in job.stdout
        local = R // instances
        for i in range(instances):
            part = np.load(tmp_path / f"i{instances}.{i}.npz")
            mine = range(i * local, (i + 1) * local)
            assert int(part["first"]) == mine[0] and int(part["local"]) == local
            for k, (stride, size, _) in enumerate(configs):
                np.testing.assert_array_equal(part[f"g{k}"], one[f"g{k}"][:, mine[0]:mine[-1] + 1])
                here = sorted({_group(r, stride, size) for r in mine})  # groups with a replica
                if size == R:
                    np.testing.assert_array_equal(part[f"v{k}"], one[f"v{k}"])
                else:  # here (the others keep their host value, as PopART's WeightsToHost)
                    np.testing.assert_array_equal(part[f"v{k}"][here], one[f"v{k}"][here])
