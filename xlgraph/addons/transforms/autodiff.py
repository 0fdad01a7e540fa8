"""``autodiff`` and ``autodiff_with_accumulation`` on graphs with named args."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.dot_tree import sanitise
from xlgraph.addons.graph import GraphWithNamedArgs, plain_autodiff
from xlgraph.addons.named_replica_grouping import NamedReplicaGrouping
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.variable_factory import NamedVariableFactories, add_variable_input
from xlgraph.transforms import GradGraphInfo

__all__ = ["autodiff", "autodiff_with_accumulation"]

GraphLike = GraphWithNamedArgs | popxl.Graph


def _graph(graph: GraphLike) -> popxl.Graph:
    return graph.graph if isinstance(graph, GraphWithNamedArgs) else graph


def autodiff(graph: GraphLike, grads_provided: Iterable[popxl.Tensor] | None = None,
             grads_required: Iterable[popxl.Tensor] | None = None,
             called_graphs_grad_info: Mapping[popxl.Graph, GradGraphInfo] | None = None,
             ) -> GraphWithNamedArgs:
    """The gradient graph of ``graph``, as PopXL's ``transforms.autodiff`` makes it.

    Args:
        graph: the forward graph (with named args, or a plain graph).
        grads_provided: forward outputs whose gradients are inputs (default: all outputs).
        grads_required: forward tensors whose gradients are outputs (default: all inputs).
        called_graphs_grad_info: gradient graphs to reuse for graphs called inside.

    Returns:
        The gradient graph with its ``grad_graph_info``; its expected inputs follow PopXL's
        order (the gradient seeds first, then the forward tensors it reads).
    """
    return plain_autodiff(graph, grads_provided, grads_required, called_graphs_grad_info)


def _names_of(graph: GraphLike) -> dict[popxl.Tensor, str]:
    if isinstance(graph, GraphWithNamedArgs):
        return {t: name for name, t in graph.args.to_dict().items()}
    return {}


def autodiff_with_accumulation(
    graph: GraphLike,
    tensors_to_accumulate_grads: Iterable[popxl.Tensor],
    grads_provided: Iterable[popxl.Tensor] | None = None,
    grads_required: Iterable[popxl.Tensor] | None = None,
    called_graphs_grad_info: Mapping[popxl.Graph, GradGraphInfo] | None = None,
    replica_groupings: NamedReplicaGrouping | None = None,
) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    """The gradient graph of ``graph`` accumulating the gradients of
    ``tensors_to_accumulate_grads``, in that graph itself.

    The required gradients are ``grads_required`` (default: none) and the accumulated
    tensors. The gradient graph gains a by-reference input ``mean_accum_counter`` and, per
    accumulated tensor, ``accum.<name>`` (``<name>`` its name in ``graph.args``, else its
    sanitised tensor name; replica grouping from ``replica_groupings``) that holds the running
    mean of its gradients over the calls: ``accum = accum * n / (n + 1) + grad / (n + 1)``;
    then the counter is incremented. Zero the counter (for example with
    ``ops.var_updates.accumulator_scale_(counter, 0)``) to start a new mean. The accumulated
    gradients are no longer outputs: the outputs are the gradients of the other
    ``grads_required``, in order (and so are the info's ``expected_outputs``).

    Returns:
        ``(factories of the counter and the accumulators, gradient graph)``.
    """
    fwd = _graph(graph)
    accumulate = list(tensors_to_accumulate_grads)
    kept = [t for t in (grads_required or []) if t not in accumulate]
    grad = plain_autodiff(graph, grads_provided, kept + accumulate, called_graphs_grad_info)
    inner = grad.graph
    names = _names_of(graph)
    facts, named = NamedVariableFactories(), NamedTensors()

    def declare(name: str, shape: tuple[int, ...], dtype: popxl.dtype,
                group: popxl.ReplicaGrouping | None = None) -> popxl.Tensor:
        t, factory = add_variable_input(name, partial(np.zeros, shape), dtype, by_ref=True,
                                        replica_grouping=group)
        facts._insert_path(name, factory)
        named._insert_path(name, t)
        return t

    with inner, popxl.in_sequence(True):
        counter = declare("mean_accum_counter", (), popxl.float32)
        for i, t in enumerate(accumulate):
            name = names.get(t) or sanitise(t.name)
            rg = replica_groupings.get(name) if replica_groupings and name in replica_groupings \
                else None
            g = inner.outputs[len(kept) + i]
            ops.var_updates.accumulate_mean_(declare(f"accum.{name}", g.shape, g.dtype, rg), g,
                                             counter)
        ops.var_updates.accumulate_(counter, popxl.constant(1.0, popxl.float32))
    inner.remove_outputs(range(len(kept), len(kept) + len(accumulate)))
    info = grad.grad_graph_info
    info = GradGraphInfo(graph=inner, forward_graph=fwd, expected_inputs=info.expected_inputs,
                         expected_outputs=info.expected_outputs[:len(kept)])
    return facts, GraphWithNamedArgs.from_grad_graph(info, named)
