"""Trace a ``torch.nn.Module`` with ``torch.fx`` and write it into an xlgraph subgraph.

``lower_module`` runs the fx graph node by node: tensors become xlgraph tensors of the subgraph,
everything else (sizes, shapes, flags) is computed in Python, and each torch target goes through
the conversion table. Parameters and buffers become graph inputs named by their ``state_dict``
keys, bound later to variables of the same names.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from xlgraph import ops
from xlgraph.errors import XlgraphError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.poptorch import table
from xlgraph.poptorch.functional import Unsupported, xlgraph_dtype
from xlgraph.tensor import Tensor, constant, graph_input, graph_output
from xlgraph.training import SEED_SPEC

__all__ = ["UnsupportedOpError", "Lowered", "lower_module", "named_tensors", "torch_to_numpy"]


class UnsupportedOpError(XlgraphError, NotImplementedError):
    """A torch operation (or argument value) that the PopTorch frontend cannot convert."""


def named_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``model`` by its ``state_dict`` key (shared ones once)."""
    out = dict(model.named_parameters())
    out.update((k, v) for k, v in model.named_buffers() if v is not None)
    return out


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy array of ``t`` in the dtype xlgraph runs it as (64-bit types become 32-bit)."""
    array = t.detach().cpu().numpy()
    return array.astype(xlgraph_dtype(t.dtype).as_numpy(), copy=False)


class _Tracer(torch.fx.Tracer):
    """fx's tracer, keeping every module the table converts as a leaf and recording sources."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        return table.module_class(m) in table.MODULES or super().is_leaf_module(m, qualname)


@dataclass
class Lowered:
    """A module written into a subgraph.

    Attributes:
        graph: the subgraph; its inputs are the data, then parameters, then the seed.
        data_inputs: the graph inputs of the tensor arguments, in call order.
        params: ``{graph input: state_dict key}`` of the parameters and buffers it reads.
        outputs: the flattened forward outputs are graph outputs ``0..len(outputs)-1``.
        out_spec: the pytree spec that rebuilds ``forward``'s return structure.
        loss_index: the graph output holding the loss (None in inference).
        seed: the dropout seed input, if any dropout is active.
        buffer_updates: ``{graph output index: state_dict key}`` of updated buffers.
    """

    graph: Graph
    data_inputs: list[Tensor]
    params: dict[Tensor, str]
    outputs: list[Tensor]
    out_spec: Any
    loss_index: int | None = None
    seed: Tensor | None = None
    buffer_updates: dict[int, str] = field(default_factory=dict)


class _Context:
    """What conversion functions see: parameters, dropout seeds, losses and buffer updates."""

    def __init__(self, names: Mapping[int, str], training: bool) -> None:
        self._names = names
        self.training = training
        self.params: dict[str, Tensor] = {}
        self.seed: Tensor | None = None
        self._seed_state: Tensor | None = None
        self.updates: dict[str, Tensor] = {}
        self.losses: list[Tensor] = []
        self.node_losses: set[int] = set()
        self.loss_values: dict[int, Tensor] = {}

    def tensor(self, value: Any) -> Any:
        """The graph tensor of a torch parameter, buffer or constant tensor (None stays None)."""
        if value is None or not isinstance(value, torch.Tensor):
            return value
        name = self._names.get(id(value))
        if name is None:
            return constant(torch_to_numpy(value))
        if name not in self.params:
            spec_dtype = xlgraph_dtype(value.dtype)
            self.params[name] = graph_input(tuple(value.shape), spec_dtype, name)
        return self.params[name]

    def next_seed(self) -> Tensor:
        """A fresh ``uint32[2]`` seed for one random op (split from the step's seed input)."""
        if self.seed is None:
            self.seed = self._seed_state = graph_input(SEED_SPEC.shape, SEED_SPEC.dtype, "seed")
        this, self._seed_state = ops.split_random_seed(self._seed_state)
        return this

    def mark_loss(self, t: Tensor) -> Tensor:
        self.losses.append(t)
        return t

    def update_buffer(self, buffer: torch.Tensor, value: Tensor) -> None:
        self.updates[self._names[id(buffer)]] = value


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def _source_line(node: torch.fx.Node) -> str:
    """``file:line`` (and the code) in the user's ``forward`` that created ``node``."""
    frames = [m for m in _FRAME.finditer(node.stack_trace or "")
              if "/torch/" not in m.group(1) and "/xlgraph/poptorch/" not in m.group(1)]
    if not frames:
        return "<unknown source>"
    path, line, _, code = frames[-1].groups()
    return f"{path}:{line}: {code.strip()}"


def _describe(node: torch.fx.Node, module: torch.nn.Module | None) -> str:
    if node.op == "call_module":
        return f"torch.nn.{table.module_class(module).__name__}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return table.label(node.target)


