"""Random numbers from explicit seed tensors.

A seed is a ``uint32`` tensor of shape ``(2,)`` (the high and low words of a 64-bit key; int32
is accepted and read bitwise). Every op draws from a Philox generator keyed by those 64 bits, so
its result is a function of the seed and the shapes only: the same on every device and run.
That is what lets ``dropout``'s gradient regenerate exactly the forward's mask. Ops given the
same seed draw the same stream; derive independent seeds with ``split_random_seed`` (or
``seed + 1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, broadcast_shapes, register
from xlgraph.random_seed import create_seeds
from xlgraph.random_seed import two_uint32_to_uint64 as _key
from xlgraph.tensor import Tensor, TensorSpec

_MASK64 = (1 << 64) - 1


def _generator(seed: np.ndarray) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=_key(seed)))


def _splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _split(seed: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    base = _splitmix64(_key(seed))
    outs = []
    for i in range(n):
        z = _splitmix64(base ^ (i + 1))
        outs.append(np.array([z >> 32, z & 0xFFFFFFFF], np.uint32).astype(seed.dtype))
    return tuple(outs)


def _uniform(seed: np.ndarray, shape: tuple[int, ...], low: float, high: float,
             dtype: dtypes.dtype) -> np.ndarray:
    wide = dtype is dtypes.float64
    u = _generator(seed).random(shape, dtype=np.float64 if wide else np.float32)
    return (u * (high - low) + low).astype(dtype.as_numpy(), copy=False)


def _normal(seed: np.ndarray, shape: tuple[int, ...], mean: float, std: float,
            dtype: dtypes.dtype) -> np.ndarray:
    wide = dtype is dtypes.float64
    z = _generator(seed).standard_normal(shape, dtype=np.float64 if wide else np.float32)
    return (z * std + mean).astype(dtype.as_numpy(), copy=False)


def _shaped_dropout(x: np.ndarray, seed: np.ndarray, shape: tuple[int, ...],
                    ratio: float) -> np.ndarray:
    """Zero with probability ``ratio`` by a mask of ``shape`` (broadcast over ``x``); the mask
    is drawn in float32 whatever ``x``'s dtype, so it depends on the seed and shape only."""
    keep = _generator(seed).random(shape, dtype=np.float32) >= ratio
    scale = keep.astype(x.dtype)
    scale *= 1.0 / (1.0 - ratio)
    return x * scale


def _dropout(x: np.ndarray, seed: np.ndarray, p: float) -> np.ndarray:
    return _shaped_dropout(x, seed, x.shape, p)


# -- inference ---------------------------------------------------------------------------------
def _check_seed(seed: TensorSpec) -> None:
    if seed.shape != (2,) or seed.dtype not in (dtypes.uint32, dtypes.int32):
        raise DTypeError(f"a seed must be a uint32 tensor of shape (2,), got {seed}")


def _split_infer(seed: TensorSpec, n: int) -> tuple[TensorSpec, ...]:
    _check_seed(seed)
    if n < 1:
        raise ShapeError(f"n must be >= 1, got {n}")
    return (seed,) * n


def _random_infer(seed: TensorSpec, shape: tuple[int, ...], dtype: dtypes.dtype,
                  **_: float) -> TensorSpec:
    _check_seed(seed)
    if not dtype.is_floating_point:
        raise DTypeError(f"random values need a float dtype, got {dtype}")
    return TensorSpec(shape, dtype)


def _check_ratio(x: TensorSpec, seed: TensorSpec, ratio: float) -> None:
    _check_seed(seed)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"dropout needs float data, got {x}")
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"the dropout ratio must be in [0, 1), got {ratio}")


def _dropout_infer(x: TensorSpec, seed: TensorSpec, p: float) -> TensorSpec:
    _check_ratio(x, seed, p)
    return x


def _shaped_dropout_infer(x: TensorSpec, seed: TensorSpec, shape: tuple[int, ...],
                          ratio: float) -> TensorSpec:
    _check_ratio(x, seed, ratio)
    if broadcast_shapes(shape, x.shape) != x.shape:
        raise ShapeError(f"mask shape {shape} does not broadcast to {x}")
    return x


