"""``popxl_addons.ops.replicated_strided_collectives``: all-reduce, all-gather and
reduce-scatter over groups of replicas ``stride`` apart (``ir.replica_grouping(stride,
group_size)``); the records are ``xlgraph.ops.tp_collectives`` and ``xlgraph.ops.collectives``."""

from __future__ import annotations

from typing import Any

import xlgraph as popxl
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.ops.tp_collectives import (
    check_tp_op,
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
    replicated_reduce_scatter_strided,
)
from xlgraph.replica_grouping import ReplicaGrouping

__all__ = ["replicated_all_reduce_strided", "replicated_all_reduce_strided_identical_inputs",
           "replicated_all_reduce_strided_identical_grad_inputs", "replicated_all_gather_strided",
           "replicated_reduce_scatter_strided", "replicated_all_reduce_strided_graph"]


def replicated_all_reduce_strided_graph(tensors: list[popxl.Tensor], op: str = "add",
                                        group: ReplicaGrouping | None = None,
                                        use_io_tiles: bool = False,
                                        ) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph taking tensors of the specs of ``tensors`` (its named inputs, by tensor name)
    and returning their all-reduces over ``group``, and the names in input order.
    ``use_io_tiles`` is a placement hint with no effect here. (popxl-addons 3.4's version
    fails; this one works.)"""
    check_tp_op(op)
    ir = popxl.gcg().ir
    names = [t.name for t in tensors]

    def reduce_all(*ts: popxl.Tensor) -> list[popxl.Tensor]:
        return [replicated_all_reduce_strided(x, op, group) for x in ts]

    graph = ir.create_graph(reduce_all, *[t.spec for t in tensors])
    args: Any = NamedTensors.from_dict(dict(zip(names, graph.inputs)))
    return GraphWithNamedArgs(graph, args), names
