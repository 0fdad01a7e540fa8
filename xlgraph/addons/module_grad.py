"""``Module.create_grad_graph``: a gradient graph built by the module's own ``build_grad``,
and the guarded ``aux`` / ``var_grad`` containers it reads and fills.

The checks run in popxl-addons 3.4's order: ``build_grad`` overridden, its signature, then
``grads_provided`` and ``grads_required``; the gradient graph is made by
``ir.create_graph(module.build_grad, *grads_provided)`` (its seeds are named after
``build_grad``'s parameters); once ``build_grad`` returns: every required variable has a
``var_grad``, the count and then the shapes of the returned gradients. Only then do the
variable gradients become outputs and the forward graph's tensor ``aux`` entries forward
outputs, so a failed attempt leaves the forward graph as it was.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import xlgraph as popxl
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.utils import duplicate_items
from xlgraph.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from xlgraph.transforms.autodiff import _add_forward_output  # call sites gain the output

__all__ = ["Aux", "VarGrad", "create_grad_graph", "grad_graph_info"]

FWD, FWD_GRAD = ExpectedConnectionType.Fwd, ExpectedConnectionType.FwdGrad
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class Aux(dict):
    """``Module.aux``: what ``build`` records for ``build_grad``. Written anywhere; read only
    while the module's ``build_grad`` runs under ``create_grad_graph``, where a tensor entry
    reads as a gradient-graph input of its spec (made once, named after the key)."""

    reader: Callable[[str, popxl.Tensor], popxl.Tensor] | None = None

    def __getitem__(self, key: str) -> Any:
        if self.reader is None:
            raise RuntimeError(f"You can only get items within the `build_graph` method: "
                               f"aux[{key!r}] is readable only in build_grad, while "
                               f"create_grad_graph (or autodiff) runs it")
        value = super().__getitem__(key)
        return self.reader(key, value) if isinstance(value, popxl.Tensor) else value


class VarGrad(dict):
    """``Module.var_grad``: the variable gradients ``build_grad`` sets, usable only while it
    runs under ``create_grad_graph``. Each assignment is checked at once against the forward
    graph's variables."""

    variables: dict[str, popxl.Tensor] | None = None

    def _guard(self) -> dict[str, popxl.Tensor]:
        if self.variables is None:
            raise RuntimeError("You can only use `var_grad` within the `build_graph` method: "
                               "var_grad is set and read in build_grad, while "
                               "create_grad_graph (or autodiff) runs it")
        return self.variables

    def __getitem__(self, key: str) -> popxl.Tensor:
        self._guard()
        return super().__getitem__(key)

    def __setitem__(self, key: str, value: Any) -> None:
        variables = self._guard()
        if not isinstance(value, popxl.Tensor):
            raise TypeError(f"Not a tensor: var_grad[{key!r}] = {type(value).__name__}")
        if key not in variables:
            raise KeyError(f"Not a variable: {key!r}. Possible names: {list(variables)}")
        var = variables[key]
        if value.shape != var.shape or tuple(value.meta_shape or ()) != tuple(
                var.meta_shape or ()):
            raise ValueError(f"Shape or meta-shape of Tensor does not match variable. "
                             f"var_grad[{key!r}]: {value.shape} (meta {value.meta_shape}), "
                             f"variable {var.shape} (meta {var.meta_shape})")
        super().__setitem__(key, value)


class GradBuilder(Protocol):
    """What ``create_grad_graph`` uses of an ``xlgraph.addons.Module`` (which imports this
    module, so it is named by its parts here)."""

    aux: Aux
    var_grad: VarGrad
    implements_grad_graph: bool

    def _reset(self) -> None: ...

    def build_grad(self, *grads: popxl.Tensor) -> Any: ...


def _checked(fwd: popxl.Graph, tensors: Iterable[popxl.Tensor] | None, default: Any,
             arg: str, where: str) -> list[popxl.Tensor]:
    out = list(default if tensors is None else tensors)
    pool = set(getattr(fwd, where + "s"))
    stray = [t for t in out if not isinstance(t, popxl.Tensor) or t not in pool]
    if stray:
        raise ValueError(f"A Tensor specified in `{arg}` is not a {where} of `fwd_graph`: "
                         f"{[getattr(t, 'id', t) for t in stray]} (graph {fwd.name!r})")
    twice = duplicate_items(out)
    if twice:
        raise ValueError(f"Duplicate tensors in `{arg}`: {[t.id for t in twice]}")
    return out


