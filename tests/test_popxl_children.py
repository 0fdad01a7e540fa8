"""The PopXL runner's alias reaches the processes its program starts (multiprocessing's spawn
and forkserver workers, plain ``subprocess`` children), and a Pool whose worker dies fails
instead of hanging (reliability round three, D10)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

POOL = textwrap.dedent("""
    import multiprocessing as mp
    import sys

    import popart
    import popxl


    def work(i):
        return i * popxl.Ir(replication=2).replication_factor, popart.__name__


    if __name__ == "__main__":
        with mp.get_context(sys.argv[1]).Pool(1) as pool:
            print(pool.map(work, [1, 2]))
""")

FAILING = textwrap.dedent("""
    import multiprocessing as mp
    import os
    import sys

    import popxl

    if __name__ == "__mp_main__" and sys.argv[2] == "start":
        raise RuntimeError("this worker cannot start")


    def work(i):
        if i == 2 and sys.argv[2] == "task":
            os._exit(3)
        return i


    if __name__ == "__main__":
        with mp.get_context(sys.argv[1]).Pool(2) as pool:
            for run in (lambda: pool.map(work, range(6)), lambda: list(pool.imap(work, range(6))),
                        lambda: pool.apply(work, (2,)), lambda: pool.apply_async(work, (1,))):
                try:
                    print("returned", run())
                except Exception as error:
                    print(type(error).__name__, error)
""")


def _runner(tmp_path: Path, program: str, *args: str, options: tuple[str, ...] = (),
            timeout: float = 90) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(program)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", *options, str(script),
                           *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=timeout)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_pool_workers_import_popxl(tmp_path: Path, method: str) -> None:
    """Before: the workers failed with No module named 'popxl' and map never returned."""
    done = _runner(tmp_path, POOL, method)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(2, 'xlgraph.popart_compat'), (4, 'xlgraph.popart_compat')]"


def test_subprocess_children_import_popxl_and_get_the_device(tmp_path: Path) -> None:
    child = ("import popxl, popxl_addons; from xlgraph.runtime.device import make_device; "
             "print(popxl.__name__, popxl_addons.__name__, make_device('ipu_hw').model.tiles)")
    program = ("import subprocess, sys\n"
               f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\n")
    done = _runner(tmp_path, program, options=("--device", "ipu_model"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "xlgraph xlgraph.addons 1472"  # a whole chip, as the runner's


@pytest.mark.parametrize("method, when, status", [
    ("spawn", "start", "exited with status 1"),  # the worker's main module fails to import
    ("forkserver", "task", "exited with status 3"),  # a worker ends in the middle of a task
])
def test_a_worker_that_dies_fails_the_pool(tmp_path: Path, method: str, when: str,
                                           status: str) -> None:
    """Before: the standard Pool replaced the worker and waited for its tasks for ever."""
    done = _runner(tmp_path, FAILING, method, when)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    assert all(line.startswith("WorkerProcessError ") for line in lines), done.stdout
    assert "PoolWorker-" in lines[0] and status in lines[0], lines[0]
    assert lines[3].startswith("WorkerProcessError this multiprocessing Pool is broken")
    if when == "start":
        assert "RuntimeError: this worker cannot start" in done.stderr
