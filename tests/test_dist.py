"""Instances over MPI: popdist queries, the launcher's command line, a 2-process job through
xlgraph-run equal to the 1-process run to float32 rounding, and failed instances ending the job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xlgraph
from xlgraph import dist
from xlgraph.dist.run import mpiexec_command

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "dist_train.py"
# The jobs' collectives wait the default 60 s, so that no instance a loaded machine delays times
# out; a failed instance must end the job through its failure, never by the others' timeouts:
WAITED_OUT = "(XLGRAPH_DIST_TIMEOUT)"  # in the error of an instance whose wait timed out


def test_popdist_queries_read_the_launcher_environment(monkeypatch):
    assert not dist.isPopdistEnvSet() and dist.getNumInstances() == 1
    monkeypatch.setenv("XLGRAPH_NUM_INSTANCES", "2")
    monkeypatch.setenv("XLGRAPH_NUM_REPLICAS", "6")
    monkeypatch.setenv("PMI_RANK", "1")
    assert dist.isPopdistEnvSet()
    assert (dist.getNumInstances(), dist.getInstanceIndex(), dist.getNumTotalReplicas(),
            dist.getNumLocalReplicas(), dist.getReplicaIndexOffset()) == (2, 1, 6, 3, 3)
    ir = xlgraph.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor, ir.replica_offset) == (6, 3, 3)
    opts = ir._pb_ir.getSessionOptions()  # as PopXL's Ir sets them (popdist's configuration)
    assert (opts.enableReplicatedGraphs, opts.replicatedGraphCount,
            opts.enableDistributedReplicatedGraphs, opts.globalReplicationFactor,
            opts.globalReplicaOffset) == (True, 3, True, 6, 3)
    assert not opts.changed  # the Ir set them, not the program
    plain = xlgraph.Ir(replication=2)._pb_ir.getSessionOptions()
    assert (plain.enableReplicatedGraphs, plain.replicatedGraphCount,
            plain.enableDistributedReplicatedGraphs) == (True, 2, False)


def test_launcher_passes_unknown_options_to_mpiexec():
    cmd = mpiexec_command(["--num-instances", "2", "--num-replicas", "4", "--mpiexec", "mpx",
                           "-hosts", "a,b", "-verbose", "python", "-u", "train.py",
                           "--timeout", "9"])
    assert cmd[:3] == ["mpx", "-n", "2"]
    assert cmd[-11:] == ["-hosts", "a,b", "-verbose", sys.executable, "-m", "xlgraph.dist.guard",
                         "python", "-u", "train.py", "--timeout", "9"]
    assert cmd[cmd.index("XLGRAPH_DIST_TIMEOUT") + 1] == "60"
    assert "XLGRAPH_NUM_REPLICAS" in cmd and "4" in cmd
    assert mpiexec_command(["--num-instances", "1", "--num-replicas", "1", "--mpiexec", "m",
                            "-ppn", "1", "--", "-odd-name"])[-1] == "-odd-name"
    with pytest.raises(SystemExit, match="multiple"):
        mpiexec_command(["--num-instances", "2", "--num-replicas", "3", "python"])


def console_script(name: str = "xlgraph-run", module: str = "xlgraph.dist.run") -> list[str]:
    """The installed console script ``name``, or ``python -m module`` in a checkout."""
    script = shutil.which(name, path=str(Path(sys.executable).parent))
    if script is None:
        assert not os.environ.get("CI"), f"CI installs the package: {name} must exist"
        return [sys.executable, "-m", module]  # a checkout that is not installed
    return [script]



def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run ``cmd``; a job that hangs fails the test (one takes about 10 s on a loaded machine)."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def run_alone(program: Path, out: Path, replicas: int) -> Any:
    """``program`` as one process of ``replicas`` replicas: what it saved in ``OUT.0.npz``."""
    done = _run([sys.executable, str(program), str(out), "--replicas", str(replicas)])
    assert done.returncode == 0, done.stderr
    return np.load(f"{out}.0.npz")


@pytest.fixture(scope="module")
def mpi():
    pytest.importorskip("mpi4py", reason="the 'dist' extra is not installed")


def _job(instances: int, *args: str) -> list[str]:
    return [*console_script(), "--num-instances", str(instances), "--num-replicas", "2",
            sys.executable, str(PROGRAM), *args]


def test_two_instances_train_like_one_process(mpi, tmp_path):
    """Equal up to float32 rounding: one process of 2 replicas sums each weight gradient over
    both replicas in one product (``xlgraph.lower.replicas``), each instance computes its own
    and the all-reduce adds the two (measured: 6e-8 apart after 6 steps)."""
    one = _run([sys.executable, str(PROGRAM), str(tmp_path / "one"), "--replicas", "2"])
    assert one.returncode == 0, one.stderr
    two = _run(_job(2, str(tmp_path / "two")))
    assert two.returncode == 0, two.stderr
    single = np.load(tmp_path / "one.0.npz")
    for instance in (0, 1):
        part = np.load(tmp_path / f"two.{instance}.npz")
        np.testing.assert_allclose(part["loss"][:, 0], single["loss"][:, instance],
                                   rtol=1e-6, atol=1e-7)
        for name in ("w0", "w1"):
            np.testing.assert_allclose(part[name], single[name], rtol=1e-6, atol=1e-7)
    assert np.isfinite(single["loss"]).all() and single["loss"][-1, 0] != single["loss"][0, 0]


def test_an_instance_that_raises_stops_the_others_with_its_error(mpi, tmp_path):
    done = _run(_job(2, str(tmp_path / "x"), "--fail", "soft"))
    assert done.returncode != 0
    assert "RuntimeError: instance 1 fails on purpose" in done.stderr
    assert "instance 0: stopped in the all-reduce mean of float32" in done.stderr
    assert "because instance 1 failed" in done.stderr
    assert WAITED_OUT not in done.stderr


def test_an_instance_that_vanishes_ends_the_job(mpi, tmp_path):
    done = _run(_job(2, str(tmp_path / "x"), "--fail", "hard"))
    assert done.returncode != 0
    assert "xlgraph-run: instance 1 ended with exit status 3; stopping the job" in done.stderr
    assert WAITED_OUT not in done.stderr


MISMATCH = ROOT / "tests" / "programs" / "dist_mismatch.py"


def _mismatch(mode: str, *more: str) -> subprocess.CompletedProcess:
    return _run([*console_script(), "--num-instances", "2", "--num-replicas", "2",
                 sys.executable, str(MISMATCH), mode, *more])


@pytest.mark.parametrize("mode, mine, theirs", [
    ("op", "all-reduce add of float32[4]", "all-reduce mean of float32[4]"),
    ("dtype", "all-reduce add of float32[4]", "all-reduce add of int32[4]"),
    ("shape", "all-reduce add of float32[4]", "all-reduce add of float32[3]"),
    ("sequence", "finish (the program ended)", "all-reduce add of float32[4]"),
    # data that travels after its header, which the progress thread begins once the headers
    # agree: the header swap does not block, and a disagreement still combines nothing
    ("shape big", "all-reduce add of float32[1024]", "all-reduce add of float32[1023]"),
    ("sequence big", "finish (the program ended)", "all-reduce add of float32[1024]"),
])
def test_collectives_that_disagree_raise_in_every_instance(mpi, mode, mine, theirs):
    """Before the headers, the dtype and op cases combined garbage and exited 0."""
    done = _mismatch(*mode.split())
    assert done.returncode != 0
    seq = 2 if mode.startswith("sequence") else 1
    for rank, (a, b) in ((0, (mine, theirs)), (1, (theirs, mine))):
        assert (f"instance {rank}: the instances disagree on collective #{seq}: this instance "
                f"runs '#{seq}: {a}', instance {1 - rank} runs '#{seq}: {b}'") in done.stderr
    assert "nothing was combined" in done.stderr
    assert WAITED_OUT not in done.stderr


@pytest.mark.parametrize("mode, expected", [
    # instance 0 used to hang in MPI_Finalize for ever (xlgraph-run --timeout did not help)
    ("late", ["RuntimeError: instance 1 fails after instance 0 finished",
              "instance 0: stopped in the finish (the program ended) because instance 1 failed"]),
    ("late-hard", ["xlgraph-run: instance 1 ended with exit status 3"]),
    # instance 0 used to wait in MPI_Init for ever
    ("early", ["RuntimeError: instance 1 fails before it starts MPI",
               "xlgraph-run: instance 1 ended with exit status 1"]),
])
def test_every_failure_ends_the_job_with_its_error(mpi, mode, expected):
    done = _mismatch(mode)
    assert done.returncode != 0
    for line in expected:
        assert line in done.stderr
    assert WAITED_OUT not in done.stderr


def test_instances_that_agree_exit_zero(mpi):
    done = _mismatch("same")
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):  # the instances' lines may interleave
        assert done.stdout.count(f"instance {rank}: [3.0, 3.0, 3.0, 3.0]") == 1


def test_popdist_stand_in_answers_as_outside_poprun(monkeypatch):
    from xlgraph import dist as popdist

    for name in ("XLGRAPH_NUM_INSTANCES", "XLGRAPH_NUM_REPLICAS", "XLGRAPH_IPUS_PER_REPLICA"):
        monkeypatch.delenv(name, raising=False)
    assert (popdist.isPopdistEnvSet(), popdist.getNumInstances(), popdist.getInstanceIndex(),
            popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(),
            popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica(),
            popdist.getDeviceId()) == (False, 1, 0, 1, 1, 0, 1, 0)


def test_popdist_stand_in_answers_as_inside_poprun(monkeypatch):
    from xlgraph import dist as popdist

    monkeypatch.setenv("XLGRAPH_NUM_INSTANCES", "4")
    monkeypatch.setenv("XLGRAPH_NUM_REPLICAS", "8")
    monkeypatch.setenv("XLGRAPH_IPUS_PER_REPLICA", "2")
    monkeypatch.setenv("PMI_RANK", "3")
    assert (popdist.isPopdistEnvSet(), popdist.getNumInstances(), popdist.getInstanceIndex(),
            popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(),
            popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica(),
            popdist.getDeviceId(2)) == (True, 4, 3, 8, 2, 6, 2, 3)
    with pytest.raises(ValueError, match="ipus_per_replica must be a whole number >= 1, got 0"):
        popdist.getDeviceId(0)


def test_the_popxl_runner_provides_popdist(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import popdist\nprint(popdist.isPopdistEnvSet(), popdist.__name__)\n")
    done = _run([sys.executable, "-m", "xlgraph.popxl_compat", str(script)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "xlgraph.dist"]


class _Request:
    """A stand-in for an MPI request: complete once ``done``."""

    def __init__(self, done: bool = False) -> None:
        self.done = done

    def Test(self) -> bool:  # noqa: N802 - MPI's name
        return self.done

    def Wait(self) -> None:  # noqa: N802
        self.waited = self.done = True


def test_exchanges_behind_a_header_swap_begin_in_order_once_it_agrees():
    """The progress thread begins a bucket's data only after its header swap has completed
    and agreed, and every later bucket after it (MPI needs one order in every instance); a
    disagreement ends that bucket and the later ones, and begins none of them."""
    from xlgraph.dist.exchange import _Progress
    from xlgraph.errors import DistributedError

    progress, issued = _Progress(), []

    def issue(name: str):
        return lambda: issued.append(name) or (_Request(done=True), _Request(done=True))

    gate = _Request()
    first = progress.launch(issue("first"), gate, check=lambda: None)
    second = progress.launch(issue("second"))
    assert not second.done.wait(0.05) and issued == []
    gate.done = True
    assert first.done.wait(5) and second.done.wait(5) and issued == ["first", "second"]
    assert first.error is None and second.error is None

    def disagree() -> None:
        raise DistributedError("the instances disagree")

    third = progress.launch(issue("third"), _Request(done=True), check=disagree)
    fourth = progress.launch(issue("fourth"))
    assert third.done.wait(5) and fourth.done.wait(5) and issued == ["first", "second"]
    assert str(third.error) == str(fourth.error) == "the instances disagree"
    fifth = progress.launch(issue("fifth"))  # nothing queued: begins at once
    assert issued[-1] == "fifth" and fifth.done.wait(5) and fifth.error is None


def test_the_progress_thread_blocks_only_for_data_that_every_instance_has_begun():
    """Without CMA, or between hosts, MPI moves data only inside MPI calls: an exchange that
    every instance has begun (its barrier has completed) is driven in ``Wait``, not polled
    with pauses; one that a peer has not begun yet is only tested (``Wait`` would spin a core
    until the peer comes)."""
    from xlgraph.dist.exchange import _Progress

    progress = _Progress()
    late, arrived = _Request(), _Request()
    data = _Request()
    waiting = progress.launch(lambda: (data, late))
    assert not waiting.done.wait(0.05) and not hasattr(data, "waited")
    late.done = True
    assert waiting.done.wait(5) and data.waited and waiting.error is None
    tested = _Request(done=True)  # its data is there, its barrier not yet (MPI forbids
    ending = progress.launch(lambda: (tested, arrived))  # leaving a collective's request active)
    assert not ending.done.wait(0.05)
    arrived.done = True
    assert ending.done.wait(5) and not hasattr(tested, "waited") and ending.error is None
