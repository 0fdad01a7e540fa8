"""Build and run one registered op on sample data, for the registry-driven tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import xlgraph
from xlgraph import ops
from xlgraph.op import BUILDERS, Op, OpDef, Sample
from xlgraph.transforms import autodiff


def as_dtype(arr: np.ndarray, float_dtype: Any) -> np.ndarray:
    """Float arrays in ``float_dtype``; signed int arrays as int32; unsigned ints (packed
    data, seeds) and bools unchanged."""
    if arr.dtype.kind == "f":
        return arr.astype(float_dtype)
    if arr.dtype.kind == "i":
        return arr.astype(np.int32)
    return arr


def sample_arrays(sample: Sample, float_dtype: Any) -> list[np.ndarray]:
    """The arrays of a sample (lists of arrays flattened), in argument order."""
    out = []
    for a in sample.args:
        items = a if isinstance(a, list) else [a]
        out.extend(as_dtype(x, float_dtype) for x in items if isinstance(x, np.ndarray))
    return out


def _substitute(sample: Sample, tensors: list[xlgraph.Tensor]) -> list[Any]:
    it = iter(tensors)
    args = []
    for a in sample.args:
        if isinstance(a, list):
            args.append([next(it) if isinstance(x, np.ndarray) else x for x in a])
        elif isinstance(a, np.ndarray):
            args.append(next(it))
        else:
            args.append(a)
    return args


def _outputs(result: Any) -> list[xlgraph.Tensor]:
    if result is None:
        return []
    if isinstance(result, xlgraph.Tensor):
        return [result]
    return [t for t in result if isinstance(t, xlgraph.Tensor)]


def last_op(graph: xlgraph.Graph, defn: OpDef) -> Op:
    return [op for op in graph.ops if op.defn is defn][-1]


def build_op(defn: OpDef, sample: Sample, arrays: list[np.ndarray]):
    """A main graph that loads ``arrays`` from streams, applies the op and stores its outputs;
    returns (ir, input streams, output streams, op)."""
    ir = xlgraph.Ir()
    with ir.main_graph:
        streams = [xlgraph.h2d_stream(a.shape, a.dtype, f"in{i}") for i, a in enumerate(arrays)]
        tensors = [ops.host_load(s) for s in streams]
        result = BUILDERS[defn.name](*_substitute(sample, tensors), **sample.kwargs)
        outs = _outputs(result)
        d2h = [xlgraph.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(outs)]
        for s, t in zip(d2h, outs):
            ops.host_store(s, t)
        op = last_op(ir.main_graph, defn)
    return ir, streams, d2h, op


def run_forward(defn: OpDef, sample: Sample, arrays: list[np.ndarray], optimize: bool,
                backend: str | None = None):
    """Run the op in a Session on ``arrays`` fed through streams; returns (outputs, op)."""
    ir, streams, d2h, op = build_op(defn, sample, arrays)
    session = xlgraph.Session(ir, "cpu", optimize=optimize, backend=backend,
                              compile_in_background=False)
    with session:
        got = session.run(dict(zip(streams, arrays)))
    return [got[s] for s in d2h], op


def gradients(defn: OpDef, sample: Sample, arrays: list[np.ndarray], rng: np.random.Generator):
    """Gradients of sum(seed_i * output_i) with respect to each float input, via autodiff.

    Returns the gradients, the random seeds used and the forward op.
    """
    ir = xlgraph.Ir()
    with ir.main_graph:
        def fwd(*xs: xlgraph.Tensor) -> list[xlgraph.Tensor]:
            return [t for t in _outputs(BUILDERS[defn.name](*_substitute(sample, list(xs)),
                                                            **sample.kwargs))
                    if t.dtype.is_floating_point]

        graph = ir.create_graph(fwd, *[xlgraph.TensorSpec(a.shape, a.dtype) for a in arrays])
        op = last_op(graph, defn)
        wanted = [t for t in graph.inputs if t.dtype.is_floating_point]
        provided = graph.outputs  # autodiff may add outputs (activations) to the graph
        info = autodiff(graph, grads_required=wanted)
        in_streams = [xlgraph.h2d_stream(a.shape, a.dtype, f"in{i}") for i, a in enumerate(arrays)]
        seeds = [rng.normal(size=t.shape).astype(t.dtype.as_numpy()) for t in provided]
        seed_streams = [xlgraph.h2d_stream(s.shape, s.dtype, f"seed{i}")
                        for i, s in enumerate(seeds)]
        fwd_site = ops.call_with_info(graph, *[ops.host_load(s) for s in in_streams])
        grads = ops.call(info.graph, *[ops.host_load(s) for s in seed_streams],
                         inputs_dict=info.inputs_dict(fwd_site))
        d2h = [xlgraph.d2h_stream(g.shape, g.dtype, f"grad{i}") for i, g in enumerate(grads)]
        for s, g in zip(d2h, grads):
            ops.host_store(s, g)
    session = xlgraph.Session(ir, "cpu")
    with session:
        got = session.run({**dict(zip(in_streams, arrays)), **dict(zip(seed_streams, seeds))})
    return [got[s] for s in d2h], seeds, op
