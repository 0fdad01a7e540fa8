"""PopTorch's own operations: ``for_loop``, ``cond``, ``nop``, ``dynamic_slice``, ...

Operations with no torch equivalent are ``torch.library`` custom ops in the ``xlpoptorch``
namespace, so any capture (``torch.fx`` today, ATen dispatch) sees them as one op; ``CONVERSIONS``
maps each (its packet and its ``.default`` overload) to its xlgraph builder. The rest are plain
torch code: ``for_loop`` unrolls its body, ``cond`` evaluates both branches and selects,
``serializedMatMul`` multiplies (the serialisation is a memory plan with the same result).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from xlgraph import dtypes, ops
from xlgraph.poptorch.capture import capturing, capturing_training
from xlgraph.poptorch.enums import MatMulSerializationMode, OverlapMode
from xlgraph.poptorch.support import Error, refuse

__all__ = [
    "CONVERSIONS", "cond", "custom_op", "dynamic_slice", "dynamic_update", "for_loop",
    "ipu_print_tensor", "nop", "recomputationCheckpoint", "serializedMatMul",
    "set_available_memory", "set_overlap_for_input", "set_overlap_for_output",
]

_NS = "xlpoptorch"


def _identity_grad(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (grad,) + (None,) * ctx.extra


def _identity_op(name: str, schema: str, extra: int) -> Any:
    """A custom op returning a copy of its first argument (gradient passed through)."""
    op = torch.library.custom_op(f"{_NS}::{name}", mutates_args=(), schema=schema)(
        lambda x, *rest: x.clone())
    op.register_fake(lambda x, *rest: torch.empty_like(x))

    def setup(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.extra = extra

    op.register_autograd(_identity_grad, setup_context=setup)
    return op


_nop = _identity_op("nop", "(Tensor x) -> Tensor", 0)
_print = _identity_op(
    "print_tensor", "(Tensor x, str title, bool print_gradient, int summarise_threshold, "
    "int edge_items, int max_line_width, int digits, str float_format, str separator, "
    "str open_bracket, str close_bracket) -> Tensor", 10)
_checkpoint = _identity_op("recomputation_checkpoint", "(Tensor x) -> Tensor", 0)
_memory = _identity_op("set_available_memory", "(Tensor x, float proportion) -> Tensor", 1)


@torch.library.custom_op(f"{_NS}::dynamic_slice", mutates_args=())
def _dynamic_slice(x: torch.Tensor, dim: int, start: torch.Tensor, size: int,
                   step: int) -> torch.Tensor:
    first = int(min(max(int(start), 0), x.shape[dim] - size))
    index = [slice(None)] * x.dim()
    index[dim] = slice(0, size, step)
    return x.narrow(dim, first, size)[tuple(index)].clone()


@_dynamic_slice.register_fake
def _(x: torch.Tensor, dim: int, start: torch.Tensor, size: int, step: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] = -(-size // step)
    return x.new_empty(shape)


@torch.library.custom_op(f"{_NS}::dynamic_update", mutates_args=())
def _dynamic_update(x: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                    size: int) -> torch.Tensor:
    first = int(min(max(int(start), 0), x.shape[dim] - size))
    out = x.clone()
    out.narrow(dim, first, size).copy_(src)
    return out


@_dynamic_update.register_fake
def _(x: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
      size: int) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op(f"{_NS}::select", mutates_args=())
def _select(condition: torch.Tensor, then: torch.Tensor, otherwise: torch.Tensor) -> torch.Tensor:
    return torch.where(condition.bool(), then, otherwise)


@_select.register_fake
def _(condition: torch.Tensor, then: torch.Tensor, otherwise: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(then)


def _select_grad(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    keep = ctx.saved_tensors[0].bool()
    return None, grad * keep, grad * ~keep


_select.register_autograd(_select_grad, setup_context=lambda ctx, inputs, output:
                          ctx.save_for_backward(inputs[0]))


# -- the user-facing functions ---------------------------------------------------------------------
def nop(tensor: torch.Tensor) -> torch.Tensor:
    """An identity the compiler keeps (PopTorch uses it to stop op fusion)."""
    return _nop(tensor)


def ipu_print_tensor(tensor: torch.Tensor, title: str = "", print_gradient: bool = True,
                     summarise_threshold: int = 1000, edge_items: int = 3,
                     max_line_width: int = 80, digits: int = 4, float_format: str = "auto",
                     separator: str = ", ", open_bracket: str = "(",
                     close_bracket: str = ")") -> torch.Tensor:
    """Print ``tensor`` (and its gradient) to stderr each time the compiled model runs, as
    ``<title>: <values>`` formatted by the arguments; returns it (use the result)."""
    return _print(tensor, title, print_gradient, summarise_threshold, edge_items,
                  max_line_width, digits, float_format, separator, open_bracket, close_bracket)


def recomputationCheckpoint(*tensors: torch.Tensor) -> Any:  # noqa: N802
    """Mark tensors as recomputation checkpoints (an identity: the simulator keeps every
    activation, so nothing is recomputed); returns them as given (one tensor, or a tuple)."""
    out = tuple(_checkpoint(t) for t in tensors)
    return out[0] if len(out) == 1 else out


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float,
                         ) -> torch.Tensor:
    """Set the memory proportion for the matmul/convolution producing ``tensor`` (recorded)."""
    if not 0.0 < available_memory_proportion <= 1.0:
        raise ValueError(f"set_available_memory: proportion {available_memory_proportion} "
                         f"must be in (0, 1]")
    return _memory(tensor, float(available_memory_proportion))


def set_overlap_for_input(input_tensors: Any, mode: OverlapMode) -> Any:
    """Accepted and ignored: the simulator does not overlap host IO with compute."""
    OverlapMode(mode)
    return input_tensors


def set_overlap_for_output(output_tensors: Any, mode: OverlapMode) -> Any:
    """Accepted and ignored: the simulator does not overlap host IO with compute."""
    OverlapMode(mode)
    return output_tensors


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int,
                  step: int) -> torch.Tensor:
    """Every ``step``-th of the ``size`` elements of ``tensor`` along ``dim`` from the run-time
    index ``start`` (a tensor; the region is clamped to fit): ``ceil(size / step)`` elements.

    Raises:
        poptorch.Error: as PopTorch, a non-int ``dim``/``size``/``step``; when compiled, a
            ``size`` below 1, a ``step`` below 1 or a ``size`` that does not divide the dim.
    """
    _check_ints(dim, size, step)
    dim = _dim("dynamic_slice", tensor, dim)
    if _check_size(size, step) and tensor.shape[dim] % size:
        raise Error(f"The size of the slice ({size}) must be a factor of the slicing "
                    f"dimension ({tensor.shape[dim]}).")
    return _dynamic_slice(tensor, dim, _start(start), size, step)


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int,  # noqa: A002
                   start: torch.Tensor, size: int) -> torch.Tensor:
    """A copy of ``input`` whose ``dynamic_slice(input, dim, start, size, 1)`` region is
    ``src``.

    Raises:
        poptorch.Error: as PopTorch, ``src`` of another rank or dtype than ``input``; when
            compiled, a ``size`` below 1.
        ValueError: ``src``'s shape is not ``input``'s with ``size`` in ``dim``.
    """
    _check_ints(dim, size)
    if input.dim() != src.dim():
        raise Error(f"input and src tensors must have same dimensionality. ({input.dim()}) vs "
                    f"({src.dim()})")
    if input.dtype != src.dtype:
        raise Error(f"input and src tensor must have same dtype. ({input.dtype} vs "
                    f"{src.dtype})")
    dim = _dim("dynamic_update", input, dim)
    _check_size(size, 1)
    expected = list(input.shape)
    expected[dim] = size
    if list(src.shape) != expected:
        raise ValueError(f"dynamic_update: src of shape {tuple(src.shape)} must have the shape "
                         f"of input {tuple(input.shape)} with size {size} in dim {dim}: "
                         f"{tuple(expected)}")
    return _dynamic_update(input, src, dim, _start(start), size)


def _check_ints(dim: Any, size: Any, step: Any = 1) -> None:
    for value, what in ((dim, "Dimension"), (size, "Size"), (step, "Step")):
        if not isinstance(value, int):
            raise Error(f"{what} must be an integer.")


def _check_size(size: int, step: int) -> bool:
    """PopTorch's compile-time checks of a slice's ``size`` and ``step`` (only while the
    model is captured: torch runs any size on the host); whether they ran."""
    if not capturing():
        return False
    if size == 0:
        raise Error("The start and end of a slice must be different.")
    if size < 0:
        raise Error("Taking a slice of a tensor with the end less than the start is not "
                    "supported.")
    if step < 1:
        raise Error("Slicing step must be at least 1")
    return True


def _dim(op: str, tensor: torch.Tensor, dim: int) -> int:
    """``dim`` of ``tensor``, a negative one counted from the end."""
    if not -tensor.dim() <= dim < tensor.dim():
        raise ValueError(f"{op}: dim {dim} is out of range for a tensor of rank {tensor.dim()}")
    return dim % tensor.dim()


def _start(start: Any) -> Any:
    """A run-time index stays a tensor (or a traced proxy); a Python int becomes one."""
    return start if hasattr(start, "shape") or hasattr(start, "node") else torch.tensor(start)


def _inference_only(name: str) -> None:
    if capturing_training():
        raise Error(f"poptorch.{name}() is only supported in inference.")


def for_loop(count: int, body: Callable[..., Any], inputs: list[torch.Tensor],
             ) -> list[torch.Tensor]:
    """Run ``body(*inputs)`` ``count`` times, feeding each result to the next; returns the
    last results as a list (the loop is unrolled into the graph). The inputs are passed by
    value: in-place changes the body makes never reach them.

    Raises:
        ValueError: ``inputs`` is not a list of tensors (PopTorch's words).
        poptorch.Error: in a ``trainingModel`` (inference only, as PopTorch).
    """
    what = "poptorch.for_loop expects input tensors (inputs) to be a list of tensors."
    if not isinstance(inputs, list):
        raise ValueError(f"{what} (Object is not list)")
    for i, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{what} (Object contained in list at index {i} is not "
                             f"torch.tensor)")
    _inference_only("for_loop")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"for_loop: count must be a non-negative int, got {count!r}")
    values = [t.clone() for t in inputs]
    for _ in range(count):
        out = body(*values)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(out) != len(values):
            raise ValueError(f"for_loop: the body returned {len(out)} tensors for "
                             f"{len(values)} inputs")
        values = out
    return values


def cond(condition: torch.Tensor, then_body: Callable[..., Any], then_inps: Sequence[Any],
         else_body: Callable[..., Any], else_inps: Sequence[Any]) -> list[torch.Tensor]:
    """``then_body(*then_inps)`` where ``condition`` holds, else ``else_body(*else_inps)``.

    Both branches are evaluated and the outputs selected, so the branches must be free of side
    effects and return tensors of the same shapes.

    Raises:
        poptorch.Error: in a ``trainingModel`` (inference only, as PopTorch).
    """
    _inference_only("cond")
    then = then_body(*then_inps)
    other = else_body(*else_inps)
    then = list(then) if isinstance(then, (list, tuple)) else [then]
    other = list(other) if isinstance(other, (list, tuple)) else [other]
    if len(then) != len(other):
        raise ValueError(f"cond: the branches return {len(then)} and {len(other)} tensors")
    return [_select(condition, a, b) for a, b in zip(then, other)]


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor,  # noqa: N802
                     mode: MatMulSerializationMode, factor: int = 0,
                     keep_precision: bool = False) -> torch.Tensor:
    """``lhs @ rhs``; the serialisation ``mode`` and ``factor`` plan memory on the IPU and do
    not change the result, so the simulator multiplies in one op."""
    mode = MatMulSerializationMode(mode)
    if mode != MatMulSerializationMode.Disabled and factor < 1:
        raise ValueError(f"serializedMatMul: factor must be >= 1 with {mode}, got {factor}")
    return lhs @ rhs


def custom_op(inputs: Sequence[torch.Tensor], name: str, domain: str, domain_version: int,
              example_outputs: Sequence[torch.Tensor], attributes: dict[str, Any] | None = None,
              ) -> list[torch.Tensor]:
    """Run custom op ``name`` when it is an op xlgraph converts (``Relu``, ``Gelu``, ...).

    The name is looked up case-insensitively among torch's functions (``torch.relu``,
    ``torch.nn.functional.gelu``) and called with ``inputs`` and ``attributes`` as keywords;
    PopART custom ops written in C++ are refused with one line.
    """
    fn = _torch_function(name)
    if fn is None:
        refuse(f"custom_op({name!r}, domain={domain!r})",
               "only ops xlgraph has can run; C++ PopART custom ops cannot be loaded")
    out = fn(*inputs, **(attributes or {}))
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(out) != len(example_outputs):
        raise ValueError(f"custom_op {name!r}: returned {len(out)} outputs, "
                         f"example_outputs has {len(example_outputs)}")
    return out


def _torch_function(name: str) -> Callable[..., Any] | None:
    key = name.lower()
    for owner in (torch, torch.nn.functional):
        for attr in dir(owner):
            if attr.lower() == key and not attr.startswith("_"):
                value = getattr(owner, attr)
                if callable(value) and not isinstance(value, type):
                    return value
    return None


# -- conversions to xlgraph ------------------------------------------------------------------------
def _index(start: Any) -> Any:
    return ops.reshape(ops.cast(start, dtypes.uint32), (1,))


def _convert_dynamic_slice(ctx: Any, x: Any, dim: int, start: Any, size: int,
                           step: int = 1) -> Any:
    part = ops.dynamic_slice(x, _index(start), [dim], [size])
    return part if step == 1 else ops.slice(part, [0], [size], [step], [dim])


def _convert_dynamic_update(ctx: Any, x: Any, src: Any, dim: int, start: Any, size: int) -> Any:
    return ops.dynamic_update(x, _index(start), src, [dim], [size])


def _convert_print(ctx: Any, x: Any, title: str, print_gradient: bool, *formatting: Any) -> Any:
    names = ("summarise_threshold", "edge_items", "max_line_width", "digits", "float_format",
             "separator", "open_bracket", "close_bracket")
    return ops.print_tensor(x, title or None, print_gradient=print_gradient,
                            **dict(zip(names, formatting)))


def _convert_select(ctx: Any, condition: Any, then: Any, otherwise: Any) -> Any:
    if condition.dtype != dtypes.bool:
        condition = ops.cast(condition, dtypes.bool)
    return ops.where(condition, then, otherwise)


def _both(name: str, builder: Callable[..., Any]) -> dict[Any, Callable[..., Any]]:
    """The builder under the op's packet (``torch.fx``) and its overload (ATen capture)."""
    packet = getattr(getattr(torch.ops, _NS), name)
    return {packet: builder, packet.default: builder}


CONVERSIONS: dict[Any, Callable[..., Any]] = {
    **_both("nop", lambda ctx, x: ops.identity(x)),
    **_both("recomputation_checkpoint", lambda ctx, x: ops.identity(x)),
    **_both("set_available_memory", lambda ctx, x, proportion: ops.identity(x)),
    **_both("print_tensor", _convert_print),
    **_both("dynamic_slice", _convert_dynamic_slice),
    **_both("dynamic_update", _convert_dynamic_update),
    **_both("select", _convert_select),
}
