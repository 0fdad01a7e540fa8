"""Model-structure annotations: pipeline blocks, ``MultiConv``, ``NameScope``, ``CPU`` ops and
custom argument parsers.

Blocks record which IPU each part of the model runs on; the wrapper reads them after the capture
(``recorded_blocks``) to size the ipu_model. The model itself computes as if unannotated, which is
what PopTorch's pipelining computes too.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree

from xlgraph.poptorch.enums import MultiConvPlanType
from xlgraph.poptorch.support import Error

__all__ = [
    "Block", "BeginBlock", "BlockFunction", "LegacyBeginBlockFn", "removeBlocks", "MultiConv",
    "NameScope", "CPU", "ICustomArgParser", "registerCustomArgParser",
    "registerGeometricCustomArgParsers", "recorded_blocks", "static_blocks",
    "custom_arg_parser", "custom_structures",
]

_ACTIVE: list[dict[str, int | None]] = []  # one dict per capture in progress
_AUTO = {"next": 0, "enabled": False}


@contextlib.contextmanager
def recorded_blocks() -> Iterator[dict[str, int | None]]:
    """Collect ``{block user_id: ipu_id}`` of the blocks entered while capturing."""
    blocks: dict[str, int | None] = {}
    _ACTIVE.append(blocks)
    try:
        yield blocks
    finally:
        _ACTIVE.remove(blocks)


def _record(user_id: str | None, ipu_id: int | None) -> str:
    if user_id is None:
        user_id = str(_AUTO["next"])
        _AUTO["next"] += 1
    for blocks in _ACTIVE:
        blocks[str(user_id)] = ipu_id
    return str(user_id)


class Block(torch.nn.Module):
    """``with poptorch.Block("A", ipu_id=0):``: the ops inside form pipeline block "A"."""

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        super().__init__()
        self.user_id, self.ipu_id = user_id, ipu_id

    def __enter__(self) -> Block:
        _record(self.user_id, self.ipu_id)
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @staticmethod
    def useAutoId() -> None:  # noqa: N802
        """Number blocks without a ``user_id`` 0, 1, 2... from now on."""
        _AUTO.update(next=0, enabled=True)

    @staticmethod
    def start(user_id: str | None = None, ipu_id: int | None = None) -> None:
        """Start a block here (the rest of ``forward`` belongs to it)."""
        _record(user_id, ipu_id)


class _BlockHook:
    """A forward pre-hook that enters a block each time the layer runs."""

    def __init__(self, user_id: str | None, ipu_id: int | None) -> None:
        self.user_id, self.ipu_id = user_id, ipu_id

    def __call__(self, module: torch.nn.Module, args: Any) -> None:
        _record(self.user_id, self.ipu_id)

    def __repr__(self) -> str:
        return f"BeginBlock(user_id={self.user_id}, ipu_id={self.ipu_id})"


def _block_hooks(module: torch.nn.Module) -> list[tuple[int, _BlockHook]]:
    """``(handle id, hook)`` of the ``BeginBlock`` pre-hooks of ``module``."""
    return [(k, h) for k, h in module._forward_pre_hooks.items() if isinstance(h, _BlockHook)]


def BeginBlock(layer_to_call: torch.nn.Module, user_id: str | None = None,  # noqa: N802
               ipu_id: int | None = None) -> torch.nn.Module:
    """Start block ``user_id`` (on IPU ``ipu_id``) at ``layer_to_call``; returns the layer.
    The block is an ordinary forward pre-hook (copies and pickles keep it; ``module_repr``
    shows it).

    Raises:
        poptorch.Error: the layer already starts a block.
    """
    if not isinstance(layer_to_call, torch.nn.Module):
        raise TypeError(f"BeginBlock: expected a torch.nn.Module, got "
                        f"{type(layer_to_call).__name__}; use poptorch.Block for functions")
    if _block_hooks(layer_to_call):
        raise Error("module has already been assigned to a block.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


class LegacyBeginBlockFn(torch.nn.Module):
    """PopTorch 1.x's block wrapper: calls ``layer_to_call`` inside block ``user_id``."""

    def __init__(self, layer_to_call: Callable[..., Any], user_id: str | None = None,
                 ipu_id: int | None = None) -> None:
        super().__init__()
        self.layer_to_call, self.user_id, self.ipu_id = layer_to_call, user_id, ipu_id

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with Block(self.user_id, self.ipu_id):
            return self.layer_to_call(*args, **kwargs)


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None,  # noqa: N802
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: each call of the function runs in block ``user_id``."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return fn(*args, **kwargs)
        return wrapper
    return decorate


