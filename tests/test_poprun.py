"""``poprun``: its command line, popdist inside a job, and a PopXL multi-instance program
(tests/programs/poprun_train.py) run as 2 instances of 2 replicas equal to 1 instance of 4."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_dist import console_script
from xlgraph.dist.poprun import HARDWARE_ONLY, poprun_command

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "poprun_train.py"


def _guarded(command: list[str]) -> list[str]:
    """What each instance runs: the program, after the guard."""
    return command[command.index("xlgraph.dist.guard") + 1:]


def test_program_arguments_pass_through_untouched():
    command, env = poprun_command(["--num-instances", "2", "--num-replicas", "4", "python",
                                   "train.py", "--num-replicas", "8", "-v", "--", "x"])
    assert _guarded(command) == ["python", "train.py", "--num-replicas", "8", "-v", "--", "x"]
    assert command[1:3] == ["-n", "2"]
    assert command[command.index("XLGRAPH_NUM_REPLICAS") + 1] == "4"
    assert env["XLGRAPH_POPXL_DEVICE"] == "ipu_model"  # "ipu_hw" sessions run on a whole chip
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith(os.path.join("xlgraph", "shims"))


def test_hardware_options_are_accepted_and_change_nothing():
    plain, _ = poprun_command(["--num-instances", "2", "--num-replicas", "2", "python", "p.py"])
    hardware = [x for name in HARDWARE_ONLY for x in (name, "yes")]
    busy, env = poprun_command(["--num-instances=2", "--num-replicas=2", "--ipus-per-replica=2",
                                *hardware, "python", "p.py"])
    assert busy == plain
    assert env["XLGRAPH_IPUS_PER_REPLICA"] == "2"
    _, env = poprun_command(["--num-instances", "2", "--num-replicas", "2",
                             "--only-output-from-instance=1", "python", "p.py"])
    assert env["XLGRAPH_OUTPUT_INSTANCE"] == "1"  # the guards of the other instances silence them


def test_openmpi_arguments_are_translated_for_mpich():
    command, _ = poprun_command([
        "--num-instances", "2", "--num-replicas", "2", "--host", "localhost",
        "--mpi-global-args=--tag-output --allow-run-as-root --mca btl_tcp_if_include eno1",
        "--mpi-local-args", "-x PATH -x POPLAR_LOG_LEVEL=WARN -ppn 2", "python", "p.py"])
    options = command[command.index("60") + 1:command.index("xlgraph.dist.guard") - 2]
    assert options == ["-prepend-rank", "-genv", "POPLAR_LOG_LEVEL", "WARN", "-ppn", "2",
                       "-hosts", "localhost"]


@pytest.mark.parametrize("argv, message", [
    (["--num-instances", "2", "python", "p.py"], "--num-replicas"),
    (["--num-instances", "2", "--num-replicas", "3", "python", "p.py"],
     "poprun: --num-replicas 3 must be a multiple of --num-instances 2"),
    (["--num-replicas", "0", "python", "p.py"],
     "must be a whole number from 1 to 2147483647, got '0'"),
    (["--num-replicas", "2"], "poprun: no COMMAND given"),
    (["--num-replicas", "2", "--no-such-flag", "python"], "--no-such-flag"),
    (["--num-replicas", "2", "--only-output-from-instance", "1", "python"],
     "poprun: --only-output-from-instance 1 is not an instance index (0 to 0)"),
])
def test_bad_command_lines_are_refused_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        poprun_command(argv)
    said = str(exit_info.value.code) + capsys.readouterr().err
    assert message in said


def _poprun() -> list[str]:
    return console_script("poprun", "xlgraph.dist.poprun")


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH",
                                                                                  "")]))
    env.pop("XLGRAPH_NUM_INSTANCES", None)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def mpi():
    pytest.importorskip("mpi4py", reason="the 'dist' extra is not installed")


ASK = ("import popdist, popxl; ir = popxl.Ir(replication='popdist'); print('instance', "
       "popdist.getInstanceIndex(), [popdist.isPopdistEnvSet(), popdist.getNumInstances(), "
       "popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), "
       "popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica(), popdist.getDeviceId(), "
       "ir.replication_factor, ir.instance_replication_factor])")


def test_popdist_answers_as_inside_poprun(mpi):
    done = _run([*_poprun(), "--num-instances", "2", "--num-replicas", "6",
                 "--ipus-per-replica", "2", sys.executable, "-c", ASK])
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n"))[1:] == [
        "instance 0 [True, 2, 6, 3, 0, 2, 0, 6, 3]", "instance 1 [True, 2, 6, 3, 3, 2, 1, 6, 3]"]


def test_two_instances_of_two_replicas_match_one_instance_of_four(mpi, tmp_path):
    """The single instance sums each gradient over 4 replicas in one all-reduce; two instances
    exchange their halves over MPI and sum the same values in another order: equal to float32
    rounding (measured 1.2e-7 apart at most after 3 steps)."""
    single = _run([sys.executable, "-m", "xlgraph.popxl_compat", "--device", "ipu_model",
                   str(PROGRAM), str(tmp_path / "one"), "--replicas", "4"])
    assert single.returncode == 0, single.stderr
    job = _run([*_poprun(), "--num-instances", "2", "--num-replicas", "4",
                "--only-output-from-instance", "1", sys.executable, str(PROGRAM),
                str(tmp_path / "two")])
    assert job.returncode == 0, job.stderr
    assert "instance 1 of 2: replicas 2-3 of 4" in job.stdout
    assert "instance 0 of 2" not in job.stdout  # its output is not shown
    one = np.load(tmp_path / "one.0.npz")
    assert one["loss"].shape == (3, 4) and np.isfinite(one["loss"]).all()
    assert not np.allclose(one["b"], 0) and one["loss"][0, 0] != one["loss"][-1, 0]
    assert one["m"].shape == (6,) and not np.allclose(one["m"], np.arange(6))
    for instance in (0, 1):
        part = np.load(tmp_path / f"two.{instance}.npz")
        mine = slice(2 * instance, 2 * instance + 2)
        assert int(part["first"]) == 2 * instance and int(part["instances"]) == 2
        close = {"rtol": 1e-6, "atol": 1e-6}
        np.testing.assert_allclose(part["loss"], one["loss"][:, mine], **close)
        np.testing.assert_allclose(part["gathered"], one["gathered"][:, mine], **close)
        np.testing.assert_allclose(part["running"], one["running"][mine], **close)
        for name in ("w", "b", "m"):
            np.testing.assert_allclose(part[name], one[name], **close)


ONE_READS = """
import numpy as np, popdist, popxl, popxl.ops as ops
ir = popxl.Ir(replication="popdist")
with ir.main_graph:
    buf = popxl.replica_sharded_buffer((6,), popxl.float32)
    m = popxl.remote_replica_sharded_variable(np.arange(6, dtype=np.float32), buf, 0, name="m")
    ops.remote_store(buf, 0, ops.remote_load(buf, 0) + 1.0)
with popxl.Session(ir, "ipu_hw") as session:
    session.run()
if popdist.getInstanceIndex() == 0:  # the shards of m are on both instances
    print(session.get_tensor_data(m))
"""


def test_a_sharded_read_on_one_instance_only_ends_the_job_naming_it(mpi):
    done = _run([*_poprun(), "--num-instances", "2", "--num-replicas", "4",
                 sys.executable, "-c", ONE_READS])
    assert done.returncode != 0
    assert ("instance 0: the instances disagree on collective #1: this instance runs '#1: read "
            "of sharded variable m of float32[2]', instance 1 runs '#1: finish (the program "
            "ended)'") in done.stderr
