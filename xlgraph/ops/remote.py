"""``remote_load``, ``remote_load_`` and ``remote_store``: moving entries of a remote buffer
(``xlgraph.remote``) in and out of the program. Offsets are ints or int scalar tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.core.remote_buffer import RemoteBuffer
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply, apply1, register
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["remote_load", "remote_load_", "remote_store"]


def _entry_spec(buffer: RemoteBuffer) -> TensorSpec:
    return TensorSpec(buffer.tensor_shape, buffer.tensor_dtype, buffer.meta_shape)


def _check_offset(*offsets: TensorSpec) -> None:
    for o in offsets:
        if o.shape != () or not o.dtype.is_int:
            raise DTypeError(f"a remote buffer offset must be an int scalar, got {o}")


def _load_infer(*offsets: TensorSpec, buffer: RemoteBuffer, offset: int | None) -> TensorSpec:
    _check_offset(*offsets)
    return _entry_spec(buffer)


def _store_infer(t: TensorSpec, *offsets: TensorSpec, buffer: RemoteBuffer,
                 offset: int | None) -> tuple[TensorSpec, ...]:
    _check_offset(*offsets)
    if t.shape != buffer.tensor_shape or t.dtype is not buffer.tensor_dtype:
        raise ShapeError(f"{buffer} holds {buffer.tensor_dtype.name}"
                         f"{list(buffer.tensor_shape)}, got {t}")
    return ()


def _load_into_infer(t: TensorSpec, *offsets: TensorSpec, buffer: RemoteBuffer,
                     offset: int | None) -> TensorSpec:
    _store_infer(t, *offsets, buffer=buffer, offset=offset)
    return t


def _entry(buffer: RemoteBuffer, offsets: tuple[np.ndarray, ...], offset: int | None) -> int:
    """The entry a run reaches: a tensor offset is range-checked here, so -1 never wraps."""
    if not offsets:
        return offset  # type: ignore[return-value] - checked when the op was built
    return buffer.check_entry(offsets[0].item(), "the offset tensor's value")


def _replicas(ctx: Any, buffer: RemoteBuffer, offsets: tuple[np.ndarray, ...],
              offset: int | None) -> tuple[Any, Any]:
    if not offsets:
        return np.arange(ctx.local), offset
    index = offsets[0].astype(np.intp)
    bad = (index < 0) | (index >= buffer.entries)
    if bad.any():
        buffer.check_entry(index[bad].flat[0].item(), "the offset tensor's value")
    return np.arange(ctx.local), index


def _load(*offsets: np.ndarray, buffer: RemoteBuffer, offset: int | None) -> np.ndarray:
    return buffer.storage[_entry(buffer, offsets, offset), ...].copy()


def _load_replicated(ctx: Any, *offsets: np.ndarray, buffer: RemoteBuffer,
                     offset: int | None) -> np.ndarray:
    return buffer.storage[_replicas(ctx, buffer, offsets, offset)]


def _store(t: np.ndarray, *offsets: np.ndarray, buffer: RemoteBuffer,
           offset: int | None) -> tuple[()]:
    buffer.storage[_entry(buffer, offsets, offset)] = t
    return ()


def _store_replicated(ctx: Any, t: np.ndarray, *offsets: np.ndarray, buffer: RemoteBuffer,
                      offset: int | None) -> tuple[()]:
    buffer.storage[_replicas(ctx, buffer, offsets, offset)] = t
    return ()


def _load_into(t: np.ndarray, *offsets: np.ndarray, buffer: RemoteBuffer,
               offset: int | None) -> np.ndarray:
    np.copyto(t, buffer.storage[_entry(buffer, offsets, offset), ...])
    return t


def _load_into_replicated(ctx: Any, t: np.ndarray, *offsets: np.ndarray, buffer: RemoteBuffer,
                          offset: int | None) -> np.ndarray:
    np.copyto(t, buffer.storage[_replicas(ctx, buffer, offsets, offset)])
    return t


def _buffer() -> RemoteBuffer:
    from xlgraph import dtypes

    return RemoteBuffer((3, 4), dtypes.float32, entries=2)


_REMOTE_LOAD = OpDef("remote_load", _load_infer, _load, side_effect=True,
                     replicated=_load_replicated, replica="per_replica",
                     samples=lambda rng: [Sample((_buffer(), 1))])
_REMOTE_LOAD_ = OpDef("remote_load_", _load_into_infer, _load_into, inplace_of=0,
                      side_effect=True, replicated=_load_into_replicated,
                      replica="per_replica",
                      samples=lambda rng: [Sample((_buffer(), 0, rng.normal(size=(3, 4))))])
_REMOTE_STORE = OpDef("remote_store", _store_infer, _store, side_effect=True,
                      replicated=_store_replicated, replica="per_replica",
                      samples=lambda rng: [Sample((_buffer(), 1, rng.normal(size=(3, 4))))])


def _split(buffer: RemoteBuffer, offset: int | Tensor) -> tuple[list[Tensor], dict[str, Any]]:
    if isinstance(offset, Tensor):
        return [offset], {"buffer": buffer, "offset": None}
    return [], {"buffer": buffer, "offset": buffer.check_entry(offset, "offset")}


@register(_REMOTE_LOAD)
def remote_load(remote_buffer: RemoteBuffer, offset: int | Tensor,
                name: str | None = None) -> Tensor:
    """A new tensor holding entry ``offset`` of ``remote_buffer``."""
    offsets, attrs = _split(remote_buffer, offset)
    return apply1(_REMOTE_LOAD, offsets, attrs, name)


@register(_REMOTE_LOAD_)
def remote_load_(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> Tensor:
    """Load entry ``offset`` of ``remote_buffer`` into ``t`` (in place); returns ``t``."""
    offsets, attrs = _split(remote_buffer, offset)
    return apply1(_REMOTE_LOAD_, [t, *offsets], attrs)


@register(_REMOTE_STORE)
def remote_store(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> None:
    """Write ``t`` to entry ``offset`` of ``remote_buffer``."""
    offsets, attrs = _split(remote_buffer, offset)
    apply(_REMOTE_STORE, [t, *offsets], attrs)