def _check_signature(module: GradBuilder) -> None:
    if not module.implements_grad_graph:
        raise RuntimeError(f"`build_grad` of {type(module).__name__} needs to be overridden "
                           f"to use `create_grad_graph`")
    params = inspect.signature(module.build_grad).parameters.values()
    if any(p.kind not in _POSITIONAL for p in params):
        raise TypeError(f"{type(module).__name__}.build_grad: method signature must only have "
                        f"a fixed number of positional parameters as inputs.")


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, popxl.Tensor):
        return [value]
    return list(value)


def create_grad_graph(module: GradBuilder, fwd_graph: GraphWithNamedArgs,
                      grads_provided: Iterable[popxl.Tensor] | None,
                      grads_required: Iterable[popxl.Tensor] | None) -> GraphWithNamedArgs:
    """See ``Module.create_grad_graph``."""
    _check_signature(module)
    fwd = fwd_graph.graph
    provided = _checked(fwd, grads_provided, fwd.outputs, "grads_provided", "output")
    required = _checked(fwd, grads_required, fwd.inputs, "grads_required", "input")
    aux = dict(fwd_graph.aux or {})
    variables = fwd_graph.args.to_dict()
    names = {t: name for name, t in variables.items()}
    plain = [t for t in required if t not in names]
    wanted = [t for t in required if t in names]
    read: dict[str, tuple[popxl.Tensor, popxl.Tensor]] = {}

    def reader(key: str, t: popxl.Tensor) -> popxl.Tensor:
        if key not in read:
            read[key] = (t, popxl.graph_input(t.shape, t.dtype, key, meta_shape=t.meta_shape))
        return read[key][1]

    module._reset()
    module.aux.update(aux)
    module.aux.reader = reader
    module.var_grad.variables = variables
    ir = fwd.ir
    try:
        graph = ir.create_graph(module.build_grad, *provided)
        var_grads = dict(dict.items(module.var_grad))
    finally:
        module._reset()
    try:
        _check_outputs(graph, plain, [names[t] for t in wanted if names[t] not in var_grads])
    except BaseException:
        ir.graphs.remove(graph)
        raise
    with graph:
        for t in wanted:
            popxl.graph_output(var_grads[names[t]])
    for value in aux.values():
        if isinstance(value, popxl.Tensor) and value.graph is fwd:
            _add_forward_output(fwd, value)
    return GraphWithNamedArgs.from_grad_graph(grad_graph_info(
        graph, fwd, {g: t for t, g in read.values()}, provided, plain + wanted))


def _check_outputs(graph: popxl.Graph, plain: list[popxl.Tensor], missing: list[str]) -> None:
    if missing:
        raise RuntimeError(f"Not all variable gradients have been specified: build_grad set "
                           f"no var_grad for {missing}")
    outs = graph.outputs
    if len(outs) > len(plain):
        raise RuntimeError(f"Too many outputs in the grad graph: build_grad returned "
                           f"{len(outs)} gradients for {len(plain)} non-variable inputs in "
                           f"grads_required {[t.id for t in plain]}")
    if len(outs) < len(plain):
        raise RuntimeError(f"Not all forward graph inputs have been specified: build_grad "
                           f"returned {len(outs)} gradients for {len(plain)} non-variable "
                           f"inputs in grads_required {[t.id for t in plain]}")
    for i, (g, t) in enumerate(zip(outs, plain)):
        if g.shape != t.shape or tuple(g.meta_shape or ()) != tuple(t.meta_shape or ()):
            raise ValueError(f"Shape or meta-shape of output Tensor at position {i} does not "
                             f"match the forward input {t.id}: {g.shape} (meta {g.meta_shape}) "
                             f"against {t.shape} (meta {t.meta_shape})")


def grad_graph_info(grad: popxl.Graph, fwd: popxl.Graph, fwd_tensors: dict[Any, popxl.Tensor],
                    grads_provided: Iterable[popxl.Tensor] | None,
                    grads_required: Iterable[popxl.Tensor] | None) -> GradGraphInfo:
    """See ``Module.create_grad_graph_info``."""
    where = "create_grad_graph_info"
    provided = _checked(fwd, grads_provided, fwd.outputs, "grads_provided", "output")
    required = _checked(fwd, grads_required, fwd.inputs, "grads_required", "input")
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
