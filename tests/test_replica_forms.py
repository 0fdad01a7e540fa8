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
