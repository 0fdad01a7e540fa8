"""``recompute_graph``: a gradient graph that recomputes its forward activations instead of
taking them from the forward call site."""

from __future__ import annotations

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.utils import suffix_graph_name
from xlgraph.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo

__all__ = ["add_recompute_inputs", "recompute_graph"]

FWD, FWD_GRAD = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad


def add_recompute_inputs(grad_info: GradGraphInfo) -> GradGraphInfo:
    """``grad_info`` with expected inputs that are forward-graph *inputs* only (plus the
    gradient seeds): every forward input, in order, replaces the activations."""
    fwd = grad_info.forward_graph
    seeds = [c for c in grad_info.expected_inputs if c.connection_type is FWD_GRAD]
    return GradGraphInfo(grad_info.graph, fwd,
                         tuple(seeds) + tuple(ExpectedConnection(t, FWD) for t in fwd.inputs),
                         grad_info.expected_outputs)


def recompute_graph(grad_graph: GraphWithNamedArgs) -> GraphWithNamedArgs:
    """Wrap ``grad_graph`` so that it calls the forward graph again for the activations it
    needs: the result expects the gradient seeds and the forward graph's inputs (its
    ``grad_graph_info.inputs_dict(fwd_call_info)`` still works), and the forward call site no
    longer has to keep activations alive until the backward pass. Named args (e.g.
    accumulators) carry over."""
    info = grad_graph.grad_graph_info
    fwd = info.forward_graph
    wanted = add_recompute_inputs(info)
    n_seeds = len(wanted.expected_inputs) - len(fwd.inputs)
    extra = info.graph.inputs[len(info.expected_inputs):]  # named args after the expected
    graph = fwd.ir.create_empty_graph(suffix_graph_name(info.graph.name, "recompute"))
    with graph:
        ins = [_like(c.fwd_tensor, f"Gradient___{c.fwd_tensor.name}"
                     if c.connection_type is FWD_GRAD else c.fwd_tensor.name)
               for c in wanted.expected_inputs]
        named = [_like(t, t.name, getattr(t, "by_ref", False)) for t in extra]
        site = ops.call_with_info(fwd, *ins[n_seeds:])
        args = [ins[i] if c.connection_type is FWD_GRAD else site.graph_to_parent(c.fwd_tensor)
                for i, c in enumerate(info.expected_inputs)]
        call = ops.call_with_info(info.graph, *args, inputs_dict=dict(zip(extra, named)))
        for t in named:
            if getattr(t, "by_ref", False):
                call.set_parent_input_modified(t)
        for out in call.outputs:
            popxl.graph_output(out)
    result = GradGraphInfo(graph, fwd, wanted.expected_inputs, info.expected_outputs)
    return GraphWithNamedArgs.from_grad_graph(result, grad_graph.args.remap(dict(zip(extra,
                                                                                   named))))


def _like(t: popxl.Tensor, name: str, by_ref: bool = False) -> popxl.Tensor:
    return popxl.graph_input(t.shape, t.dtype, name, by_ref=by_ref, meta_shape=t.meta_shape)
