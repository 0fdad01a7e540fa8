"""``grad_of_call``: the gradients of one call site as ``{parent input: gradient}``, in one call.

It is the PopXL way (``autodiff``, ``inputs_dict``, ``call_with_info``,
``fwd_parent_ins_to_grad_parent_outs``) packaged for the common case.

Example:
    >>> with ir.main_graph:
    ...     site = ops.call_with_info(loss_graph, x, w)
    ...     grads = grad_of_call(site, wrt=[w])    # the loss is a scalar: its seed is 1
    ...     ops.scaled_add_(w, grads[w], b=-0.1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from xlgraph import ops
from xlgraph.context import get_current_graph
from xlgraph.core.collector import collector_paused
from xlgraph.errors import GraphMismatchError, user_source_line
from xlgraph.ops.call import CallSiteInfo
from xlgraph.tensor import Tensor, constant
from xlgraph.transforms.autodiff import differentiate

__all__ = ["grad_of_call"]


def _seeds(site: CallSiteInfo, seeds: Sequence[Tensor] | Mapping[Tensor, Tensor] | None,
           where: str) -> dict[Tensor, Tensor]:
    """``{forward graph output: its gradient in the parent}`` for the outputs the graph declared."""
    graph = site.called_graph
    declared = graph.outputs[: graph.declared_outputs or len(graph.outputs)]
    if seeds is None:
        if len(declared) != 1 or declared[0].shape != ():
            specs = ", ".join(str(t.spec) for t in declared) or "none"
            raise ValueError(f"grad_of_call: graph {graph.name!r} has outputs ({specs}); pass "
                             f"seeds=[gradient of each output] unless it has one scalar output "
                             f"[at {where}]")
        dtype = declared[0].dtype
        return {declared[0]: constant(np.ones((), dtype.as_numpy()), dtype, "grad_seed")}
    if isinstance(seeds, Mapping):
        position = {id(site.parent_output(i)): i for i in range(len(declared))}
        unknown = [t for t in seeds if id(t) not in position]
        if unknown:
            raise ValueError(f"grad_of_call: {unknown[0].id} is not an output of the call of "
                             f"{graph.name!r} [at {where}]")
        return {declared[position[id(t)]]: g for t, g in seeds.items()}
    seeds = list(seeds)
    if len(seeds) != len(declared):
        raise ValueError(f"grad_of_call: graph {graph.name!r} has {len(declared)} outputs, got "
                         f"{len(seeds)} seeds [at {where}]")
    return dict(zip(declared, seeds))


def _required(site: CallSiteInfo, wrt: Iterable[Tensor] | None, where: str) -> list[Tensor]:
    """The graph inputs fed by the ``wrt`` parent tensors (default: every float input)."""
    parents = [t for t in site.inputs if t.dtype.is_floating_point] if wrt is None else list(wrt)
    positions: dict[Tensor, list[int]] = {}
    for i, t in enumerate(site.inputs):
        positions.setdefault(t, []).append(i)
    required: dict[int, Tensor] = {}
    for parent in parents:
        fed = positions.get(parent, [])
        if not fed:
            raise ValueError(f"grad_of_call: {parent.id} {parent.spec} is not an input of the "
                             f"call of {site.called_graph.name!r} [at {where}]")
        for i in fed:
            required.setdefault(i, site.called_graph.inputs[i])
    return list(required.values())


@collector_paused  # see xlgraph.core.collector
def grad_of_call(
    fwd_call_info: CallSiteInfo,
    seeds: Sequence[Tensor] | Mapping[Tensor, Tensor] | None = None,
    wrt: Iterable[Tensor] | None = None,
) -> dict[Tensor, Tensor]:
    """Differentiate the graph called at ``fwd_call_info`` and call its gradient graph here.

    Builds in the current graph, which must be the graph of the call site. The forward graph
    gains activation outputs as with ``autodiff``.

    Args:
        fwd_call_info: a forward call site, from ``ops.call_with_info``.
        seeds: the gradient of each output the graph declared, in order, or
            ``{parent output: gradient}`` for some of them. Default: 1 for a graph with a single
            scalar output (a loss).
        wrt: the parent tensors to differentiate with respect to (default: every floating-point
            input of the call site).

    Returns:
        ``{parent input: its gradient}``, in ``wrt`` order; a tensor passed to several inputs
        gets the sum of their gradients.

    Raises:
        ValueError: missing or unknown seeds, or a ``wrt`` tensor the call site does not take.
        GraphMismatchError: when the current graph is not the call site's graph.
        AutodiffError: as ``autodiff`` (e.g. a graph that modifies a tensor in place).
    """
    where = user_source_line()
    parent_graph = fwd_call_info.op.graph
    if get_current_graph() is not parent_graph:
        raise GraphMismatchError(f"grad_of_call: build it in graph {parent_graph.name!r}, where "
                                 f"the forward call is, not in {get_current_graph().name!r} "
                                 f"[at {where}]")
    seed_of = _seeds(fwd_call_info, seeds, where)
    required = _required(fwd_call_info, wrt, where)
    info = differentiate(fwd_call_info.called_graph, list(seed_of), required, {})
    grad_site = ops.call_with_info(info.graph, *seed_of.values(),
                                   inputs_dict=info.inputs_dict(fwd_call_info))
    grads: dict[Tensor, Tensor] = {}
    for i, conn in enumerate(info.expected_outputs):
        parent = fwd_call_info.graph_to_parent(conn.fwd_tensor)
        grad = grad_site.parent_output(i)
        grads[parent] = grads[parent] + grad if parent in grads else grad
    return grads