# -- samples -----------------------------------------------------------------------------------
def _seed(rng: np.random.Generator) -> np.ndarray:
    return create_seeds(int(rng.integers(1 << 16)))


def _random_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((_seed(rng), (3, 4))),
            Sample((_seed(rng), (2, 3, 5), 1.5, 2.5), {"dtype": dtypes.float16}),
            Sample((_seed(rng), (6,)), {"dtype": dtypes.float64})]


def _dropout_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 5)), _seed(rng), 0.3)),
            Sample((rng.normal(size=(2, 3, 4)), _seed(rng), 0.0))]


def _shaped_dropout_samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(4, 5)), _seed(rng), (1, 5), 0.5)),
            Sample((rng.normal(size=(2, 3, 4)), _seed(rng), (2, 1, 4), 0.25))]


# -- records and builders ----------------------------------------------------------------------
_SPLIT = OpDef("split_random_seed", _split_infer, _split,
               samples=lambda rng: [Sample((_seed(rng),)), Sample((_seed(rng), 3))])
_UNIFORM = OpDef("random_uniform", _random_infer, _uniform, samples=_random_samples)
_NORMAL = OpDef("random_normal", _random_infer, _normal, samples=_random_samples)
_DROPOUT = OpDef("dropout", _dropout_infer, _dropout,
                 lambda g, dy: (dropout(dy, g.x(1), g.attrs["p"]), None),
                 samples=_dropout_samples)
_SHAPED_DROPOUT = OpDef(
    "shaped_dropout", _shaped_dropout_infer, _shaped_dropout,
    lambda g, dy: (shaped_dropout(dy, g.x(1), g.attrs["shape"], g.attrs["ratio"]), None),
    samples=_shaped_dropout_samples)


@register(_SPLIT)
def split_random_seed(seed: Tensor, n: int = 2) -> list[Tensor]:
    """Derive ``n`` new seeds from ``seed`` (a hash of its 64 bits and the index).

    Idiom: ``seed, s1 = ops.split_random_seed(seed)`` threads a seed through a program.
    """
    return list(apply(_SPLIT, [seed], {"n": int(n)}))


@register(_UNIFORM)
def random_uniform(seed_tensor: Tensor, shape: tuple[int, ...], low: float = 0.0,
                   high: float = 1.0, dtype: Any = dtypes.float32) -> Tensor:
    """Uniform random values in ``[low, high)`` of ``shape``, determined by ``seed_tensor``."""
    attrs = {"shape": tuple(int(d) for d in shape), "low": float(low), "high": float(high),
             "dtype": dtypes.as_dtype(dtype)}
    return apply1(_UNIFORM, [seed_tensor], attrs)


@register(_NORMAL)
def random_normal(seed_tensor: Tensor, shape: tuple[int, ...], mean: float = 0.0,
                  std: float = 1.0, dtype: Any = dtypes.float32) -> Tensor:
    """Normal random values ``N(mean, std**2)`` of ``shape``, determined by ``seed_tensor``."""
    attrs = {"shape": tuple(int(d) for d in shape), "mean": float(mean), "std": float(std),
             "dtype": dtypes.as_dtype(dtype)}
    return apply1(_NORMAL, [seed_tensor], attrs)


@register(_DROPOUT)
def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    """Zero each element with probability ``p`` and scale survivors by ``1 / (1 - p)``.

    The mask is a function of ``seed_tensor`` and ``t.shape`` only; the gradient reuses it.
    Change the seed every step (``seed + 1`` or ``split_random_seed``) for fresh masks.
    """
    return apply1(_DROPOUT, [t, seed_tensor], {"p": float(p)})


@register(_SHAPED_DROPOUT)
def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: tuple[int, ...],
                   ratio: float) -> Tensor:
    """Dropout with a mask of ``shape`` broadcast over ``t`` (e.g. whole channels at once);
    survivors are scaled by ``1 / (1 - ratio)``."""
    attrs = {"shape": tuple(int(d) for d in shape), "ratio": float(ratio)}
    return apply1(_SHAPED_DROPOUT, [t, seed_tensor], attrs)
