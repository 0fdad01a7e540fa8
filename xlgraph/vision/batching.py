"""Transforms applied to a whole batch of raw images at once, with the per-image results.

A dataset that keeps its pixels in one uint8 array (``MNIST``, ``FashionMNIST``, ``CIFAR10``)
can transform a batch in a few array operations instead of one PIL image at a time. Only steps
whose results are known to be the same either way qualify: ``ToTensor`` or ``PILToTensor``
first, then ``Normalize`` and ``ConvertImageDtype`` (exact types: a subclass may change what a
call does). These are elementwise per channel, so on uint8 pixels the whole chain is a table of
256 values per channel, computed once by running the steps themselves on the 256 pixel values
(the same float32 operations, hence the same bits) and then looked up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph.vision.transforms import (
    Compose,
    ConvertImageDtype,
    Normalize,
    PILToTensor,
    ToTensor,
    _torch,
)

__all__ = ["batched"]

_ELEMENTWISE = (Normalize, ConvertImageDtype)  # after the first step: elementwise per channel
_TABLES: dict[tuple[Any, ...], tuple[np.ndarray, bool]] = {}  # per chain and channels
_MAX_TABLES = 64


def batched(transform: Callable[[Any], Any] | None) -> Callable[[np.ndarray], Any] | None:
    """``transform`` applied to a whole batch of raw images at once, or None.

    The batch form takes pixels ``(N, H, W)`` or ``(N, H, W, C)`` (uint8, as the datasets store
    them) and returns what stacking the per-image results along a new first axis gives, bit for
    bit. None when some step has no batch form (PIL geometry, random flips, ``Lambda``...): the
    caller then transforms image by image.
    """
    steps = _flatten(transform)
    if not steps or type(steps[0]) not in (ToTensor, PILToTensor):
        return None
    if any(type(step) not in _ELEMENTWISE for step in steps[1:]):
        return None
    key = tuple(_key(step) for step in steps)

    def run(pixels: np.ndarray) -> Any:
        channels = 1 if pixels.ndim == 3 else pixels.shape[-1]
        if pixels.dtype != np.uint8:
            return _apply(steps, pixels)
        return _look_up(*_table(steps, key, channels), pixels)

    return run


def _flatten(transform: Any) -> list[Any]:
    if type(transform) is Compose:
        return [step for inner in transform.transforms for step in _flatten(inner)]
    return [] if transform is None else [transform]


def _key(step: Any) -> tuple[Any, ...]:
    """What determines the step's values: its type and settings."""
    if type(step) is Normalize:
        return ("Normalize", tuple(map(float, step.mean)), tuple(map(float, step.std)))
    if type(step) is ConvertImageDtype:
        return ("ConvertImageDtype", str(step.dtype))
    return (type(step).__name__,)


def _apply(steps: list[Any], pixels: np.ndarray) -> Any:
    value = steps[0].batch(pixels)
    for step in steps[1:]:
        value = step(value)
    return value


def _table(steps: list[Any], key: tuple[Any, ...], channels: int) -> tuple[np.ndarray, bool]:
    """``(values (C, 256), as torch)``: the chain's result for every uint8 value per channel,
    computed by the steps themselves."""
    entry = (key, channels)
    if entry not in _TABLES:
        if len(_TABLES) >= _MAX_TABLES:
            _TABLES.clear()
        values = np.arange(256, dtype=np.uint8)[None, None, :, None]  # one image 1 x 256
        out = _apply(steps, np.ascontiguousarray(np.repeat(values, channels, axis=3)))
        torch = _torch()
        as_torch = torch is not None and isinstance(out, torch.Tensor)
        table = out.numpy() if as_torch else np.asarray(out)
        _TABLES[entry] = (np.ascontiguousarray(table[0, :, 0, :]), as_torch)
    return _TABLES[entry]


def _look_up(table: np.ndarray, as_torch: bool, pixels: np.ndarray) -> Any:
    """``(N, C, H, W)``: each pixel's value from ``table`` (C, 256)."""
    if pixels.ndim == 3:
        out = table[0].take(pixels)[:, None]  # take: twice as fast as indexing with uint8
    else:
        n, h, w, channels = pixels.shape
        out = np.empty((n, channels, h, w), table.dtype)
        for c in range(channels):
            out[:, c] = table[c].take(pixels[..., c])
    return _torch().from_numpy(out) if as_torch else out
