"""``Module.create_grad_graph``: a gradient graph built by the module's own ``build_grad``.

The forward graph's tensor-valued ``aux`` entries become forward outputs (in insertion order);
``build_grad`` receives the gradients of ``grads_provided`` positionally, reads forward values
through ``self.aux`` (each read tensor becomes a gradient-graph input, in first-read order),
returns the gradients of the non-variable inputs in ``grads_required`` and sets
``self.var_grad[name]`` for every variable input in ``grads_required``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import xlgraph as popxl
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.utils import duplicate_items, suffix_graph_name
from xlgraph.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from xlgraph.transforms.autodiff import _add_forward_output  # call sites gain the output

__all__ = ["create_grad_graph", "grad_graph_info"]

FWD, FWD_GRAD = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad


class GradBuilder(Protocol):
    """What ``create_grad_graph`` uses of an ``xlgraph.addons.Module`` (which imports this
    module, so it is named by its parts here)."""

    aux: Any
    var_grad: dict[str, popxl.Tensor]

    def _reset(self) -> None: ...

    def build_grad(self, *grads: popxl.Tensor) -> Any: ...


def _checked(fwd: popxl.Graph, tensors: Iterable[popxl.Tensor] | None, default: Any,
             where: str, what: str, caller: str = "create_grad_graph") -> list[popxl.Tensor]:
    out = list(default if tensors is None else tensors)
    twice = duplicate_items(out)
    if twice:
        raise ValueError(f"{caller}: {what} lists {[t.id for t in twice]} twice")
    pool = set(getattr(fwd, where))
    stray = [t.id for t in out if t not in pool]
    if stray:
        raise ValueError(f"{caller}: {what} {stray} are not {where} of graph "
                         f"{fwd.name!r}")
    return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, popxl.Tensor):
        return [value]
    return list(value)


def _check_grad(g: Any, t: popxl.Tensor, what: str) -> None:
    if not isinstance(g, popxl.Tensor):
        raise TypeError(f"create_grad_graph: {what} is {type(g).__name__}, expected a Tensor")
    if g.shape != t.shape or tuple(g.meta_shape or ()) != tuple(t.meta_shape or ()):
        raise ValueError(f"create_grad_graph: {what} has shape {g.shape} (meta "
                         f"{g.meta_shape}), the forward tensor {t.id} has {t.shape} (meta "
                         f"{t.meta_shape})")


def create_grad_graph(module: GradBuilder, fwd_graph: GraphWithNamedArgs,
                      grads_provided: Iterable[popxl.Tensor] | None,
                      grads_required: Iterable[popxl.Tensor] | None) -> GraphWithNamedArgs:
    """See ``Module.create_grad_graph``."""
    fwd = fwd_graph.graph
    provided = _checked(fwd, grads_provided, fwd.outputs, "outputs", "grads_provided")
    required = _checked(fwd, grads_required, fwd.inputs, "inputs", "grads_required")
    aux = dict(fwd_graph.aux or {})
    for value in aux.values():
        if isinstance(value, popxl.Tensor) and value.graph is fwd:
            _add_forward_output(fwd, value)
    names = {t: name for name, t in fwd_graph.args.to_dict().items()}
    plain = [t for t in required if t not in names]
    variables = [t for t in required if t in names]
    read: dict[str, tuple[popxl.Tensor, popxl.Tensor]] = {}

    def reader(key: str, t: popxl.Tensor) -> popxl.Tensor:
        if key not in read:
            read[key] = (t, popxl.graph_input(t.shape, t.dtype, key, meta_shape=t.meta_shape))
        return read[key][1]

    module._reset()
    module.aux.update(aux)
    module.aux.reader = reader
    graph = fwd.ir.create_empty_graph(suffix_graph_name(fwd.name, "grad"))
    try:
        with graph:
            seeds = [popxl.graph_input(t.shape, t.dtype, f"Gradient___{t.name}")
                     for t in provided]
            outs = _as_list(module.build_grad(*seeds))
            if len(outs) != len(plain):
                raise ValueError(f"{type(module).__name__}.build_grad returned {len(outs)} "
                                 f"gradients; grads_required has {len(plain)} non-variable "
                                 f"inputs ({[t.id for t in plain]})")
            for g, t in zip(outs, plain):
                _check_grad(g, t, f"the gradient of {t.id}")
                popxl.graph_output(g)
            for t in variables:
                g = module.var_grad.get(names[t])
                if g is None:
                    raise ValueError(f"{type(module).__name__}.build_grad set no "
                                     f"var_grad[{names[t]!r}]; every variable in "
                                     f"grads_required needs one")
                _check_grad(g, t, f"var_grad[{names[t]!r}]")
                popxl.graph_output(g)
    finally:
        module._reset()
    return GraphWithNamedArgs.from_grad_graph(grad_graph_info(
        graph, fwd, {g: t for t, g in read.values()}, provided, plain + variables))


def grad_graph_info(grad: popxl.Graph, fwd: popxl.Graph, fwd_tensors: dict[Any, popxl.Tensor],
                    grads_provided: Iterable[popxl.Tensor] | None,
                    grads_required: Iterable[popxl.Tensor] | None) -> GradGraphInfo:
    """See ``Module.create_grad_graph_info``."""
    where = "create_grad_graph_info"
    provided = _checked(fwd, grads_provided, fwd.outputs, "outputs", "grads_provided", where)
    required = _checked(fwd, grads_required, fwd.inputs, "inputs", "grads_required", where)
    stray = [t.id for t in fwd_tensors if t not in grad.inputs]
    if stray:
        raise ValueError(f"{where}: fwd_tensors keys {stray} are not inputs of {grad.name!r}")
    grad_ins = [t for t in grad.inputs if t not in fwd_tensors]
    if len(grad_ins) != len(provided):
        raise ValueError(f"{where}: {grad.name!r} has {len(grad_ins)} gradient inputs (inputs "
                         f"not in fwd_tensors), grads_provided has {len(provided)}")
    if len(grad.outputs) != len(required):
        raise ValueError(f"{where}: {grad.name!r} has {len(grad.outputs)} outputs, "
                         f"grads_required has {len(required)}")
    seeds = iter(provided)
    return GradGraphInfo(
        graph=grad, forward_graph=fwd,
        expected_inputs=tuple(ExpectedConnection(fwd_tensors[t], FWD) if t in fwd_tensors
                              else ExpectedConnection(next(seeds), FWD_GRAD)
                              for t in grad.inputs),
        expected_outputs=tuple(ExpectedConnection(t, FWD_GRAD) for t in required))
