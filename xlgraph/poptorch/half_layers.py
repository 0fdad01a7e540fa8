"""PopTorch's mixed precision for linear and convolution layers, applied while a model is
captured.

PopTorch converts a layer's parameters to its activation's float type: float32 weights fed a
float16 input compute in float16 and return float16 (``nn.Linear(4, 2)(x.half())``), and
``.half()`` weights fed a float32 input compute in float32. torch itself refuses these mixes
(the convolutions), or promotes them to float32 (``F.linear``). While capturing,
``F.linear``, ``F.conv1d``..``conv3d`` and ``F.conv_transpose1d``..``3d`` (also reached as
``torch.conv2d``, ...) cast their weight and bias to the input's float type first; the casts
are ops of the captured graph, so in training the gradients reach the parameters in their own
dtype (the cast's gradient casts back) and the parameters are updated in it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["activation_precision"]

_LAYERS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d")
_FLOATS = (torch.float16, torch.float32)


def _as(value: Any, dtype: torch.dtype) -> Any:
    """``value`` cast to ``dtype`` when it is a float16/float32 tensor of the other type."""
    if isinstance(value, torch.Tensor) and value.dtype in _FLOATS and value.dtype != dtype:
        return value.to(dtype)
    return value


def _following_activation(layer: Callable[..., Any]) -> Callable[..., Any]:
    """``layer`` (``F.linear``, ``F.conv2d``, ...) with its weight and bias cast to its
    input's float type."""
    @functools.wraps(layer)
    def run(input: Any, weight: Any, bias: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(input, torch.Tensor) and input.dtype in _FLOATS:
            weight, bias = _as(weight, input.dtype), _as(bias, input.dtype)
        return layer(input, weight, bias, *args, **kwargs)
    return run


@contextlib.contextmanager
def activation_precision() -> Iterator[None]:
    """Within: linear and convolution layers compute in their activation's float type."""
    functional = torch.nn.functional
    saved = [(owner, name, getattr(owner, name)) for name in _LAYERS
             for owner in (functional, torch) if hasattr(owner, name)]
    wrapped = {id(fn): _following_activation(fn) for _, _, fn in saved}
    try:
        for owner, name, fn in saved:
            setattr(owner, name, wrapped[id(fn)])
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
