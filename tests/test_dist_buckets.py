"""Bucketed all-reduces between instances (``xlgraph.lower.buckets``): the same bits as the
unbucketed all-reduce and the interpreter, over 1, 2 and 4 instances, and as one process of
all the replicas; buckets merge the gradients of a training step and begin before its
backward pass ends."""

from __future__ import annotations

import collections
import re
import sys

import numpy as np
import pytest

from tests.test_dist import ROOT, _run, console_script, run_alone
from xlgraph.lower.buckets import BUCKET_MB, FIRST_BUCKET_BYTES, bucket_bytes

PROGRAM = ROOT / "tests" / "programs" / "dist_buckets.py"
SETTINGS = ("0", "0.002", "interpreter")
R = 4


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return run_alone(PROGRAM, tmp_path_factory.mktemp("one") / "out", R)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("instances", [2, 4])
def test_buckets_give_the_unbucketed_bits(instances, one_process, tmp_path):
    pytest.importorskip("mpi4py", reason="the 'dist' extra is not installed")
    done = _run([*console_script(), "--num-instances", str(instances), "--num-replicas",
                    str(R), "--timeout", "20", sys.executable, str(PROGRAM), str(tmp_path / "i")])
    assert done.returncode == 0, done.stderr
    local = R // instances
    names = {k.split("/")[1] for k in one_process.files} - {"buckets"}
    for i in range(instances):
        part = np.load(tmp_path / f"i.{i}.npz")
        assert int(part["0/buckets"]) == 0
        assert int(part["0.002/buckets"]) == 13  # the two inputs made first share one bucket
        for name in names:
            whole = one_process[f"0/{name}"]
            expected = whole if name == "total" else whole[i * local:(i + 1) * local]
            if local == 1 and name != "total":
                expected = expected[0]
            for setting in SETTINGS:
                assert _same(part[f"{setting}/{name}"], expected), (setting, name)


def test_one_process_is_not_bucketed(one_process):
    for setting in SETTINGS:
        assert int(one_process[f"{setting}/buckets"]) == 0
    assert np.isnan(one_process["0/special"]).any() and np.isinf(one_process["0/special"]).any()
    x = np.random.default_rng(0).normal(size=(R, 6, 5)).astype(np.float32)
    np.testing.assert_allclose(one_process["0/mean"][0, 3:], np.tanh(x[:, 3:]).mean(0),
                               rtol=1e-6)


def test_bucket_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(BUCKET_MB, raising=False)
    assert bucket_bytes() == 25 << 20 and FIRST_BUCKET_BYTES == 1 << 20
    monkeypatch.setenv(BUCKET_MB, "0.5")
    assert bucket_bytes() == 1 << 19
    monkeypatch.setenv(BUCKET_MB, "lots")
    with pytest.raises(ValueError, match=re.escape(
            "environment variable XLGRAPH_BUCKET_MB='lots' is not a size in MiB")):
        bucket_bytes()


class _Mirror:
    """An exchange whose other instance holds this one's data (no MPI): enough to lower."""

    def allgather(self, local: np.ndarray, what: str = "collective") -> np.ndarray:
        return np.concatenate([local, local])

    def start(self, local: np.ndarray, out: np.ndarray, what: str, agree: str | None = None):
        out[:] = local
        return lambda: out


