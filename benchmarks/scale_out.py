"""Scale-out: the round-five transformer (``gpt_model.FULL``) training at batch 8 per instance,
one instance against two, in xlgraph (``xlgraph-run``, one replica per instance, gradients
averaged by ``replicated_all_reduce`` over MPI, in buckets begun during the backward pass) and
in PyTorch (``DistributedDataParallel``, gloo backend, two processes started by ``torchrun``;
one process: the plain model).

Weak-scaling efficiency = (samples/s with 2) / (2 x samples/s with 1). Every process runs
``--threads`` BLAS (and torch) threads, 1 by default, so that two instances use two cores where
one instance uses one. The jobs run in turn, ``--rounds`` times (fresh processes each time);
each job times ``--steps`` steps after 2 untimed ones and instance 0 reports them (collectives
keep the instances in step), with the CPU seconds its process used over them (every thread:
BLAS, torch's, xlgraph's progress thread). Prints JSON; ``best`` holds the medians' efficiency
and the CPU efficiency (CPU s per step of one instance alone / of an instance of two: what the
exchange adds to each instance's work, which a machine shared with other busy processes does
not hide the way it hides waiting); ``efficiency_by_round`` each round's own efficiency (its
job of two against its lone job), which shows how far the rounds spread. ``--quick`` runs 4
rounds of 10 steps: with 2, each job's median was the mean of two runs, and on the quiet
machine the lone xlgraph job's median moved by 16% between two runs (the efficiency by 0.11)
while the jobs of two processes moved by 3% or less.

``--pin`` runs instance i on CPU i only (``os.sched_setaffinity``), in both frameworks, so that
one instance gets one core's share of the machine and two instances two cores' shares even when
other processes load it. ``--unbucketed`` adds a job of two xlgraph instances whose all-reduces
are exchanged one by one (``XLGRAPH_BUCKET_MB=0``). The instances share this host, so their
buckets lie in memory both map (``xlgraph.dist.shared``); ``--through-mpi`` adds a job of two
instances whose buckets MPI copies instead (``XLGRAPH_DIST_SHARED=0``, as between hosts).

Every process of every job runs in a session of its own, as ``mpiexec`` and ``torchrun``
start theirs: with the kernel's automatic session groups (``sched_autogroup_enabled``) a busy
machine shares its cores between sessions, so two processes of one session would get half the
share each that the processes of two sessions get.

``--ceiling`` adds the machine's own limit: two plain one-replica processes of each framework
started together, with no collective and nothing shared. They wait for each other before their
timed steps and keep stepping until both have timed theirs, so each is timed while the other
runs. Their efficiency (the two processes' samples/s over twice a lone process's, in the same
round) is what two busy cores give without any communication: memory bandwidth, caches and
clock shared. ``best.transformer_b8.efficiency.ceiling`` is xlgraph's, ``torch_ceiling``
torch's; an efficiency above its framework's ceiling cannot be reached by cutting the exchange.

Run: ``PYTHONPATH=. python benchmarks/scale_out.py [--quick] [--threads 1] [--pin] [--ceiling]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_model as gm  # noqa: E402
import gpt_peers  # noqa: E402
from harness import machine  # noqa: E402

from xlgraph.dist.shared import SHARED  # noqa: E402
from xlgraph.lower.buckets import BUCKET_MB  # noqa: E402

BATCH, WARMUP = 8, 2
PIN = "SCALE_OUT_PIN"  # "1": each process runs on CPU (its instance index) only
# a ceiling job's processes: "INDEX COUNT DIRECTORY" (the directory holds their meeting files)
ALONE = "SCALE_OUT_ALONE"
HERE = Path(__file__).resolve()


def instance() -> tuple[int, int]:
    """(this process's index, processes in the job) under xlgraph-run or torchrun."""
    if "RANK" in os.environ:  # torchrun
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if ALONE in os.environ:  # a ceiling job: independent processes
        index, count, _ = os.environ[ALONE].split(" ", 2)
        return int(index), int(count)
    from xlgraph import dist

    return dist.getInstanceIndex(), dist.getNumInstances()


def xlgraph_step(cfg: gm.Config) -> tuple[Callable[[np.ndarray], float], Callable[[], Any]]:
    """``step(tokens) -> loss`` of this instance's replica, and a reader of the weights."""
    import xlgraph as popxl
    from xlgraph import dist

    replicas = "popdist" if dist.isPopdistEnvSet() else 1
    ir, tok_s, loss_s, named = gm.build_train(cfg, BATCH, replicas=replicas)
    session = popxl.Session(ir, blas_threads=None)
    gm.load(session, named, gm.initial_weights(cfg))
    session.__enter__()
    session.wait_for_kernels()  # time the compiled step, not numba compiling beside it
    return (lambda tokens: float(session.run({tok_s: tokens})[loss_s]),
            lambda: session.get_tensor_data(named["wte"]))


def torch_step(cfg: gm.Config, world: int) -> tuple[Callable[[np.ndarray], float],
                                                     Callable[[], Any]]:
    import torch

    if world > 1:
        torch.distributed.init_process_group("gloo")
    step = gpt_peers.torch_train(cfg, gm.initial_weights(cfg), ddp=world > 1)
    return step, lambda: step.model.params[step.model.names.index("wte")].detach().numpy()


def meet(name: str) -> Callable[[], bool]:
    """For a ceiling job's process: mark ``name`` reached, and a test whether every process of
    the job has (None outside a ceiling job: the collectives keep instances in step)."""
    if ALONE not in os.environ:
        return lambda: True
    index, count, where = os.environ[ALONE].split(" ", 2)
    Path(where, f"{name}.{index}").touch()
    return lambda: all(Path(where, f"{name}.{i}").exists() for i in range(int(count)))


def job(kind: str, steps: int, tiny: bool = False, check: bool = False) -> None:
    """One process of a job: ``steps`` steps on this instance's own batches; instance 0 prints
    JSON: the microseconds per step (after ``WARMUP`` untimed ones), or with ``check`` the
    losses and the token embedding's bytes after the steps (nothing timed)."""
    cfg = gm.TINY if tiny else gm.FULL
    rank, world = instance()
    if os.environ.get(PIN) == "1":
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    if kind == "torch":
        import torch

        torch.set_num_threads(threads)
        step, weights = torch_step(cfg, 1 if ALONE in os.environ else world)
    else:
        step, weights = xlgraph_step(cfg)
    data = gm.token_batches(cfg, BATCH, count=4, seed=1 + rank)
    if check:
        losses = [step(data[i % len(data)]) for i in range(steps)]
        report = {"losses": losses, "wte": weights().astype(np.float32).tobytes().hex(),
                  "session": os.getsid(0)}
    else:
        for i in range(WARMUP):
            step(data[i % len(data)])
        ready = meet("ready")
        while not ready():
            time.sleep(1e-3)
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(data[i % len(data)])
        report = {"us_per_step": (time.perf_counter() - start) / steps * 1e6,
                  "cpu_us_per_step": (time.process_time() - cpu) / steps * 1e6}
        done = meet("done")
        while not done():  # the others are still timed: keep their machine as busy
            step(data[0])
    if rank == 0 or ALONE in os.environ:
        print(json.dumps(report), flush=True)


def command(kind: str, processes: int, steps: int, tiny: bool = False,
            check: bool = False) -> list[str]:
    """The command line of a job: ``kind`` (xlgraph or torch) over ``processes`` processes."""
    own = [str(HERE), "--job", kind, str(steps), *(["--tiny"] if tiny else []),
           *(["--check"] if check else [])]
    if processes == 1:
        return [sys.executable, *own]
    if kind == "torch":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", str(processes), *own]
    return [sys.executable, "-m", "xlgraph.dist.run", "--num-instances", str(processes),
            "--num-replicas", str(processes), sys.executable, *own]


def _environment(threads: int, extra_env: dict[str, str] | None) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                MKL_NUM_THREADS=str(threads),
                PYTHONPATH=os.pathsep.join([str(HERE.parent.parent),
                                            os.environ.get("PYTHONPATH", "")]), **(extra_env or {}))


