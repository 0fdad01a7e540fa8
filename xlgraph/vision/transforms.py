"""``Compose``, ``ToTensor``, ``Normalize`` and ``ToPILImage`` with torchvision's results.

They accept and return torch tensors when torch is installed (as torchvision does) and numpy
arrays otherwise; ``ToPILImage`` needs Pillow (the ``image`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Compose", "ToTensor", "Normalize", "ToPILImage"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


class Compose:
    """Apply ``transforms`` in order."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, value: Any) -> Any:
        for t in self.transforms:
            value = t(value)
        return value

    def __repr__(self) -> str:
        body = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"{type(self).__name__}({body}\n)"


class ToTensor:
    """A PIL image or ``(H, W[, C])`` array to a ``(C, H, W)`` float32 tensor.

    uint8 pixels are scaled to [0, 1]; other dtypes are kept as they are (torchvision's rule).
    Returns a torch tensor when torch is installed, else a numpy array.
    """

    def __call__(self, pic: Any) -> Any:
        pixels = np.asarray(pic)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if pixels.ndim != 3:
            raise TypeError(f"ToTensor: expected an image of 2 or 3 dims, got shape "
                            f"{pixels.shape}")
        chw = np.ascontiguousarray(pixels.transpose(2, 0, 1))
        scaled = chw.astype(np.float32) / np.float32(255) if chw.dtype == np.uint8 else chw
        torch = _torch()
        return torch.from_numpy(scaled) if torch is not None else scaled

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Normalize:
    """``(x - mean[c]) / std[c]`` per channel of a ``(..., C, H, W)`` tensor (not in place)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean, self.std, self.inplace = list(mean), list(std), inplace
        if any(s == 0 for s in self.std):
            raise ValueError(f"Normalize: std {self.std} contains a zero, which divides by zero")

    def __call__(self, tensor: Any) -> Any:
        torch = _torch()
        if torch is not None and isinstance(tensor, torch.Tensor):
            mean = torch.as_tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
            std = torch.as_tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
            return tensor.sub_(mean).div_(std) if self.inplace else tensor.sub(mean).div(std)
        array = np.asarray(tensor)
        mean = np.asarray(self.mean, array.dtype).reshape(-1, 1, 1)
        std = np.asarray(self.std, array.dtype).reshape(-1, 1, 1)
        return (array - mean) / std

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std})"


class ToPILImage:
    """A ``(C, H, W)`` tensor or ``(H, W, C)`` array to a PIL image (mode "L" for one channel).

    Float values are multiplied by 255 and converted to bytes as torchvision does (no clipping).
    """

    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode

    def __call__(self, pic: Any) -> Any:
        from PIL import Image

        torch = _torch()
        if torch is not None and isinstance(pic, torch.Tensor):
            if pic.dim() == 2:
                pic = pic.unsqueeze(0)
            if pic.is_floating_point():
                pic = pic.mul(255).byte()
            pixels = pic.permute(1, 2, 0).numpy()
        else:
            pixels = np.asarray(pic)
            if pixels.ndim == 2:
                pixels = pixels[:, :, None]
            if pixels.dtype.kind == "f":
                pixels = (pixels * 255).astype(np.uint8)
        if pixels.shape[2] == 1:
            return Image.fromarray(pixels[:, :, 0], mode=self.mode or "L")
        return Image.fromarray(pixels, mode=self.mode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode})"
