"""Capture a ``torch.nn.Module`` at the ATen level and write it into an xlgraph subgraph.

``lower_module`` exports the module for one input signature (``xlgraph.poptorch.capture``),
converts the ATen graph (``xlgraph.poptorch.convert``), and records how the subgraph connects:
data inputs in the order of the flattened ``forward`` arguments, parameters and buffers by
their ``state_dict`` keys, buffers ``forward`` mutates, and the loss of a training model.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind, OutputKind

from xlgraph import dtypes, ops
from xlgraph.errors import XlgraphError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.poptorch.capture import export_module
from xlgraph.poptorch.convert import Context, SeedInput, UnsupportedOpError, convert_graph
from xlgraph.poptorch.support import Error
from xlgraph.poptorch.table import op_name
from xlgraph.poptorch.util import torch_to_numpy, xlgraph_dtype
from xlgraph.tensor import Tensor, constant, graph_input, graph_output

__all__ = ["UnsupportedOpError", "Lowered", "lower_module", "named_tensors", "torch_to_numpy",
           "split_arguments", "flat_tensors"]

IDENTITY_LOSS = "xlgraph_poptorch.identity_loss.default"
_PLAIN = (type(None), bool, int, float, str)
_LOSS_OPS = (IDENTITY_LOSS, "xlgraph_poptorch.ctc_loss.default")


def named_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``model`` by its ``state_dict`` key (shared ones once)."""
    out = dict(model.named_parameters())
    out.update((k, v) for k, v in model.named_buffers() if v is not None)
    return out