def removeBlocks(module: torch.nn.Module) -> None:  # noqa: N802
    """Remove every ``BeginBlock`` annotation from ``module`` and its children."""
    for m in module.modules():
        for key, _ in _block_hooks(m):
            del m._forward_pre_hooks[key]


def static_blocks(module: torch.nn.Module) -> dict[str, int | None]:
    """``{user_id: ipu_id}`` of the ``BeginBlock`` annotations in ``module`` (a capture that
    does not run module hooks still sees them)."""
    blocks = {}
    for m in module.modules():
        for _, hook in _block_hooks(m):
            blocks[str(hook.user_id) if hook.user_id is not None else type(m).__name__] = \
                hook.ipu_id
    return blocks


class MultiConv:
    """``with poptorch.MultiConv():``: convolutions planned together; they compute as usual and
    the plan settings are recorded."""

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}

    def _setting(self, key: str, value: Any) -> MultiConv:
        self.settings[key] = value
        return self

    def availableMemoryProportions(self, value: Any) -> MultiConv:  # noqa: N802
        """Memory proportion per convolution (recorded)."""
        return self._setting("available_memory_proportions", value)

    def partialsTypes(self, value: Any) -> MultiConv:  # noqa: N802
        """Partials type per convolution (recorded)."""
        return self._setting("partials_types", value)

    def enableConvDithering(self, value: Any) -> MultiConv:  # noqa: N802
        """Convolution dithering per convolution (recorded)."""
        return self._setting("enable_conv_dithering", value)

    def planType(self, value: MultiConvPlanType) -> MultiConv:  # noqa: N802
        """Plan the convolutions in parallel or serially (recorded)."""
        return self._setting("plan_type", MultiConvPlanType(value))

    def perConvReservedTiles(self, value: int) -> MultiConv:  # noqa: N802
        """Tiles reserved per convolution (recorded)."""
        return self._setting("per_conv_reserved_tiles", value)

    def cycleBackOff(self, value: float) -> MultiConv:  # noqa: N802
        """Cycle back-off of the joint plan (recorded)."""
        return self._setting("cycle_back_off", value)

    def __enter__(self) -> MultiConv:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class NameScope:
    """``with poptorch.NameScope("layer1"):``: prefixes op names (recorded; op names on the
    simulator come from the ops)."""

    _stack: list[str] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> NameScope:
        NameScope._stack.append(self.name)
        return self

    def __exit__(self, *exc: Any) -> None:
        NameScope._stack.pop()


