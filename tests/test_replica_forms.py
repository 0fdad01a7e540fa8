"""Every op's replicated form (``xlgraph.lower.replica_forms.replica_defn``) against its plain
kernel run once per replica, on the op's samples: with every input carrying the replica axis,
and with each input in turn held once (the same array on every replica)."""

from __future__ import annotations

import numpy as np
import pytest
from op_harness import build_op, sample_arrays

from xlgraph.lower.replica_forms import replica_defn
from xlgraph.op import REGISTRY
from xlgraph.ops.replicas import ReplicaContext
from xlgraph.tensor import Constant

REPLICAS = 3
FORMS = sorted(name for name, d in REGISTRY.items()
               if d.replica == "local" and (d.replicated is not None or d.elementwise)
               and d.samples is not None)
CASES = [(name, i) for name in FORMS
         for i in range(len(REGISTRY[name].samples(np.random.default_rng(0))))]


def _inputs(op, streams, arrays) -> list[np.ndarray] | None:
    """The op's input arrays: fed from a stream or constants; None if the builder put other
    ops in between."""
    by_stream = dict(zip(streams, arrays))
    values = []
    for t in op.inputs:
        if isinstance(t, Constant):
            values.append(t.data)
        elif t.producer is not None and t.producer.defn.kind == "host_load":
            values.append(by_stream[t.producer.attrs["stream"]])
        else:
            return None
    return values


def _built(defn, sample):
    """The sample's arrays and its op, in float64; in float32 for an op that takes only float16
    and float32 (the fp8 scale searches, the sparse matmul), which says so when it is built."""
    try:
        arrays = sample_arrays(sample, np.float64)
        return arrays, build_op(defn, sample, arrays)
    except RuntimeError as err:
        if "float16 or float32" not in str(err):
            raise
    arrays = sample_arrays(sample, np.float32)
    return arrays, build_op(defn, sample, arrays)


def _per_replica(name: str, index: int):
    """The op and each replica's input arrays (replica r draws its sample with seed r)."""
    defn = REGISTRY[name]
    per = []
    for r in range(REPLICAS):
        sample = defn.samples(np.random.default_rng(r))[index]
        arrays, (ir, streams, _, op) = _built(defn, sample)
        values = _inputs(op, streams, arrays)
        if values is None:
            pytest.skip(f"{name}: the builder inserts ops before it")
        per.append(values)
    return op, per


def _results(result):
    return list(result) if isinstance(result, tuple) else [result]


@pytest.mark.parametrize(("name", "index"), CASES)
def test_replicated_form_equals_the_kernel_per_replica(name: str, index: int) -> None:
    op, per = _per_replica(name, index)
    defn = op.defn
    ctx = ReplicaContext(REPLICAS, REPLICAS)
    ins, outs = [t.spec for t in op.inputs], [t.spec for t in op.outputs]
    for once in [None, *range(len(ins))]:
        if once is not None and once == defn.inplace_of:
            continue  # the plan gives a value written in place the replica axis of the write
        chosen = [[per[0][i] if i == once else values[i] for i in range(len(ins))]
                  for values in per]
        want = [_results(defn.kernel(*(np.array(a) for a in values), **op.attrs))
                for values in chosen]
        vary = [i != once for i in range(len(ins))]
        if not any(vary):
            continue  # a step of inputs held once runs the plain kernel
        args = [np.stack([values[i] for values in chosen]) if vary[i] else per[0][i]
                for i in range(len(ins))]
        form = replica_defn(defn, vary, [True] * len(outs), ins, outs, ctx)
        forms = [_results(form.kernel(*args, **op.attrs))]
        if form.kernel_out is not None and form.inplace_of is None:
            forms.append(_into_buffers(form, args, op.attrs, forms[0]))
        for got in forms:
            for k, out in enumerate(got):
                for r in range(REPLICAS):
                    np.testing.assert_allclose(
                        out[r], want[r][k], rtol=1e-12, atol=1e-12,
                        err_msg=f"{name} output {k} replica {r} once={once}")


def _into_buffers(form, args, attrs, like) -> list[np.ndarray]:
    """``form.kernel_out`` into fresh buffers shaped like ``like`` (the kernel's results)."""
    outs = [np.full(np.shape(x), np.nan, np.asarray(x).dtype) for x in like]
    extra = {"scratch": tuple(np.empty_like(outs[0]) for _ in range(form.scratch))}
    out = outs[0] if len(outs) == 1 else tuple(outs)
    if isinstance(form.kernel_out, np.ufunc):
        form.kernel_out(*args, out=out)
    else:
        form.kernel_out(*args, out=out, **attrs, **(extra if form.scratch else {}))
    return outs


def _fed_directly(name: str, index: int) -> bool:
    """Whether the sample's op reads its streams and constants (no op built before it)."""
    defn = REGISTRY[name]
    arrays, (_, streams, _, op) = _built(defn, defn.samples(np.random.default_rng(0))[index])
    return _inputs(op, streams, arrays) is not None


LOOPED = [(name, i) for name, d in sorted(REGISTRY.items())
          if d.replica == "local" and d.replicated is None and not d.elementwise
          and d.kind == "kernel" and not d.view and d.samples is not None
          for i in range(len(d.samples(np.random.default_rng(0)))) if _fed_directly(name, i)]


@pytest.mark.parametrize(("name", "index"), LOOPED)
def test_one_local_replica_gets_the_kernels_bits_in_arrays_of_its_own(name: str,
                                                                      index: int) -> None:
    """An instance of one replica (``xlgraph-run``, one replica per instance) runs the plain
    kernel once: its results are the kernel's bits, writable, and share no memory with the
    inputs, so a later in-place op cannot write through to them."""
    op, per = _per_replica(name, index)
    defn, values = op.defn, per[0]
    ins, outs = [t.spec for t in op.inputs], [t.spec for t in op.outputs]
    want = _results(defn.kernel(*(np.array(a) for a in values), **op.attrs))
    args = [np.array(a)[None] for a in values]
    form = replica_defn(defn, [True] * len(ins), [True] * len(outs), ins, outs,
                        ReplicaContext(1, 2))
    got = _results(form.kernel(*args, **op.attrs))
    for k, (out, expected) in enumerate(zip(got, want)):
        expected = np.asarray(expected)
        assert out.shape == (1, *expected.shape) and out.dtype == expected.dtype, (name, k)
        assert out[0].tobytes() == expected.tobytes(), (name, k)
        if k == 0 and defn.inplace_of is not None:
            continue  # written in place: it is that input
        assert out.flags.writeable, (name, k)
        assert not any(np.may_share_memory(out, a) for a in args), (name, k)
