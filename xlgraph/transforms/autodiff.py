"""``autodiff``: write the gradient graph of a subgraph from the ops' VJP rules."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from xlgraph.core.collector import collector_paused
from xlgraph.core.trampoline import Nested, run
from xlgraph.errors import AutodiffError, user_source_line
from xlgraph.graph import Graph
from xlgraph.op import REGISTRY, Op
from xlgraph.ops.call import CallSiteInfo, call, call_with_info
from xlgraph.ops.control import branch_of, conditional
from xlgraph.tensor import Constant, Tensor, constant, graph_input, graph_output
from xlgraph.transforms.dce import remove_dead_ops
from xlgraph.transforms.grad_info import ExpectedConnection, ExpectedConnectionType, GradGraphInfo

__all__ = ["autodiff"]

FWD, FWD_GRAD = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad


class GradContext:
    """What a VJP rule sees: forward values via ``x(i)``/``y(i)``, plus the op's attributes."""

    def __init__(self, builder: _GradBuilder, op: Op) -> None:
        self._builder = builder
        self.op = op
        self.attrs = op.attrs

    def x(self, i: int) -> Tensor:
        """Forward input ``i``, as a tensor of the gradient graph."""
        return self._builder.fwd_value(self.op.inputs[i])

    def y(self, i: int) -> Tensor:
        """Forward output ``i``, as a tensor of the gradient graph."""
        return self._builder.fwd_value(self.op.outputs[i])


class _GradBuilder:
    """Builds one gradient graph; holds the forward-tensor placeholders it needed."""

    def __init__(self, fwd: Graph, grad: Graph, cache: dict[Graph, GradGraphInfo]) -> None:
        self.fwd = fwd
        self.grad = grad
        self.cache = cache
        self.fwd_inputs: dict[Tensor, Tensor] = {}  # forward tensor -> grad-graph input
        self.constants: dict[Tensor, Tensor] = {}

    def fwd_value(self, t: Tensor) -> Tensor:
        if isinstance(t, Constant):
            if t not in self.constants:
                self.constants[t] = constant(t.data, t.dtype, t.name)
            return self.constants[t]
        if t not in self.fwd_inputs:
            self.fwd_inputs[t] = graph_input(t.shape, t.dtype, t.name)
        return self.fwd_inputs[t]

    def op_grads(self, op: Op, grads: dict[Tensor, list[Tensor]]) -> tuple[Any, ...]:
        """The gradients of the inputs of ``op`` (an op with a gradient rule)."""
        dys = [_total(grads.get(o)) for o in op.outputs]
        return tuple(op.defn.grad(GradContext(self, op), *dys))

    def graph_grads(self, op: Op, grads: dict[Tensor, list[Tensor]]) -> Nested[tuple[Any, ...]]:
        """The gradients of the inputs of a call or conditional, whose graphs are
        differentiated as nested generators (``xlgraph.core.trampoline``): nesting is bounded
        by memory, not by the recursion limit."""
        dys = [_total(grads.get(o)) for o in op.outputs]
        if op.defn.kind == "call":
            return (yield self.call_grads(op, dys))
        return (yield self.cond_grads(op, dys))

    def grad_info(self, callee: Graph) -> Nested[GradGraphInfo]:
        """The (cached) gradient graph of a called graph: float outputs to float inputs."""
        if callee not in self.cache:
            if not callee.recursively_autodiffable:
                raise AutodiffError(
                    f"autodiff({self.fwd.name!r}): The graph contains a call to another graph "
                    f"{callee.name!r} which has been marked as unsafe to autodiff (it has its "
                    f"own gradient). Please provide a gradient graph via "
                    f"`called_graphs_grad_info` in PopXL (popxl-addons' call_module does) "
                    f"[at {user_source_line()}]")
            provided = [t for t in callee.outputs if t.dtype.is_floating_point]
            required = [t for t in callee.inputs if t.dtype.is_floating_point]
            self.cache[callee] = yield _differentiate(callee, provided, required, self.cache)
        return self.cache[callee]

    def callee_grads(self, callee: Graph, site: CallSiteInfo, dy_of: dict[Tensor, Tensor],
                     fwd: Callable[[Tensor], Tensor]) -> Nested[dict[Tensor, Tensor]]:
        """Call the gradient graph of ``callee`` for one call site of it.

        ``dy_of`` maps the site's outputs to their gradients (zeros when absent); ``fwd`` turns
        a tensor of the site's graph into a tensor of the current graph.
        """
        info = yield self.grad_info(callee)
        args = []
        for conn in info.expected_inputs:
            parent = site.graph_to_parent(conn.fwd_tensor)
            if conn.connection_type is FWD_GRAD:
                dy = dy_of.get(parent)
                args.append(dy if dy is not None else _zeros(parent))
            else:
                args.append(fwd(parent))
        outs = call(info.graph, *args)
        return {c.fwd_tensor: g for c, g in zip(info.expected_outputs, outs)}

    def call_grads(self, op: Op, dys: list[Tensor | None]) -> Nested[tuple[Any, ...]]:
        callee: Graph = op.attrs["graph"]
        by_input = yield self.callee_grads(callee, CallSiteInfo(op), dict(zip(op.outputs, dys)),
                                           self.fwd_value)
        return tuple(by_input.get(t) for t in callee.inputs)

    def cond_grads(self, op: Op, dys: list[Tensor | None]) -> Nested[tuple[Any, ...]]:
        """The gradient of a conditional is a conditional of its branches' gradients.

        Each arm recomputes its forward branch: activations cannot leave an arm that may not
        run, so the forward branches gain no outputs that the conditional would pass on.
        """
        wanted = [i for i, t in enumerate(op.inputs) if i and t.dtype.is_floating_point]
        if not wanted:
            return (None,) * len(op.inputs)
        seeds = [dy if dy is not None else _zeros(o)
                 for o, dy in zip(op.outputs, dys) if o.dtype.is_floating_point]
        arms, feeds = [], []
        for then_branch in (True, False):
            branch, span, _ = branch_of(op, then_branch)
            arms.append((yield self.arm(op, branch, span, wanted)))
            feeds.append([*seeds, *(self.fwd_value(t) for t in op.inputs[span])])
        outs = conditional(self.fwd_value(op.inputs[0]), *arms, *feeds)
        grads: list[Tensor | None] = [None] * len(op.inputs)
        for i, g in zip(wanted, outs):
            grads[i] = g
        return tuple(grads)

    def arm(self, op: Op, branch: Graph, span: slice, wanted: list[int]) -> Nested[Graph]:
        """One arm of a conditional's gradient: gradients for every ``wanted`` parent input
        (zeros for those feeding the other branch)."""
        floats = [i for i, t in enumerate(op.outputs) if t.dtype.is_floating_point]
        arm = self.fwd.ir.create_empty_graph(f"{branch.name}_cond_grad", unique_suffix=False)
        with arm:
            seeds = [graph_input(op.outputs[i].shape, op.outputs[i].dtype,
                                 f"Gradient___{op.outputs[i].name}") for i in floats]
            site = call_with_info(branch, *(graph_input(t.shape, t.dtype, t.name)
                                            for t in branch.inputs))
            dy_of = {site.outputs[i]: s for i, s in zip(floats, seeds)}
            by_input = yield self.callee_grads(branch, site, dy_of, lambda t: t)
            for i in wanted:
                inside = span.start <= i < span.stop
                g = by_input.get(branch.inputs[i - span.start]) if inside else None
                graph_output(g if g is not None else _zeros(op.inputs[i]))
        return arm