class CPU:
    """``poptorch.CPU(layer, "id")``: a layer PopTorch runs on the host mid-graph.

    On the simulator the whole program runs on the host, so the layer is captured into the graph
    like the rest of ``forward``; results are the same for side-effect-free layers.
    """

    def __init__(self, layer_to_call: Callable[..., Any], ID: str) -> None:  # noqa: N803
        self.layer_to_call, self.ID = layer_to_call, ID

    def execute(self) -> None:
        """PopTorch's host entry point; nothing to do when the layer runs in the graph."""

    def registerPersistentData(self) -> None:  # noqa: N802
        """Nothing to register: no buffers cross a host boundary."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.layer_to_call(*args, **kwargs)


class ICustomArgParser(abc.ABC):
    """Flattens a custom argument type into tensors and rebuilds it (PopTorch's interface)."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> Iterator[torch.Tensor]:  # noqa: N802
        """Yield every tensor of ``struct`` in a fixed order."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any, tensor_iterator: Iterator[Any]) -> Any:
        """``original_structure`` with its tensors replaced from ``tensor_iterator``."""


_PARSERS: dict[type, ICustomArgParser] = {}


def registerCustomArgParser(arg_data_type: type, arg_parser: ICustomArgParser) -> None:  # noqa: N802
    """Use ``arg_parser`` for ``forward`` arguments of type ``arg_data_type``: the type becomes
    a torch pytree node whose leaves are the parser's tensors, so capture flattens it."""
    if not isinstance(arg_parser, ICustomArgParser):
        raise TypeError(f"registerCustomArgParser: {arg_parser!r} is not an ICustomArgParser")
    if arg_data_type not in _PARSERS:
        pytree.register_pytree_node(
            arg_data_type, _flatten, _unflatten, flatten_with_keys_fn=_flatten_with_keys,
            serialized_type_name=f"{arg_data_type.__module__}.{arg_data_type.__qualname__}")
    _PARSERS[arg_data_type] = arg_parser


class _Skeleton:
    """A custom argument without its tensors: the pytree context of its type. Two are equal
    when their types and non-tensor attributes are (torch compares the contexts of a traced
    output with the one it returns, and of each call's inputs with the compiled ones)."""

    def __init__(self, struct: Any) -> None:
        self.struct = copy.copy(struct)
        for key, value in _attributes(self.struct).items():
            if isinstance(value, torch.Tensor):
                setattr(self.struct, key, None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Skeleton) or type(other.struct) is not type(self.struct):
            return False
        try:
            return bool(_attributes(self.struct) == _attributes(other.struct))
        except Exception:  # noqa: BLE001 - attributes without a plain ==
            return self.struct is other.struct

    def __hash__(self) -> int:
        return hash(type(self.struct))

    def __repr__(self) -> str:
        return f"{type(self.struct).__name__}{_attributes(self.struct)}"


def _attributes(struct: Any) -> dict[str, Any]:
    return dict(vars(struct)) if hasattr(struct, "__dict__") else {}


def _flatten(struct: Any) -> tuple[list[Any], Any]:
    """The parser's tensors, and the structure without them."""
    return list(_PARSERS[type(struct)].yieldTensors(struct)), _Skeleton(struct)


def _flatten_with_keys(struct: Any) -> tuple[list[tuple[Any, Any]], Any]:
    leaves, context = _flatten(struct)
    return [(pytree.SequenceKey(i), leaf) for i, leaf in enumerate(leaves)], context


def _unflatten(leaves: Any, skeleton: _Skeleton) -> Any:
    return _PARSERS[type(skeleton.struct)].reconstruct(skeleton.struct, iter(leaves))


def registerGeometricCustomArgParsers() -> None:  # noqa: N802
    """Accepted: torch_geometric's Data/Batch are not converted by xlgraph."""


def custom_structures(values: Any) -> list[Any]:
    """The non-tensor parts of the custom arguments (registered types) inside ``values``: a
    call whose parts differ from the compiled ones compiles again, as other Python values do."""
    found: list[Any] = []
    pending = [pytree.tree_flatten(values)[1]]
    while pending:
        spec = pending.pop()
        if isinstance(spec.context, _Skeleton):
            found.append(spec.context)
        pending.extend(spec.children())
    return found


def custom_arg_parser(value: Any) -> ICustomArgParser | None:
    """The registered parser of ``value``'s type (or of a base class), if any."""
    for kind in type(value).__mro__:
        if kind in _PARSERS:
            return _PARSERS[kind]
    return None


def module_repr(m: torch.nn.Module) -> str:
    """torch's ``repr`` of ``m`` with each module's ``BeginBlock`` before it:
    ``(l1): BeginBlock(user_id=None, ipu_id=1) Linear(...)``."""
    extra = m.extra_repr().split("\n") if m.extra_repr() else []
    children = ["(" + name + "): " + _indent(module_repr(child))
                for name, child in m._modules.items() if child is not None]
    lines = extra + children
    body = m._get_name() + "("
    if lines:
        body += extra[0] if len(extra) == 1 and not children else \
            "\n  " + "\n  ".join(lines) + "\n"
    hooks = "".join(f"{hook!r} " for _, hook in _block_hooks(m))
    return hooks + body + ")"


def _indent(text: str) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first] + ["  " + line for line in rest])