def split_arguments(model: torch.nn.Module, bound: Mapping[str, Any]
                    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``forward``'s bound arguments (by name, ``*args``/``**kwargs`` included) as args, kwargs."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, p in inspect.signature(model.forward).parameters.items():
        if name not in bound:
            continue
        if p.kind == p.VAR_POSITIONAL:
            args.extend(bound[name])
        elif p.kind == p.VAR_KEYWORD:
            kwargs.update(bound[name])
        elif p.kind == p.KEYWORD_ONLY:
            kwargs[name] = bound[name]
        else:
            args.append(bound[name])
    return tuple(args), kwargs


def _warn_host_outputs(program: torch.export.ExportedProgram) -> None:
    """PopTorch's warning for each returned tensor that no input, parameter, buffer or random
    draw feeds (a constant made in ``forward``, on the host): it is returned as it is."""
    signature = program.graph_signature
    fed = {spec.arg.name for spec in signature.input_specs
           if spec.kind in (InputKind.USER_INPUT, InputKind.PARAMETER, InputKind.BUFFER)}

    def on_host(node: torch.fx.Node) -> bool:
        pending, seen = [node], {node}
        while pending:
            n = pending.pop()
            if n.op == "placeholder" and n.name in fed or \
                    torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
                return False  # computed on the device
            fresh = [m for m in n.all_input_nodes if m not in seen]
            seen.update(fresh)
            pending.extend(fresh)
        return True

    outputs = list(program.graph.output_node().args[0])
    for node, spec in zip(outputs, signature.output_specs):
        if spec.kind == OutputKind.USER_OUTPUT and isinstance(node, torch.fx.Node) and \
                isinstance(node.meta.get("val"), torch.Tensor) and on_host(node):
            warnings.warn("Output expected to be on the IPU but is on cpu", stacklevel=2)


def flat_tensors(bound: Mapping[str, Any]) -> list[torch.Tensor]:
    """The torch tensors among ``forward``'s arguments, nested ones included, in flat order."""
    return [v for v in pytree.tree_leaves(list(bound.values())) if isinstance(v, torch.Tensor)]


@dataclass
class Lowered:
    """A module written into a subgraph.

    Attributes:
        graph: the subgraph; its inputs are the data, then parameters, then the seed.
        data_inputs: the graph inputs of the tensor arguments, in flattened call order.
        params: ``{graph input: state_dict key}`` of the parameters and buffers it reads.
        outputs: the flattened forward outputs are graph outputs ``0..len(outputs)-1``.
        out_spec: the pytree spec that rebuilds ``forward``'s return structure.
        output_dtypes: the dtype each output comes back in: torch's, 64-bit types as 32-bit
            (PopTorch returns int64 results as int32 and float64 as float32).
        loss_index: the graph output holding the loss (None in inference).
        seed: the seed input of the random ops, if any.
        buffer_updates: ``{graph output index: state_dict key}`` of updated buffers.
        input_updates: ``{graph output index: position in data_inputs}`` of the inputs
            ``forward`` changes in place (PopTorch writes them back into the caller's tensors).
        constant_outputs: ``{position among forward's flattened outputs: value}`` of the
            outputs that are plain Python values (``None``, a size), returned as they are.
    """

    graph: Graph
    data_inputs: list[Tensor]
    params: dict[Tensor, str]
    outputs: list[Tensor]
    out_spec: Any
    output_dtypes: list[torch.dtype] = field(default_factory=list)
    loss_index: int | None = None
    seed: Tensor | None = None
    buffer_updates: dict[int, str] = field(default_factory=dict)
    input_updates: dict[int, int] = field(default_factory=dict)
    constant_outputs: dict[int, Any] = field(default_factory=dict)

    def results(self, tensors: list[Any]) -> list[Any]:
        """Every flattened output of ``forward``: ``tensors`` (the computed outputs, in order)
        with the plain Python outputs put back in their places."""
        computed = iter(tensors)
        count = len(tensors) + len(self.constant_outputs)
        return [self.constant_outputs[i] if i in self.constant_outputs else next(computed)
                for i in range(count)]


def _canonical_keys(model: torch.nn.Module) -> dict[str, str]:
    """Every parameter and buffer name, tied ones included (``b.weight = a.weight``), mapped to
    the ``named_tensors`` key of its tensor (the first name it has)."""
    first: dict[int, str] = {}
    keys: dict[str, str] = {}
    named = list(model.named_parameters(remove_duplicate=False))
    named += [(k, v) for k, v in model.named_buffers(remove_duplicate=False) if v is not None]
    for name, tensor in named:
        keys[name] = first.setdefault(id(tensor), name)
    return keys


def _placeholders(program: torch.export.ExportedProgram, flat_args: list[Any],
                  keys: dict[str, str]) -> tuple[list[Any], list[Tensor], dict[Tensor, str]]:
    """One value per placeholder: data inputs first (graph inputs), then parameters, buffers
    and lifted constants. Tied parameters (one tensor under several names, ``keys``) share
    one graph input, so their gradients add up."""
    specs = program.graph_signature.input_specs
    user = iter(flat_args)
    data: list[Tensor] = []
    values: dict[int, Any] = {}
    for i, spec in enumerate(specs):
        if spec.kind == InputKind.USER_INPUT:
            value = next(user)
            if isinstance(value, torch.Tensor):
                value = graph_input(tuple(value.shape), xlgraph_dtype(value.dtype),
                                    spec.arg.name)
                data.append(value)
            values[i] = value
    params: dict[Tensor, str] = {}
    shared: dict[str, Tensor] = {}
    attributes = getattr(program, "xlgraph_constants", set())
    for i, spec in enumerate(specs):
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and \
                spec.target not in attributes:
            key = keys.get(spec.target, spec.target)
            if key not in shared:
                val = _placeholder_val(program, spec.arg.name)
                shared[key] = graph_input(tuple(val.shape), xlgraph_dtype(val.dtype), key)
                params[shared[key]] = key
            values[i] = shared[key]
        elif spec.kind != InputKind.USER_INPUT:
            values[i] = constant(torch_to_numpy(program.constants[spec.target],
                                                 f"constant {spec.target!r}"))
    return [values[i] for i in range(len(specs))], data, params


def _placeholder_val(program: torch.export.ExportedProgram, name: str) -> Any:
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name == name:
            return node.meta["val"]
    raise XlgraphError(f"no placeholder {name}")


_LOSS_FUNCTIONS = {"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits",
                   "kl_div", "ctc_loss"}


def _is_loss_function(torch_fn: Any) -> bool:
    name = torch_fn[1].rsplit(".", 1)[-1] if torch_fn else ""
    return name.endswith("_loss") or name in _LOSS_FUNCTIONS


def _independent_losses(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The last node of each torch loss call and each ``identity_loss``, less those that feed
    another loss (a loss combined into an identity loss is part of it)."""
    last: dict[str, torch.fx.Node] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if op_name(node.target) in _LOSS_OPS:
            last[node.name] = node
        elif _is_loss_function(node.meta.get("torch_fn")):
            last[node.meta["torch_fn"][0]] = node
    losses = set(last.values())
    below: dict[torch.fx.Node, set[torch.fx.Node]] = {}
    fed: set[torch.fx.Node] = set()
    for node in graph.nodes:
        inherited = set().union(*(below.get(n, set()) for n in node.all_input_nodes))
        if node in losses:
            fed |= inherited
            inherited = inherited | {node}
        below[node] = inherited
    return [n for n in last.values() if n not in fed]


def lower_module(ir: Ir, model: torch.nn.Module, args: Mapping[str, Any], training: bool,
                 name: str = "torch_forward", downcast_half: bool = False) -> Lowered:
    """Capture ``model.forward`` with ``args`` (one batch) into a new subgraph of ``ir``.

    Args:
        ir: the Ir receiving the subgraph.
        model: the module; its ``training`` flags are read as they are now.
        args: ``forward``'s bound arguments by name, defaults applied; tensors (also inside
            tuples, lists and dicts) become graph inputs, other values are baked in.
        training: build for training (dropout active, exactly one loss required).
        downcast_half: PopTorch's ``FloatDowncastToHalf``: an op with float16 and float32
            operands computes in float16.

    Raises:
        UnsupportedOpError: listing every unconverted op with its module path and source line.
        DataDependentError: ``forward`` branches on a tensor value.
    """
    call_args, call_kwargs = split_arguments(model, args)
    program = export_module(model, call_args, call_kwargs, training)
    flat_args = pytree.tree_leaves((call_args, call_kwargs))
    graph = ir.create_empty_graph(name)
    seeds = SeedInput()
    with graph:
        keys = _canonical_keys(model)
        inputs, data, params = _placeholders(program, flat_args, keys)
        ctx = Context(training, seeds, downcast_half)
        outs, env = convert_graph(program.graph_module, inputs, ctx,
                                  f"{type(model).__name__}.forward")
        specs = program.graph_signature.output_specs
        user = [(v, s) for v, s in zip(outs, specs) if s.kind == OutputKind.USER_OUTPUT]
        constants = {i: v for i, (v, _) in enumerate(user) if not isinstance(v, Tensor)}
        odd = [v for v in constants.values() if not isinstance(v, _PLAIN)]
        if odd:
            raise UnsupportedOpError(f"{type(model).__name__}.forward returns values that are "
                                     f"neither tensors nor plain Python values: {odd}")
        _warn_host_outputs(program)
        outputs = [v for v, _ in user if isinstance(v, Tensor)]
        for t in outputs:
            graph_output(t)
        out_nodes = list(program.graph.output_node().args[0])
        dtypes_ = [_output_dtype(n.meta["val"].dtype, v)
                   for n, s, v in zip(out_nodes, specs, outs)
                   if s.kind == OutputKind.USER_OUTPUT and isinstance(v, Tensor)]
        lowered = Lowered(graph, data, params, outputs, program.call_spec.out_spec, dtypes_,
                          seed=seeds.input, constant_outputs=constants)
        if training:
            lowered.loss_index = _loss_output(model, program.graph, env, outputs)
        attributes = getattr(program, "xlgraph_constants", set())
        for value, spec in zip(outs, specs):
            # a plain tensor attribute changed in forward is a constant: nothing persists
            if spec.kind == OutputKind.BUFFER_MUTATION and spec.target not in attributes:
                lowered.buffer_updates[len(graph.outputs)] = keys.get(spec.target, spec.target)
                graph_output(value)
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                lowered.input_updates[len(graph.outputs)] = [
                    t.name for t in data].index(spec.target)
                graph_output(value)
    _trace_attributes_on_host(model, program, flat_args, attributes)
    return lowered


def _trace_attributes_on_host(model: torch.nn.Module, program: Any, flat_args: list[Any],
                              attributes: set[str]) -> None:
    """Apply once, on the host, what ``forward`` does to plain tensor attributes
    (``self.i += 1``): PopTorch's trace runs ``forward`` on the host, so the attribute changes
    once at compilation while the compiled model keeps the value it was traced with. The
    captured graph is run on copies of everything else (nothing but the attributes changes)."""
    specs = program.graph_signature.output_specs
    changed = [i for i, s in enumerate(specs)
               if s.kind == OutputKind.BUFFER_MUTATION and s.target in attributes]
    if not changed:
        return
    stored = {**program.state_dict, **program.constants}
    user = iter(flat_args)
    values = [next(user) if s.kind == InputKind.USER_INPUT else stored[s.target]
              for s in program.graph_signature.input_specs]
    with torch.no_grad():
        outs = torch.fx.Interpreter(program.graph_module).run(
            *[v.clone() if isinstance(v, torch.Tensor) else v for v in values])
    for i in changed:
        path, _, name = specs[i].target.rpartition(".")
        model.get_submodule(path).__dict__[name].copy_(outs[i])


_DEVICE_DTYPES = {torch.int64: torch.int32, torch.float64: torch.float32}


def _output_dtype(torch_dtype: torch.dtype, value: Tensor) -> torch.dtype:
    """The dtype an output comes back in: torch's, float16 where ``FloatDowncastToHalf``
    computed it so, and 64-bit types as the 32-bit ones the device computed them in (PopTorch
    returns an ``argmax`` or an int64 input as int32)."""
    if torch_dtype == torch.float32 and value.dtype == dtypes.float16:
        return torch.float16
    return _DEVICE_DTYPES.get(torch_dtype, torch_dtype)


def _loss_output(model: torch.nn.Module, graph: torch.fx.Graph, env: Mapping[Any, Any],
                 outputs: list[Tensor]) -> int:
    """The graph output index of the one independent loss (added as an output if needed)."""
    losses = _independent_losses(graph)
    if not losses:
        raise Error(f"Couldn't find a loss in graph! {type(model).__name__}.forward must "
                           f"compute a torch loss or wrap its loss in poptorch.identity_loss")
    if len(losses) > 1:
        raise Error("Multiple independent losses found in graph. Graph must have one final "
                    "loss. Wrap final graph loss in poptorch.identity_loss.")
    loss = env[losses[0]]
    if loss.shape != ():
        loss = ops.sum(loss)  # a non-reduced identity loss: backprop a gradient of ones
    for i, t in enumerate(outputs):
        if t is loss:
            return i
    graph_output(loss)
    return len(outputs)