def _zeros(like: Tensor) -> Tensor:
    from xlgraph.ops.movement import init

    return init(like.shape, like.dtype)


def _total(parts: list[Tensor] | None) -> Tensor | None:
    if not parts:
        return None
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def _fit(grad: Tensor, target: Tensor) -> Tensor:
    """Sum broadcast dimensions away and cast, so ``grad`` matches ``target``'s spec."""
    from xlgraph.ops import cast, reshape, sum

    if grad.shape != target.shape:
        lead = grad.rank - target.rank
        axes = list(range(lead)) + [
            lead + i for i, d in enumerate(target.shape) if d == 1 and grad.shape[lead + i] != 1
        ]
        if axes:
            grad = sum(grad, axes, keepdims=True)
        grad = reshape(grad, target.shape)
    if grad.dtype is not target.dtype:
        grad = cast(grad, target.dtype)
    return grad


def _check_differentiable(graph: Graph) -> None:
    if graph.is_main:
        raise AutodiffError("autodiff works on subgraphs; the main graph cannot be differentiated "
                            f"[at {user_source_line()}]")
    for op in graph.ops:
        if op.defn.modifies_input:
            raise AutodiffError(
                f"The graph {graph.name!r} contains a modifying op {op.describe()}; autodiff "
                f"cannot differentiate graphs that modify tensors in place. Fix: {_fix(op)}"
            )


def _fix(op: Op) -> str:
    """How to avoid the in-place ``op`` (its out-of-place twin when there is one)."""
    name = op.defn.name
    twin = name.rstrip("_")
    use = (f"use ops.{twin}(...), which returns a new tensor, instead of ops.{name}(...)"
           if twin != name and twin in REGISTRY and not REGISTRY[twin].modifies_input
           else "compute a new tensor instead of changing one in place")
    return (f"{use} inside the graph you differentiate, and apply in-place updates (such as "
            f"optimiser steps) in the calling graph, after the gradient call")


def _add_forward_output(graph: Graph, t: Tensor) -> None:
    """Make ``t`` an output of ``graph``; every existing call site gains the matching output."""
    if graph.declared_outputs is None:
        graph.declared_outputs = len(graph.outputs)
    graph.add_output(t)
    for site in graph.call_sites:
        if site.defn.kind == "call":
            site.outputs.append(site.graph.add_tensor(t.spec, t.name, site))


