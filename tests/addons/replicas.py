"""Run a forward function and its gradient over several replicas, and describe replica groups
independently of ``ReplicaGrouping`` (popxl-addons' rule), for the custom-op tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import xlgraph
from xlgraph import ops
from xlgraph.transforms import autodiff

BACKENDS = ["numpy", "numba"]


def layouts(replicas: int) -> list[tuple[int, int] | None]:
    """Every ``(stride, group size)`` that divides ``replicas`` (None: all replicas)."""
    out: list[tuple[int, int] | None] = [None]
    for size in (1, 2, 4, 8):
        for stride in (1, 2, 4):
            if size * stride <= replicas and replicas % (size * stride) == 0:
                if (stride, size) != (1, replicas):
                    out.append((stride, size))
    return out


CASES = [(r, lay) for r in (1, 2, 4, 8) for lay in layouts(r)]


def case_id(case: tuple[int, Any]) -> str:
    r, lay = case
    return f"r{r}-" + ("all" if lay is None else f"s{lay[0]}g{lay[1]}")


def members(replicas: int, layout: tuple[int, int] | None) -> list[tuple[int, ...]]:
    """Each replica's group in rank order: ``{floor(r/(sG)) sG + r mod s + k s}``."""
    stride, size = (1, replicas) if layout is None else layout
    out = []
    for r in range(replicas):
        base = (r // (stride * size)) * stride * size + r % stride
        out.append(tuple(base + k * stride for k in range(size)))
    return out


def grouping(ir: xlgraph.Ir, layout: tuple[int, int] | None) -> Any:
    return None if layout is None else ir.replica_grouping(*layout)


def run(replicas: int, fwd: Callable[..., Any], inputs: Sequence[np.ndarray],
        seeds: Callable[[list[xlgraph.Tensor]], list[np.ndarray]] | None = None,
        backend: str = "numpy", stable_norm: bool = False,
        ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``fwd(*tensors)`` on ``replicas`` replicas fed ``inputs`` (each ``(replicas, ...)``);
    returns its outputs and, when ``seeds(outputs)`` gives the output gradients (each
    ``(replicas, ...)``), the gradients of the floating inputs (each ``(replicas, ...)``).
    ``stable_norm`` sets the session option ``enableStableNorm``."""
    ir = xlgraph.Ir(replication=replicas)
    ir.session_options.enableStableNorm = stable_norm
    with ir.main_graph:
        specs = [xlgraph.TensorSpec(a.shape[1:], xlgraph.dtypes.of_array(a)) for a in inputs]
        graph = ir.create_graph(lambda *ts: fwd(*ts), *specs)
        outs = list(graph.outputs)
        streams = [xlgraph.h2d_stream(s.shape, s.dtype, f"in{i}") for i, s in enumerate(specs)]
        def fed(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
            return [a if replicas > 1 else a[0] for a in arrays]

        feeds = dict(zip(streams, fed(inputs)))
        grads: list[Any] = []
        if seeds is not None:
            wanted = [t for t in graph.inputs if t.dtype.is_floating_point]
            info = autodiff(graph, grads_provided=outs, grads_required=wanted)
            site = ops.call_with_info(graph, *[ops.host_load(s) for s in streams])
            seed_arrays = seeds(outs)
            seed_streams = [xlgraph.h2d_stream(a.shape[1:], xlgraph.dtypes.of_array(a),
                                               f"seed{i}") for i, a in enumerate(seed_arrays)]
            feeds.update(zip(seed_streams, fed(seed_arrays)))
            grads = ops.call(info.graph, *[ops.host_load(s) for s in seed_streams],
                             inputs_dict=info.inputs_dict(site))
            results = [*site.outputs[:len(outs)], *grads]
        else:
            results = list(ops.call(graph, *[ops.host_load(s) for s in streams]))
        d2h = [xlgraph.d2h_stream(t.shape, t.dtype, f"out{i}") for i, t in enumerate(results)]
        for s, t in zip(d2h, results):
            ops.host_store(s, t)
    session = xlgraph.Session(ir, backend=backend, compile_in_background=False)
    with session:
        got = session.run(feeds)
    values = [np.asarray(got[s]).reshape(replicas, *t.shape) for s, t in zip(d2h, results)]
    return values[:len(outs)], values[len(outs):]