def _report(what: str, returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    if returncode != 0:
        raise RuntimeError(f"{what} failed ({returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def run_job(kind: str, processes: int, steps: int, threads: int = 1, tiny: bool = False,
            check: bool = False, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a job to its end; instance 0's JSON report. ``extra_env`` adds variables."""
    done = subprocess.run(command(kind, processes, steps, tiny, check), start_new_session=True,
                          env=_environment(threads, extra_env), capture_output=True, text=True)
    return _report(f"{kind} x{processes}", done.returncode, done.stdout, done.stderr)


def run_alone(kind: str, processes: int, steps: int, threads: int = 1, tiny: bool = False,
              check: bool = False, extra_env: dict[str, str] | None = None,
              ) -> list[dict[str, Any]]:
    """A ceiling job: ``processes`` plain one-process jobs of ``kind`` started together (no
    collective), timed over the same stretch; each process's report."""
    with tempfile.TemporaryDirectory(prefix="scale_out_") as where:
        children = [subprocess.Popen(command(kind, 1, steps, tiny, check), text=True,
                                     start_new_session=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=_environment(threads, {
                                         **(extra_env or {}), ALONE: f"{i} {processes} {where}"}))
                    for i in range(processes)]
        outputs = [child.communicate() for child in children]
    return [_report(f"{kind} ceiling x{processes}", child.returncode, *out)
            for child, out in zip(children, outputs)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 rounds of 10 steps per job")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each job")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per job")
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads per process")
    parser.add_argument("--pin", action="store_true", help="run instance i on CPU i only")
    parser.add_argument("--unbucketed", action="store_true",
                        help="also time two xlgraph instances without all-reduce buckets")
    parser.add_argument("--through-mpi", action="store_true",
                        help="also time two xlgraph instances whose buckets MPI copies")
    parser.add_argument("--ceiling", action="store_true",
                        help="also time two independent processes of each framework (no "
                             "collective): the machine's own weak-scaling limit")
    parser.add_argument("--job", nargs=2, metavar=("KIND", "STEPS"), help=argparse.SUPPRESS)
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.job:
        job(args.job[0], int(args.job[1]), args.tiny, args.check)
        return
    rounds, steps = (4, 10) if args.quick else (args.rounds, args.steps)
    result: dict[str, Any] = {"benchmark": "scale_out", "machine": machine(), "batch": BATCH,
                              "threads_per_process": args.threads, "pinned": args.pin,
                              "load_avg_before": [round(x, 2) for x in os.getloadavg()],
                              "best": {}}
    jobs = [("xlgraph", 1, {}), ("xlgraph", 2, {}), ("torch_ddp", 1, {}), ("torch_ddp", 2, {})]
    if args.unbucketed:
        jobs.insert(2, ("xlgraph_unbucketed", 2, {BUCKET_MB: "0"}))
    if args.through_mpi:
        jobs.insert(2, ("xlgraph_mpi", 2, {SHARED: "0"}))
    if args.ceiling:
        jobs.insert(jobs.index(("torch_ddp", 1, {})), ("xlgraph_ceiling", 2, {}))
        jobs.append(("torch_ceiling", 2, {}))
    runs: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for _ in range(rounds):
        for kind, n, env in jobs:
            env = {**env, PIN: "1" if args.pin else "0"}
            if kind.endswith("_ceiling"):  # each process's samples/s add up
                reports = run_alone(kind.split("_")[0], n, steps, args.threads, extra_env=env)
                report = {"us_per_step": 1 / statistics.mean(1 / r["us_per_step"] for r in reports),
                          "cpu_us_per_step": statistics.mean(r["cpu_us_per_step"]
                                                             for r in reports)}
            else:
                report = run_job(kind.split("_")[0], n, steps, args.threads, extra_env=env)
            runs.setdefault(f"{kind} x{n}", []).append(round(report["us_per_step"], 1))
            cpu.setdefault(f"{kind} x{n}", []).append(round(report["cpu_us_per_step"], 1))
    result["us_per_step"] = runs
    result["cpu_us_per_step"] = cpu
    median = {k: statistics.median(v) for k, v in runs.items()}
    samples = {k: BATCH * int(k[-1]) / (v * 1e-6) for k, v in median.items()}
    alone = {"xlgraph": "xlgraph x1", "xlgraph_unbucketed": "xlgraph x1",
             "xlgraph_mpi": "xlgraph x1", "xlgraph_ceiling": "xlgraph x1",
             "torch_ddp": "torch_ddp x1", "torch_ceiling": "torch_ddp x1"}
    names = {"xlgraph_ceiling": "ceiling"}
    kinds = [kind for kind, n, _ in jobs if n == 2]
    result["best"]["transformer_b8"] = {
        "samples_per_s": {k: round(v, 2) for k, v in samples.items()},
        "efficiency": {names.get(kind, kind): round(
            samples[f"{kind} x2"] / (2 * samples[alone[kind]]), 3) for kind in kinds},
        "cpu_efficiency": {names.get(kind, kind): round(
            statistics.median(cpu[alone[kind]]) / statistics.median(cpu[f"{kind} x2"]), 3)
            for kind in kinds}}
    result["efficiency_by_round"] = {names.get(kind, kind): [  # us per step alone / of one of two
        round(one / two, 3) for one, two in zip(runs[alone[kind]], runs[f"{kind} x2"])]
        for kind in kinds}
    result["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