@collector_paused  # see xlgraph.core.collector
def differentiate(graph: Graph, provided: list[Tensor], required: list[Tensor],
                  cache: dict[Graph, GradGraphInfo]) -> GradGraphInfo:
    """Build the gradient graph of ``graph`` (the work behind ``autodiff``)."""
    return run(_differentiate(graph, provided, required, cache))


def _differentiate(graph: Graph, provided: list[Tensor], required: list[Tensor],
                   cache: dict[Graph, GradGraphInfo]) -> Nested[GradGraphInfo]:
    _check_differentiable(graph)
    for t in [*provided, *required]:
        if t.graph is not graph:
            raise AutodiffError(f"{t.id} is not a tensor of graph {graph.name!r}")
    grad_graph = graph.ir.create_empty_graph(f"{graph.name}_grad", unique_suffix=False)
    builder = _GradBuilder(graph, grad_graph, cache)
    needs = set(required)
    for op in graph.ops:
        if any(t in needs for t in op.inputs):
            needs.update(op.outputs)
    with grad_graph:
        seeds = [graph_input(t.shape, t.dtype, f"Gradient___{t.name}") for t in provided]
        grads: dict[Tensor, list[Tensor]] = {}
        for t, seed in zip(provided, seeds):
            grads.setdefault(t, []).append(seed)
        for op in reversed(graph.ops):
            if not any(o in grads for o in op.outputs) or not any(t in needs for t in op.inputs):
                continue
            if op.defn.grad is None and op.defn.kind not in ("call", "conditional"):
                continue
            if op.defn.kind in ("call", "conditional"):
                input_grads = yield builder.graph_grads(op, grads)
            else:
                input_grads = builder.op_grads(op, grads)
            for t, g in zip(op.inputs, input_grads):
                if g is not None and t in needs and t.dtype.is_floating_point:
                    grads.setdefault(t, []).append(_fit(g, t))
        for t in required:
            total = _total(grads.get(t))
            graph_output(total if total is not None else _zeros(t))
    remove_dead_ops(grad_graph)
    read = {t for op in grad_graph.ops for t in op.inputs} | set(grad_graph.outputs)
    unused = {p for p in builder.fwd_inputs.values() if p not in read}
    grad_graph.remove_inputs(unused)
    fwd_conns = [ExpectedConnection(t, FWD) for t, p in builder.fwd_inputs.items() if p in read]
    for conn in fwd_conns:
        t = conn.fwd_tensor
        if graph.input_index(t) is None and graph.output_index(t) is None:
            _add_forward_output(graph, t)
    return GradGraphInfo(
        graph=grad_graph,
        forward_graph=graph,
        expected_inputs=tuple(ExpectedConnection(t, FWD_GRAD) for t in provided) + tuple(fwd_conns),
        expected_outputs=tuple(ExpectedConnection(t, FWD_GRAD) for t in required),
    )


def _warn_unreachable(graph: Graph, provided: list[Tensor], required: list[Tensor]) -> None:
    """Warn (once per call) about required tensors that no provided gradient reaches: their
    gradient outputs are zeros, which is rarely what was meant."""
    reach = set(provided)
    for op in reversed(graph.ops):
        if any(o in reach for o in op.outputs):
            reach.update(op.inputs)
    missing = [t.name for t in required if t not in reach]
    if missing:
        warnings.warn(
            f"autodiff({graph.name!r}): no path from the provided gradients "
            f"{[t.name for t in provided]} to the required tensors {missing}; their gradients "
            f"are zeros [at {user_source_line()}]", stacklevel=3)


@collector_paused  # see xlgraph.core.collector
def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: Mapping[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: bool = False,
) -> GradGraphInfo | dict[Graph, GradGraphInfo]:
    """Create the gradient graph of ``graph``.

    Activations the gradient graph needs that are internal to ``graph`` are added as outputs of
    ``graph``; existing call sites of ``graph`` gain those outputs.

    Args:
        graph: the forward subgraph.
        grads_provided: forward outputs whose gradients are fed in (default: all outputs).
        grads_required: forward tensors whose gradients are produced (default: all inputs).
        called_graphs_grad_info: gradient graphs to reuse for graphs called inside ``graph``.
        return_all_grad_graphs: return ``{forward graph: GradGraphInfo}`` for every graph
            differentiated, including called graphs.

    Returns:
        The GradGraphInfo of ``graph`` (or the dict described above).

    Raises:
        AutodiffError: for the main graph, or a graph that modifies a tensor in place.
    """
    provided = list(graph.outputs if grads_provided is None else grads_provided)
    required = list(graph.inputs if grads_required is None else grads_required)
    cache: dict[Graph, GradGraphInfo] = dict(called_graphs_grad_info or {})
    info = differentiate(graph, provided, required, cache)
    if grads_required is not None:
        _warn_unreachable(graph, provided, required)
    cache[graph] = info
    return cache if return_all_grad_graphs else info