def _transformer_session(monkeypatch, mib: str, replicas: int | str = "popdist"):
    """The tests' decoder as an instance of a job of 2 instances of one replica each (or as an
    Ir of ``replicas`` replicas); its Session, numpy's backend."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpt_model as gm

    import xlgraph
    from xlgraph.runtime import session

    monkeypatch.setenv("XLGRAPH_NUM_INSTANCES", "2")
    monkeypatch.setenv("XLGRAPH_NUM_REPLICAS", "2")
    monkeypatch.setenv(BUCKET_MB, mib)
    monkeypatch.setattr(session, "_exchange", lambda ir: _Mirror())
    ir, *_ = gm.build_train(gm.TINY, 2, replicas=replicas)
    return xlgraph.Session(ir, backend="numpy")


def _transformer_source(monkeypatch, mib: str) -> list[str]:
    return _transformer_session(monkeypatch, mib).source.splitlines()


REDUCE = r"[ko]_replicated_all_reduce\d*\("  # a call of the kernel, or its form with out=


def _lines(lines: list[str], pattern: str) -> list[int]:
    return [i for i, line in enumerate(lines) if re.search(pattern, line)]


def test_a_training_step_starts_its_buckets_during_the_backward_pass(monkeypatch):
    lines = _transformer_source(monkeypatch, "0.016")  # buckets of 16 KiB
    reduces = _lines(lines, REDUCE)
    starts = _lines(lines, r"k_all_reduce_bucket\d*\(")
    products = [i for i, line in enumerate(lines) if "matmul" in line.split("#")[0]]
    assert len(reduces) == 36 and 5 <= len(starts) <= 12  # every gradient, in a few exchanges
    assert starts[0] < products[-1]  # the first bucket begins while the backward pass runs
    assert max(starts) < min(reduces)  # every exchange begins before the first result is used
    # under the default cap (every gradient: 81 KiB), two buckets: the gradients made before
    # the backward pass's last step, then that step's own (the tied embedding's), whose wait
    # comes after the other gradients' updates
    lines = _transformer_source(monkeypatch, "25")
    starts, reduces = _lines(lines, r"k_all_reduce_bucket\d*\("), _lines(lines, REDUCE)
    updates = _lines(lines, r"= adam_updater %")
    assert len(starts) == 2 and starts[1] < reduces[0] and len(updates) == len(reduces)
    assert updates[-2] < reduces[-1] < updates[-1] and "[64,32]" in lines[reduces[-1]]


def test_an_instance_of_one_replica_runs_the_one_replica_step(monkeypatch):
    """Without a replica axis: the same kernel calls as the Ir of one replica, plus the
    exchange; variables in their own shapes on the device."""
    calls = r"\b([kol]_\w+?)\d*\("

    def kernels(session) -> collections.Counter:
        return collections.Counter(re.findall(calls, "\n".join(
            line for line in session.source.splitlines() if not line.startswith("#"))))

    instance = _transformer_session(monkeypatch, "25")
    alone = _transformer_session(monkeypatch, "25", replicas=1)
    extra = kernels(instance) - kernels(alone)
    assert not kernels(alone) - kernels(instance)
    assert extra == {"o_replicated_all_reduce": 36, "k_all_reduce_bucket": 2}
    assert [a.shape for a in instance.executable.arrays] == [
        v.shape for v in instance.executable.variables]
    with instance:
        wte = next(v for v in instance.executable.variables if v.name == "wte")
        assert instance.get_tensor_data(wte).shape == wte.shape


def _same_but_nans(a: np.ndarray, b: np.ndarray) -> bool:
    """``_same``, except that any NaN matches any NaN."""
    nan = np.isnan(a)
    return (a.dtype == b.dtype and a.shape == b.shape and np.array_equal(nan, np.isnan(b))
            and a[~nan].tobytes() == b[~nan].tobytes())


def _jitted(backend: str):
    """The compiler of ``backend`` as the bucket rewrite uses it (None: numpy's passes)."""
    if backend == "numpy":
        return None
    pytest.importorskip("numba", reason="the 'fast' extra is not installed")
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    return NumbaBackend().jitted


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("replicas, local", [(2, 1), (8, 1), (8, 2), (16, 4)])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (3,), (4, 2), (5000,)])
@pytest.mark.parametrize("op", ["add", "mean"])
def test_a_bucketed_sum_writes_the_bits_of_the_plain_reduction(backend, replicas, local,
                                                               shape, op):
    """The bucketed sum's ``kernel_out`` against ``ops.collectives``' reduction of the same
    gathered parts (signed zeros, infinities, NaNs and subnormals among them): numpy sums a
    part of one element over the replicas pairwise (from 8 on), a larger part replica by
    replica; the numba backend's compiled pass over the bucket's buffer (``local`` replicas
    per instance, after another input) gives the same bits but for which NaN a sum of NaNs
    of both signs gives (IEEE leaves it open; numpy's own loops differ by position)."""
    import xlgraph
    from xlgraph.lower.buckets import Bucket, _Member, _sum_into
    from xlgraph.ops.collectives import _REDUCE
    from xlgraph.tensor import TensorSpec

    rng = np.random.default_rng(replicas * local)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-41, -1e-41, 3e38, -3e38])
    for dtype in (np.float32, np.float64, np.float16):
        inputs = [TensorSpec((local, 3), xlgraph.dtypes.dtype.as_dtype(np.float64)),
                  TensorSpec((local, *shape), xlgraph.dtypes.dtype.as_dtype(dtype))]
        bucket = Bucket(None, replicas // local, 0, inputs, "a bucket", None)
        kernel_out = _sum_into(_Member(bucket, 1), _jitted(backend))
        for _ in range(10):
            everyone = rng.normal(size=(replicas, *shape)) * 10.0 ** rng.integers(
                -3, 4, size=(replicas, *shape))
            chosen = rng.random(everyone.size) < 0.2
            everyone.reshape(-1)[chosen] = rng.choice(special, size=int(chosen.sum()))
            everyone = everyone.astype(dtype)
            bucket.parts[1][...] = everyone.reshape(bucket.parts[1].shape)
            out = np.empty(shape, dtype)
            got = kernel_out(everyone[:local], out, op, None)
            want = np.asarray(_REDUCE[op](everyone), dtype)
            assert got is out and (_same if backend == "numpy" else _same_but_nans)(out, want)


class _Instances:
    """``n`` instances without MPI: instance k holds this one's float32 data times ``1 + k/3``
    (one rounding each), the same for bucketed and unbucketed exchanges."""

    def __init__(self, n: int) -> None:
        self.n = n

    def _everyone(self, local: np.ndarray) -> np.ndarray:
        mine = np.ascontiguousarray(local).view(np.float32)
        return np.stack([mine * np.float32(1 + k / 3) for k in range(self.n)])

    def allgather(self, local: np.ndarray, what: str = "collective") -> np.ndarray:
        return self._everyone(local).view(local.dtype).reshape(-1, *local.shape[1:])

    def start(self, local: np.ndarray, out: np.ndarray, what: str, agree: str | None = None):
        out[:] = self._everyone(local).view(np.uint8).reshape(out.shape)
        return lambda: out


@pytest.mark.parametrize("instances", [2, 8, 16])
def test_one_element_sums_keep_numpys_pairwise_bits(instances, monkeypatch):
    """From 8 replicas numpy sums a one-element part pairwise: the bucket must too."""
    import xlgraph
    from xlgraph import ops
    from xlgraph.ops.collectives import replicated_all_reduce
    from xlgraph.runtime import session

    monkeypatch.setenv("XLGRAPH_NUM_INSTANCES", str(instances))
    monkeypatch.setenv("XLGRAPH_NUM_REPLICAS", str(instances))
    monkeypatch.setattr(session, "_exchange", lambda ir: _Instances(instances))
    shapes = {"scalar": (), "one": (1,), "one_one": (1, 1), "three": (3,), "grid": (2, 4)}
    ir = xlgraph.Ir(replication="popdist")
    with ir.main_graph, xlgraph.in_sequence():
        streams, outs = {}, {}
        for name, shape in shapes.items():
            streams[name] = xlgraph.h2d_stream(shape, xlgraph.float32, name)
            x = ops.host_load(streams[name])
            for op in ("add", "mean"):
                outs[name, op] = xlgraph.d2h_stream(shape, xlgraph.float32, f"{name}_{op}")
                ops.host_store(outs[name, op], replicated_all_reduce(ops.exp(x), op))
    rng = np.random.default_rng(instances)
    feed = {s: (rng.normal(size=s.shape) * 4).astype(np.float32) for s in streams.values()}
    got = {}
    for mib in ("0", "25"):
        monkeypatch.setenv(BUCKET_MB, mib)
        with xlgraph.Session(ir, backend="numpy") as run:
            assert ("k_all_reduce_bucket" in run.source) == (mib != "0")
            got[mib] = run.run(feed)
    for (name, op), stream in outs.items():
        parts = _Instances(instances)._everyone(np.exp(feed[streams[name]]))
        want = np.add.reduce(parts.reshape(instances, *shapes[name]), 0)
        if op == "mean":
            want = want / np.float32(instances)
        for mib in ("0", "25"):
            assert _same(got[mib][stream], np.asarray(want, np.float32)), (name, op, mib)