def _module_path(node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return f"model.{node.target}"
    stack = node.meta.get("nn_module_stack") or {}
    return f"model.{list(stack)[-1]}" if stack else "model"


def _builder(node: torch.fx.Node, root: torch.nn.Module) -> tuple[Any, Any]:
    """The table entry of ``node`` and, for a module call, the module."""
    if node.op == "call_module":
        module = root.get_submodule(node.target)
        return table.MODULES.get(table.module_class(module)), module
    if node.op == "call_method":
        return table.METHODS.get(node.target), None
    return table.FUNCTIONS.get(node.target), None


def _fail(node: torch.fx.Node, module: Any, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"{_describe(node, module)} ({why}) at {_module_path(node)}, {_source_line(node)}.\n"
        f"The PopTorch frontend converts: {', '.join(table.supported())}")


def _is_skipped(node: torch.fx.Node) -> bool:
    """fx's guards on specialised arguments (``labels=None``) have nothing to convert."""
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "_assert_is_none"


def _run_node(node: torch.fx.Node, root: torch.nn.Module, ctx: _Context,
              env: dict[torch.fx.Node, Any]) -> Any:
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    if node.op == "get_attr":
        return ctx.tensor(_attribute(root, node.target))
    if _is_skipped(node):
        return None
    builder, module = _builder(node, root)
    if builder is None:
        raise _fail(node, module, "not supported")
    try:
        return builder(ctx, module, *args, **kwargs) if module is not None else \
            builder(ctx, *args, **kwargs)
    except (Unsupported, TypeError) as exc:
        raise _fail(node, module, f"unsupported arguments: {exc}") from exc


def _attribute(root: torch.nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _losses(node: torch.fx.Node, ctx: _Context, before: int,
            ancestry: dict[torch.fx.Node, frozenset[int]]) -> None:
    """Track which loss nodes each node depends on; a loss fed by losses replaces them."""
    inputs = frozenset().union(*(ancestry.get(n, frozenset()) for n in node.all_input_nodes))
    if len(ctx.losses) > before:
        ctx.node_losses -= inputs
        ctx.node_losses.add(id(node))
        ctx.loss_values[id(node)] = ctx.losses[-1]
        inputs = inputs | {id(node)}
    ancestry[node] = inputs


def lower_module(ir: Ir, model: torch.nn.Module, args: Mapping[str, Any], training: bool,
                 name: str = "torch_forward") -> Lowered:
    """Trace ``model.forward`` with the tensor ``args`` (others baked in) into a new subgraph.

    Args:
        ir: the Ir receiving the subgraph.
        model: the module; its ``training`` flags are read as they are now.
        args: ``forward``'s arguments by name, defaults applied; torch tensors become graph
            inputs (one batch), other values are constants of the trace.
        training: build for training (dropout active, exactly one loss required).

    Raises:
        UnsupportedOpError: naming the torch op, the module path and the source line.
    """
    tensor_args = {k: v for k, v in args.items() if isinstance(v, torch.Tensor)}
    concrete = {k: v for k, v in args.items() if k not in tensor_args}
    fx_graph = _Tracer().trace(model, concrete_args=concrete or None)
    ctx = _Context({id(t): k for k, t in named_tensors(model).items()}, training)
    graph = ir.create_empty_graph(name)
    env: dict[torch.fx.Node, Any] = {}
    ancestry: dict[torch.fx.Node, frozenset[int]] = {}
    placeholders = iter(inspect.signature(model.forward).parameters)
    data_inputs = []
    with graph:
        for node in fx_graph.nodes:
            if node.op == "placeholder":
                arg = next(placeholders)
                if arg in tensor_args:
                    t = tensor_args[arg]
                    env[node] = graph_input(tuple(t.shape), xlgraph_dtype(t.dtype), arg)
                    data_inputs.append(env[node])
                else:
                    env[node] = concrete[arg]
                continue
            if node.op == "output":
                result = torch.fx.node.map_arg(node.args[0], env.__getitem__)
                break
            before = len(ctx.losses)
            env[node] = _run_node(node, model, ctx, env)
            _losses(node, ctx, before, ancestry)
        leaves, out_spec = pytree.tree_flatten(result)
        outputs = [t for t in leaves if isinstance(t, Tensor)]
        if len(outputs) != len(leaves):
            raise UnsupportedOpError(f"{type(model).__name__}.forward returns non-tensor values "
                                     f"{[v for v in leaves if not isinstance(v, Tensor)]}")
        for t in outputs:
            graph_output(t)
        lowered = Lowered(graph, data_inputs, {t: k for k, t in ctx.params.items()}, outputs,
                          out_spec, seed=ctx.seed)
        if training:
            lowered.loss_index = _loss_output(model, ctx, outputs)
            for key, value in ctx.updates.items():
                lowered.buffer_updates[len(graph.outputs)] = key
                graph_output(value)
    return lowered


def _loss_output(model: torch.nn.Module, ctx: _Context, outputs: list[Tensor]) -> int:
    """The graph output index of the one independent loss (added as an output if needed)."""
    losses = [ctx.loss_values[n] for n in ctx.node_losses]
    if not losses:
        raise XlgraphError(f"Couldn't find a loss in graph! {type(model).__name__}.forward must "
                           f"compute a torch loss or wrap its loss in poptorch.identity_loss")
    if len(losses) > 1:
        raise XlgraphError(f"Multiple independent losses found in graph of "
                           f"{type(model).__name__}: wrap their combination in "
                           f"poptorch.identity_loss")
    loss = losses[0]
    if loss.shape != ():
        loss = ops.sum(loss)  # a non-reduced identity loss: backprop a gradient of ones
    for i, t in enumerate(outputs):
        if t is loss:
            return i
    graph_output(loss)
    return len(outputs)
