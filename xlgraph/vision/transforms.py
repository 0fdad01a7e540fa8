"""torchvision's transforms that PopTorch programs use, with torchvision's results.

``Compose``, ``ToTensor``, ``PILToTensor``, ``Normalize``, ``ToPILImage``, ``Resize``,
``CenterCrop``, ``RandomHorizontalFlip``, ``Lambda`` and ``ConvertImageDtype``.

``xlgraph.vision.batching.batched(transform)`` gives the same transform applied to a whole batch
of raw pixels at once, when every step has a batch form with the per-image results.

They accept and return torch tensors when torch is installed (as torchvision does) and numpy
arrays otherwise; ``ToPILImage`` needs Pillow (the ``image`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Compose", "ToTensor", "Normalize", "ToPILImage", "Resize", "CenterCrop",
           "RandomHorizontalFlip", "Lambda", "PILToTensor", "ConvertImageDtype",
           "convert_image_dtype"]


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
        return self.batch(pixels[None])[0]

    def batch(self, pixels: np.ndarray) -> Any:
        """``(N, H, W[, C])`` pixels to ``(N, C, H, W)``: the stacked per-image results."""
        chw = _channels_first(pixels)
        scaled = chw.astype(np.float32) / np.float32(255) if chw.dtype == np.uint8 else chw
        torch = _torch()
        return torch.from_numpy(scaled) if torch is not None else scaled

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _channels_first(pixels: np.ndarray) -> np.ndarray:
    """``(N, H, W[, C])`` images as a contiguous ``(N, C, H, W)`` array."""
    pixels = pixels[..., None] if pixels.ndim == 3 else pixels
    return np.ascontiguousarray(pixels.transpose(0, 3, 1, 2))


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


# -- geometry and dtype ----------------------------------------------------------------------------
def _is_pil(pic: Any) -> bool:
    return type(pic).__module__.startswith("PIL.")


def _as_chw(pic: Any) -> tuple[np.ndarray, Any]:
    """``(array (..., C?, H, W), rebuild)``: a torch tensor or array, and how to give it back."""
    torch = _torch()
    if torch is not None and isinstance(pic, torch.Tensor):
        return pic.numpy(), lambda a: torch.from_numpy(np.ascontiguousarray(a))
    return np.asarray(pic), lambda a: a


def _filter_matrix(size_in: int, size_out: int, antialias: bool) -> np.ndarray:
    """``(size_out, size_in)`` weights of bilinear resampling (PIL's and torch's antialiased
    triangle filter, widened by the scale when shrinking), rows summing to 1."""
    scale = size_in / size_out
    support = max(scale, 1.0) if antialias else 1.0
    centers = (np.arange(size_out) + 0.5) * scale
    first = np.clip((centers - support + 0.5).astype(np.int64), 0, size_in)
    last = np.clip((centers + support + 0.5).astype(np.int64), 0, size_in)
    columns = np.arange(size_in)
    distance = (columns[None, :] - centers[:, None] + 0.5) / support
    weights = np.clip(1.0 - np.abs(distance), 0.0, None)
    weights *= (columns[None, :] >= first[:, None]) & (columns[None, :] < last[:, None])
    if not antialias:  # torch's plain bilinear clamps the source coordinate at the edges
        source = np.clip(centers - 0.5, 0, size_in - 1)
        low = np.floor(source).astype(np.int64)
        high = np.minimum(low + 1, size_in - 1)
        frac = source - low
        weights = np.zeros((size_out, size_in))
        np.add.at(weights, (np.arange(size_out), low), 1.0 - frac)
        np.add.at(weights, (np.arange(size_out), high), frac)
    return weights / weights.sum(axis=1, keepdims=True)


def _output_size(height: int, width: int, size: int | Sequence[int],
                 max_size: int | None) -> tuple[int, int]:
    if not isinstance(size, int):
        if len(size) == 1:
            size = size[0]
        else:
            return int(size[0]), int(size[1])
    short, long = sorted((height, width))
    new_short, new_long = size, int(size * long / short)
    if max_size is not None:
        if max_size <= size:
            raise ValueError(f"Resize: max_size ({max_size}) must be greater than size ({size})")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_short, new_long) if height <= width else (new_long, new_short)


class Resize:
    """Resize to ``size`` (an int matches the smaller edge, keeping the aspect ratio; a pair is
    ``(h, w)``) with bilinear interpolation, as ``torchvision.transforms.Resize``.

    PIL images are resized by PIL (what torchvision does); tensors and ``(..., H, W)`` arrays by
    separable filter matrices (torch's ``interpolate(mode="bilinear", antialias=...)``).
    """

    def __init__(self, size: int | Sequence[int], interpolation: Any = "bilinear",
                 max_size: int | None = None, antialias: bool | None = True) -> None:
        mode = str(getattr(interpolation, "value", interpolation)).lower()
        if mode != "bilinear":
            raise ValueError(f"Resize: only bilinear interpolation is supported, got {mode!r}")
        self.size, self.max_size = size, max_size
        self.antialias = True if antialias is None else antialias

    def __call__(self, img: Any) -> Any:
        if _is_pil(img):
            from PIL import Image

            width, height = img.size
            h, w = _output_size(height, width, self.size, self.max_size)
            return img.resize((w, h), Image.BILINEAR)
        array, rebuild = _as_chw(img)
        height, width = array.shape[-2:]
        h, w = _output_size(height, width, self.size, self.max_size)
        rows = _filter_matrix(height, h, self.antialias)
        cols = _filter_matrix(width, w, self.antialias)
        work = array.astype(np.float64 if array.dtype == np.float64 else np.float32)
        out = np.einsum("hy,...yx,wx->...hw", rows.astype(work.dtype), work,
                        cols.astype(work.dtype), optimize=True)
        if array.dtype.kind in "iu":
            info = np.iinfo(array.dtype)
            out = np.clip(np.round(out), info.min, info.max)
        return rebuild(out.astype(array.dtype))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, interpolation=bilinear, "
                f"max_size={self.max_size}, antialias={self.antialias})")


class CenterCrop:
    """The central ``size`` (int or ``(h, w)``) region; smaller images are zero-padded first."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)

    def __call__(self, img: Any) -> Any:
        h, w = self.size
        if _is_pil(img):
            width, height = img.size
            top, left = int(round((height - h) / 2.0)), int(round((width - w) / 2.0))
            return img.crop((left, top, left + w, top + h))
        array, rebuild = _as_chw(img)
        height, width = array.shape[-2:]
        pad_h, pad_w = max(h - height, 0), max(w - width, 0)
        if pad_h or pad_w:
            spec = [(0, 0)] * (array.ndim - 2) + [(pad_h // 2, (pad_h + 1) // 2),
                                                  (pad_w // 2, (pad_w + 1) // 2)]
            array = np.pad(array, spec)
            height, width = array.shape[-2:]
        top, left = int(round((height - h) / 2.0)), int(round((width - w) / 2.0))
        return rebuild(array[..., top:top + h, left:left + w])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size})"


class RandomHorizontalFlip:
    """Mirror left-right with probability ``p`` (drawn from ``torch``'s generator, as
    torchvision, or numpy's without torch)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: Any) -> Any:
        torch = _torch()
        draw = float(torch.rand(1)) if torch is not None else np.random.random()
        if draw >= self.p:
            return img
        if _is_pil(img):
            from PIL import Image

            return img.transpose(Image.FLIP_LEFT_RIGHT)
        array, rebuild = _as_chw(img)
        return rebuild(array[..., ::-1])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p})"


class Lambda:
    """Apply a user function (``transforms.Lambda(lambda x: x * 2)``)."""

    def __init__(self, lambd: Callable[[Any], Any]) -> None:
        if not callable(lambd):
            raise TypeError(f"Lambda: argument should be callable, got {type(lambd).__name__}")
        self.lambd = lambd

    def __call__(self, img: Any) -> Any:
        return self.lambd(img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PILToTensor:
    """A PIL image to a ``(C, H, W)`` tensor of its own dtype (no scaling)."""

    def __call__(self, pic: Any) -> Any:
        pixels = np.asarray(pic)
        return self.batch(pixels[None])[0]

    def batch(self, pixels: np.ndarray) -> Any:
        """``(N, H, W[, C])`` pixels to an ``(N, C, H, W)`` tensor of their dtype."""
        chw = _channels_first(pixels)
        chw = chw if chw.flags.writeable else chw.copy()  # a PIL image's pixels are read-only
        torch = _torch()
        return torch.from_numpy(chw) if torch is not None else chw

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ConvertImageDtype:
    """Convert an image tensor's dtype, rescaling values as torchvision does: integers span
    ``[0, max]`` of their type and floats ``[0, 1]``."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype

    def __call__(self, image: Any) -> Any:
        torch = _torch()
        if torch is not None and isinstance(image, torch.Tensor):
            target = np.dtype(torch.empty((), dtype=self.dtype).numpy().dtype)
            out = convert_image_dtype(image.numpy(), target)
            return torch.from_numpy(out)
        return convert_image_dtype(np.asarray(image), np.dtype(self.dtype))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dtype={self.dtype})"


def convert_image_dtype(image: np.ndarray, dtype: Any) -> np.ndarray:
    """``torchvision.transforms.functional.convert_image_dtype`` on a numpy array."""
    source, dtype = image.dtype, np.dtype(dtype)
    if source == dtype:
        return image
    if source.kind == "f":
        if dtype.kind == "f":
            return image.astype(dtype)
        if (source, dtype) in ((np.float32, np.int32), (np.float32, np.int64),
                               (np.float64, np.int64)):
            raise RuntimeError(f"The cast from {source} to {dtype} cannot be performed safely.")
        eps = 1e-3
        top = np.iinfo(dtype).max
        return (image * (top + 1.0 - eps)).astype(dtype)
    top_in = np.iinfo(source).max
    if dtype.kind == "f":
        return (image.astype(dtype) / dtype.type(top_in))
    top_out = np.iinfo(dtype).max
    if top_in > top_out:  # keep the top bits
        return (image // ((top_in + 1) // (top_out + 1))).astype(dtype)
    return image.astype(dtype) * dtype.type((top_out + 1) // (top_in + 1))
