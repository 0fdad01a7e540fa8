"""Write a captured ATen fx graph into the current xlgraph graph, node by node.

Before converting anything, every node is checked against the table, so one error lists all the
unsupported ops of a model with their source lines. Each node then goes through its
``Conversion``: torch's type promotion is applied to its tensor inputs when the entry asks for
it, and its results are cast to the dtypes torch's own meta data gives them (64-bit types run
as 32-bit, as in PopTorch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from xlgraph import dtypes, ops
from xlgraph.errors import XlgraphError
from xlgraph.poptorch.capture import module_path, source_line
from xlgraph.poptorch.conversions import CONVERSIONS
from xlgraph.poptorch.masks import MaskPlan, plan
from xlgraph.poptorch.support import SUPPORT_PAGE, Error
from xlgraph.poptorch.table import op_name
from xlgraph.poptorch.util import Unsupported, torch_to_numpy, xlgraph_dtype
from xlgraph.tensor import Tensor, constant, graph_input
from xlgraph.training import SEED_SPEC

__all__ = ["Context", "UnsupportedOpError", "convert_graph", "source_line", "SUPPORT_PAGE"]



class UnsupportedOpError(XlgraphError, NotImplementedError):
    """Torch operations (or argument values) that the frontend cannot convert."""


class SeedInput:
    """A program's seed input, created when the first random op asks for it and split once per
    random op (the seed source a ``Context`` takes)."""

    def __init__(self) -> None:
        self.input: Tensor | None = None
        self._state: Tensor | None = None

    def __call__(self) -> Tensor:
        if self.input is None:
            self.input = self._state = graph_input(SEED_SPEC.shape, SEED_SPEC.dtype, "seed")
        this, self._state = ops.split_random_seed(self._state)
        return this


class Context:
    """What conversions see: the mode, the node being converted, a seed source, and whether
    mixed float16/float32 operands compute in float16 (PopTorch's ``FloatDowncastToHalf``)."""

    def __init__(self, training: bool, seed: Callable[[], Tensor] | None = None,
                 downcast_half: bool = False) -> None:
        self.training = training
        self.downcast_half = downcast_half
        self._seed = seed
        self.node: torch.fx.Node | None = None
        self.mutations: dict[torch.fx.Node, Tensor] = {}
        self.masks = MaskPlan()

    def mutate(self, arg: int, value: Tensor) -> None:
        """Record that the current op updates its argument ``arg`` in place to ``value``."""
        target = self.node.args[arg]
        if isinstance(target, torch.fx.Node):
            self.mutations[target] = value

    @property
    def val(self) -> Any:
        """torch's fake value of the current node's result (shape and dtype)."""
        return self.node.meta["val"]

    def next_seed(self) -> Tensor:
        """A fresh ``uint32[2]`` seed for one random op."""
        if self._seed is None:
            raise Unsupported("random ops here (no seed source)")
        return self._seed()


def _torch_name(node: torch.fx.Node) -> str:
    """The torch-level call that produced ``node`` (``torch.sin``, ``F.conv2d``), if recorded."""
    fn = node.meta.get("torch_fn")
    return f" from {fn[1].split('.')[-1]}" if fn else ""


def _writes_first(target: Any) -> bool:
    """Whether an ATen op updates its first argument in place (``add_``, ``copy_``)."""
    schema = getattr(target, "_schema", None)
    info = schema.arguments[0].alias_info if schema is not None and schema.arguments else None
    return info is not None and info.is_write


def conversion_of(target: Any) -> Any:
    """The table entry of an fx target; an in-place op (``aten.add_.Tensor``) without its own
    entry uses its functional form's (``aten.add.Tensor``)."""
    name = op_name(target)
    if name in CONVERSIONS or not _writes_first(target):
        return CONVERSIONS.get(name)
    namespace, packet, overload = name.split(".")
    return CONVERSIONS.get(f"{namespace}.{packet.rstrip('_')}.{overload}")


def check_supported(graph: torch.fx.Graph, what: str, skip: Iterable[torch.fx.Node] = ()
                    ) -> None:
    """Raise one ``UnsupportedOpError`` listing every unconverted op of ``graph`` (less the
    nodes of ``skip``)."""
    missing: dict[tuple[str, str], str] = {}
    skip = set(skip)
    for node in graph.nodes:
        if node.op == "call_function" and node not in skip and conversion_of(node.target) is None:
            key = (op_name(node.target), source_line(node))
            missing.setdefault(key, f"  {key[0]}{_torch_name(node)} at {module_path(node)}, "
                                    f"{key[1]}")
    if missing:
        raise UnsupportedOpError(
            f"{what} uses {len(missing)} operation(s) the PopTorch frontend does not convert "
            f"(see {SUPPORT_PAGE} for what is supported):\n" + "\n".join(missing.values()))


def _fail(node: torch.fx.Node, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"{op_name(node.target)}{_torch_name(node)} ({why}) at {module_path(node)}, "
        f"{source_line(node)} (see {SUPPORT_PAGE})")


def _tensor_positions(args: tuple[Any, ...], promote: Any) -> Iterable[int]:
    if promote is True or promote == "result":
        return range(len(args))
    return (i for i in promote if i < len(args))


def _promoted_dtype(node: torch.fx.Node, promote: Any) -> Any:
    """The dtype torch computes ``node`` in: its float result dtype, else the inputs' common
    dtype by torch's promotion rules (0-d tensors and Python numbers weigh less)."""
    out = node.meta.get("val")
    if isinstance(out, torch.Tensor) and (out.dtype.is_floating_point or promote == "result"):
        return out.dtype
    values = []
    for i in _tensor_positions(node.args, promote):
        arg = node.args[i]
        for a in (arg if isinstance(arg, list | tuple) else [arg]):
            if isinstance(a, torch.fx.Node):
                values.append(a.meta["val"])
            elif isinstance(a, bool | int | float):
                values.append(a)
    if not values:
        return None
    return elementwise_dtypes(
        *values, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def _cast(value: Any, dtype: Any) -> Any:
    if isinstance(value, Tensor) and value.dtype != dtype:
        return ops.cast(value, dtype)
    if isinstance(value, list | tuple):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _floating(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_floating(v) for v in value) and bool(value)
    return isinstance(value, Tensor) and value.dtype.is_floating_point


def _promote(node: torch.fx.Node, args: tuple[Any, ...], promote: Any) -> tuple[Any, ...]:
    dtype = _promoted_dtype(node, promote)
    if dtype is None:
        return args
    target = xlgraph_dtype(dtype)
    args = list(args)
    for i in _tensor_positions(args, promote):
        args[i] = _cast(args[i], target)
    return tuple(args)


# ops whose result dtype the user chose (``x.float()``): FloatDowncastToHalf leaves them be
_EXPLICIT_DTYPE = ("aten._to_copy.default", "prims.convert_element_type.default")


def _downcast(node: torch.fx.Node, args: tuple[Any, ...], ctx: Context) -> bool:
    """PopTorch's ``FloatDowncastToHalf``: whether ``node`` has a float16 operand where torch
    computes in float32, so it runs (and results) in float16."""
    val = node.meta.get("val")
    if not ctx.downcast_half or op_name(node.target) in _EXPLICIT_DTYPE or not (
            isinstance(val, torch.Tensor) and val.dtype == torch.float32):
        return False
    flat = [a for arg in args for a in (arg if isinstance(arg, list | tuple) else [arg])]
    return any(isinstance(a, Tensor) and a.dtype == dtypes.float16 for a in flat)


def _match(value: Any, val: Any, lanes: bool = False, half: bool = False) -> Any:
    """``value`` cast to the dtype of torch's fake result ``val`` (recursively for tuples),
    float16 in place of float32 when ``half``; its shape must be ``val``'s unless it holds the
    lanes of a mask selection."""
    if isinstance(value, Tensor) and isinstance(val, torch.Tensor):
        want = xlgraph_dtype(val.dtype)
        want = dtypes.float16 if half and want == dtypes.float32 else want
        if not lanes and tuple(val.shape) != value.shape:
            raise XlgraphError(f"conversion produced shape {value.shape}, torch gives "
                               f"{tuple(val.shape)}")
        return value if value.dtype == want else ops.cast(value, want)
    if isinstance(value, list | tuple) and isinstance(val, list | tuple):
        return type(value)(_match(v, m, lanes, half) for v, m in zip(value, val))
    return value


def convert_node(node: torch.fx.Node, env: dict[torch.fx.Node, Any], ctx: Context) -> Any:
    """The xlgraph value of one ``call_function`` node (an in-place op also rebinds the value
    of the tensor it updates, and reports it as a mutation)."""
    if node in ctx.masks.symbolic:
        return None
    if ctx.masks.root(node):
        return env[node.args[0]]  # x[mask]: every lane of x
    conversion = conversion_of(node.target)
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    if any(a is None and isinstance(n, torch.fx.Node) for a, n in zip(args, node.args)):
        return None  # reads an output xlgraph does not compute (pooling indices): unused
    half = _downcast(node, args, ctx)
    if conversion.promote:
        args = _promote(node, args, conversion.promote)
    if half:
        args = tuple(_cast(a, dtypes.float16) if _floating(a) else a for a in args)
    ctx.node = node
    try:
        out = _match(conversion.fn(ctx, *args, **kwargs), node.meta.get("val"),
                     node in ctx.masks.lanes, half)
        if _writes_first(node.target) and isinstance(node.args[0], torch.fx.Node):
            env[node.args[0]] = out
            ctx.mutations[node.args[0]] = out
        return out
    except (Unsupported, TypeError, KeyError) as exc:
        raise _fail(node, f"unsupported arguments: {exc}") from exc
    except Error:
        raise  # PopTorch's own refusal, as PopTorch words it
    except XlgraphError as exc:
        raise _fail(node, str(exc)) from exc


def convert_graph(gm: torch.fx.GraphModule, inputs: Iterable[Any], ctx: Context,
                  what: str = "the model") -> tuple[list[Any], dict[torch.fx.Node, Any]]:
    """Convert ``gm``'s graph into the current xlgraph graph.

    Args:
        gm: the captured module; ``get_attr`` nodes read constants from it.
        inputs: one value per placeholder (xlgraph tensors, or Python values).
        ctx: the conversion context.

    Returns:
        the flattened output values, and every node's value.
    """
    ctx.masks = plan(gm.graph)
    check_supported(gm.graph, what, ctx.masks.symbolic)
    env: dict[torch.fx.Node, Any] = {}
    values = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(values)
        elif node.op == "get_attr":
            env[node] = constant(torch_to_numpy(getattr(gm, node.target),
                                                f"constant {node.target!r}"))
        elif node.op == "call_function":
            env[node] = convert_node(node, env, ctx)
        elif node.op == "output":
            out = torch.fx.node.map_arg(node.args[0], env.__getitem__)
            return list(out) if isinstance(out, list | tuple) else [out], env
    raise XlgraphError("captured graph has no output")
