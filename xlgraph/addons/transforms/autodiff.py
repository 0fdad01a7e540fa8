"""``autodiff`` and ``autodiff_with_accumulation`` on graphs with named args."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

import numpy as np

import xlgraph as popxl
from xlgraph import ops, transforms
from xlgraph.addons.dot_tree import sanitise
from xlgraph.addons.graph import GraphWithNamedArgs, called_infos, plain_autodiff
from xlgraph.addons.named_replica_grouping import NamedReplicaGrouping
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.variable_factory import NamedVariableFactories, add_variable_input
from xlgraph.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo

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
    """A gradient graph that accumulates the gradients of ``tensors_to_accumulate_grads``.

    Each of them gets an accumulator (a by-reference input named ``accum.<name>``, ``<name>``
    being its name in ``graph.args``) that holds the running mean of its gradients over the
    calls: ``accum = accum * n / (n + 1) + grad / (n + 1)`` with the call counter
    ``mean_accum_counter``, which each call increments. Zero the counter (for example with
    ``ops.var_updates.accumulator_scale_(counter, 0)``) to start a new mean. The graph's outputs
    are the gradients in ``grads_required`` that are not accumulated.

    Returns:
        ``(factories of the accumulators and the counter, gradient graph)``.
    """
    fwd = _graph(graph)
    accumulate = list(tensors_to_accumulate_grads)
    required = list(fwd.inputs if grads_required is None else grads_required)
    kept = [t for t in required if t not in accumulate]
    inner = transforms.autodiff(fwd, grads_provided, kept + accumulate,
                                called_infos(graph, called_graphs_grad_info))
    names = _names_of(graph)
    wrapper = popxl.gir().create_empty_graph(f"{inner.graph.name}_accumulate")
    facts = NamedVariableFactories()
    named = NamedTensors()
    with wrapper, popxl.in_sequence(True):
        ins = [popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
               for t in inner.graph.inputs]
        outs = ops.call(inner.graph, *ins)
        counter, factory = add_variable_input("mean_accum_counter", partial(np.zeros, ()),
                                              popxl.float32, by_ref=True)
        facts._insert_path("mean_accum_counter", factory)
        named._insert_path("mean_accum_counter", counter)
        for i, t in enumerate(accumulate):
            name = names.get(t) or sanitise(t.name)
            rg = replica_groupings.get(name) if replica_groupings and name in replica_groupings \
                else None
            grad = outs[len(kept) + i]
            accum, factory = add_variable_input(f"accum.{name}", partial(np.zeros, grad.shape),
                                                grad.dtype, by_ref=True, replica_grouping=rg)
            ops.var_updates.accumulate_mean_(accum, grad, counter)
            facts._insert_path(f"accum.{name}", factory)
            named._insert_path(f"accum.{name}", accum)
        ops.var_updates.accumulate_(counter, popxl.constant(1.0, popxl.float32))
        for g in outs[:len(kept)]:
            popxl.graph_output(g)
    info = GradGraphInfo(
        graph=wrapper,
        forward_graph=fwd,
        expected_inputs=inner.expected_inputs,
        expected_outputs=tuple(ExpectedConnection(t, ExpectedConnectionType.FwdGrad)
                               for t in kept),
    )
    return facts, GraphWithNamedArgs.from_grad_graph(info, named)
