"""Helpers popxl-addons' own tests use: ``run_module``, ``TensorInput``, ``ops_of_type``.

``run_module`` runs on xlgraph's simulator (``"cpu"``); in popxl-addons 3.4 it needs an IPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.module import Module
from xlgraph.core.pb_views import PbOp, op_class, op_type

__all__ = ["ops_of_type", "TensorInput", "run_module"]


def ops_of_type(ops_: Iterable[Any], op_type_: type | str) -> int:
    """How many of ``ops_`` (PopART op views, e.g. ``graph._pb_graph.getOps()``, or xlgraph
    ops) are of ``op_type_``: a view class (``popart._internal.ir.op.SubtractOp``), its name,
    or a PopART type name (``"Sub"``, ``"SubOp"``)."""
    count = 0
    for op in ops_:
        kind = op.opid.type if isinstance(op, PbOp) else op_type(op.defn.name)
        cls = op_class(kind)
        if isinstance(op_type_, str):
            count += op_type_ in (kind, f"{kind}Op", cls.__name__)
        else:
            count += issubclass(cls, op_type_)
    return count


class TensorInput:
    """A host array that ``run_module`` turns into a variable (``dtype`` inferred when None).

    Raises:
        ValueError: float64 data without an explicit ``dtype``.
    """

    def __init__(self, data: np.ndarray, dtype: popxl.dtype | None = None) -> None:
        data = np.asarray(data)
        if dtype is None and data.dtype == np.float64:
            raise ValueError("TensorInput: float64 data needs an explicit dtype (e.g. "
                             "popxl.float32)")
        self.data = data
        self.dtype = dtype or popxl.dtypes.of_array(data)


def _weights(weights: Any, variables: Any) -> dict[popxl.Tensor, np.ndarray]:
    if weights is None:
        return {}
    if callable(weights):
        weights = weights(variables)
    named = variables.to_dict()
    return {named[k] if isinstance(k, str) else k: np.asarray(v)
            for k, v in dict(weights).items()}


def run_module(module: Module, *args: Any,
               weights: Mapping[Any, np.ndarray] | Callable[[Any], Any] | None = None,
               **kwargs: Any) -> list[np.ndarray]:
    """Build ``module`` with ``args`` (``TensorInput``s become variables; other arguments only
    shape the build), initialise its variables, write ``weights`` (a mapping by variable or
    dotted name, or a callable given the variables that returns one), run once on the
    simulator and return one array per graph output."""
    ir = popxl.Ir()
    with ir.main_graph:
        built = [popxl.variable(a.data, a.dtype) if isinstance(a, TensorInput) else a
                 for a in args]
        facts, graph = module.create_graph(*built, **kwargs)
        variables = facts.init()
        outs = graph.bind(variables).call(*[a for a in built if isinstance(a, popxl.Tensor)])
        streams = []
        for t in outs:
            stream = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(stream, t)
            streams.append(stream)
    with popxl.Session(ir, "cpu") as session:
        data = _weights(weights, variables)
        if data:
            session.write_variables_data(data)
        results = session.run({})
    return [results[s] for s in streams]
