"""Tensors and tensor specs, plus the user-facing tensor factories.

Over 400 lines: ``Tensor`` is one class with PopXL's whole tensor surface (its properties and
some forty operator and method forms, each a line that dispatches to the op library through
``core.dispatch``); the factories are the few lines that make its subclasses.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph import dtypes
from xlgraph.core.context import get_current_graph
from xlgraph.core.dispatch import provided as _op
from xlgraph.core.memmaps import kept_map
from xlgraph.dtypes import dtype
from xlgraph.errors import ShapeError
from xlgraph.utils import to_numpy

if TYPE_CHECKING:  # records above this module, by the members it reads (kinds.py)
    from xlgraph.core.kinds import GraphLike as Graph
    from xlgraph.core.kinds import OpLike as Op
    from xlgraph.replica_grouping import ReplicaGrouping
    from xlgraph.tensorlocation import TensorLocationInfo

__all__ = [
    "TensorSpec",
    "Tensor",
    "Variable",
    "Constant",
    "variable",
    "constant",
    "graph_input",
    "graph_output",
]


_MAX_ELEMENTS = 2**60  # 8-byte elements then still fit numpy's 2**63-byte limit


@dataclass(frozen=True)
class TensorSpec(Mapping):
    """Shape and dtype of a tensor; usable as ``**spec``."""

    shape: tuple[int, ...]
    dtype: dtype
    meta_shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtypes.as_dtype(self.dtype))
        if any(d < 0 for d in shape):
            raise ShapeError(f"shape {shape}: dimensions must be >= 0")
        if math.prod(shape) > _MAX_ELEMENTS:
            raise ShapeError(f"shape {shape}: {math.prod(shape):,} elements; a tensor holds at "
                             f"most 2**60")

    def __getitem__(self, key: str) -> Any:
        if key not in ("shape", "dtype", "meta_shape"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(("shape", "dtype", "meta_shape"))

    def __len__(self) -> int:
        return 3

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorSpec):
            return NotImplemented
        return self.shape == other.shape and self.dtype is other.dtype

    def to_dict(self) -> dict[str, Any]:
        """``{'shape': ..., 'dtype': ..., 'meta_shape': ...}``."""
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def to_tuple(self) -> tuple[Any, ...]:
        """``(shape, dtype, meta_shape)``."""
        return (self.shape, self.dtype, self.meta_shape)

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"


class Tensor:
    """A value in a graph: a graph input, an op output, a variable or a constant.

    Tensors are created by ops and factories, never directly.
    """

    __array_ufunc__ = None  # let numpy defer to the reflected operators
    # ``==`` and ``hash`` are object identity (Python's own, so dict and set lookups of
    # tensors, which the passes make per op, stay in C)

    def __init__(
        self, graph: Graph, name: str, spec: TensorSpec, producer: Op | None = None
    ) -> None:
        self.graph = graph
        self.name = name
        self.spec = spec
        self.producer = producer
        self.by_ref = False

    # -- description -------------------------------------------------------------------------
    @property
    def id(self) -> str:
        """The tensor's unique id in its Ir (graph-qualified name)."""
        return self.name if self.graph.is_main else f"{self.graph.name}/{self.name}"

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape."""
        return self.spec.shape

    @property
    def dtype(self) -> dtype:
        """The tensor's element type."""
        return self.spec.dtype

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """The full shape a replica shard stands for (empty when not a shard)."""
        return self.spec.meta_shape

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self.spec.shape)

    @property
    def nelms(self) -> int:
        """The number of elements."""
        return int(np.prod(self.spec.shape, dtype=np.int64))

    @property
    def ir(self) -> Any:
        """The Ir the tensor belongs to."""
        return self.graph.ir

    @property
    def scope(self) -> str:
        """The ``name_scope`` the tensor was created in (``""`` for none)."""
        return self.name.rpartition("/")[0]

    def strides(self, shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Bytes between consecutive elements along each axis of the row-major layout of
        ``shape`` (default: the tensor's): a tuple, equal to ``numpy.ndarray.strides``."""
        dims = self.shape if shape is None else tuple(shape)
        out, step = [], self.dtype.as_numpy().itemsize
        for d in reversed(dims):
            out.append(step)
            step *= int(d)
        return tuple(out[::-1])

    @property
    def location_info(self) -> TensorLocationInfo:
        """Where the tensor is stored: off chip for remote variables, sharded over replicas for
        replica-sharded ones (with PopART's ``isRemote()``, ``isSharded()`` and
        ``getRemoteBufferInfo()`` queries)."""
        from xlgraph.tensorlocation import (
            ReplicatedTensorSharding,
            TensorLocationInfo,
            TensorStorage,
        )

        remote = getattr(self, "remote", None)
        if remote is None:
            return TensorLocationInfo()
        sharding = ReplicatedTensorSharding.On if remote.sharded else ReplicatedTensorSharding.Off
        return TensorLocationInfo(TensorStorage.OffChip, sharding,
                                  (remote.buffer.remote_buffer_id, remote.offset))

    @property
    def in_sync_with_ipu(self) -> bool:
        """False from a run of the Session that owns the Ir until ``weights_to_host``."""
        owner = getattr(self.ir, "session_ref", None)  # set by Session
        session = owner() if owner is not None else None
        return session is None or not session._host_stale

    def diag(self) -> Tensor:
        """The diagonal of a 2-D tensor, as a 1-D tensor (a strided slice of its flattening).

        Raises:
            ValueError: for tensors that are not 2-D.
        """
        if self.rank != 2:
            raise ValueError(f"diag needs a 2-D tensor, {self.id} is {self.spec}")
        n, m = self.shape
        k = min(n, m)
        return _op("slice")(self.flatten(), 0, (k - 1) * (m + 1) + 1, m + 1)

    @property
    def ipu(self) -> int:
        """The IPU this tensor is on: set by ``xlgraph.ipu(n)`` and ``ops.ipu_copy``, else 0."""
        return self.producer.hints.get("ipu", 0) if self.producer else 0

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        """``ops.ipu_copy(self, destination, source)``."""
        return _op("ipu_copy")(self, destination, source)

    @property
    def tile_set(self) -> str:
        """``"io"`` for tensors made inside ``xlgraph.io_tiles()``, else ``"compute"``."""
        return self.producer.hints.get("tile_set", "compute") if self.producer else "compute"

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self.id} {self.dtype!r} {self.shape}]"

    def __len__(self) -> int:
        if not self.shape:
            raise ValueError(f"Tensor is a scalar and doesn't have a length. ({self.id})")
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(f"{self.id}: tensors are not iterable; use slicing or ops.split")

    def __contains__(self, item: object) -> bool:
        raise TypeError(f"{self.id}: tensors do not support `in`")

    def __bool__(self) -> bool:
        """PopXL's truth value: ``len(t) != 0`` (PopXL defines no ``__bool__``), so any tensor
        with a non-empty first axis is true and a scalar raises ``len``'s ValueError; it says
        nothing about the values."""
        return len(self) != 0

    # -- shape methods -----------------------------------------------------------------------
    def reshape(self, shape: tuple[int, ...]) -> Tensor:
        """``ops.reshape(self, shape)``: a new tensor."""
        return _op("reshape")(self, shape)

    def reshape_(self, shape: tuple[int, ...]) -> Tensor:
        """``ops.reshape_(self, shape)``: a view that aliases this tensor."""
        return _op("reshape_")(self, shape)

    def flatten(self) -> Tensor:
        """A 1-D copy of the tensor."""
        return _op("flatten")(self)

    def flatten_(self) -> Tensor:
        """A 1-D view that aliases this tensor."""
        return _op("flatten_")(self)

    def transpose(self, permutation: tuple[int, ...] | None = None) -> Tensor:
        """``ops.transpose(self, permutation)`` (reversed dimensions by default)."""
        return _op("transpose")(self, permutation)

    def transpose_(self, permutation: tuple[int, ...] | None = None) -> Tensor:
        """``ops.transpose_``: a transposed view that aliases this tensor."""
        return _op("transpose_")(self, permutation)

    @property
    def T(self) -> Tensor:  # noqa: N802 - PopXL's public name
        """The transpose (``transpose()``)."""
        return self.transpose()

    @property
    def T_(self) -> Tensor:  # noqa: N802 - PopXL's public name
        """The transposed view (``transpose_()``)."""
        return self.transpose_()

    def detach(self) -> Tensor:
        """``ops.detach(self)``: the same value with no gradient flowing back."""
        return _op("detach")(self)

    def detach_(self) -> Tensor:
        """``ops.detach_(self)``: the in-place form of ``detach``."""
        return _op("detach_")(self)

    def __getitem__(self, key: Any) -> Tensor:
        return _op("getitem")(self, key)

    # -- operators ---------------------------------------------------------------------------
    def _binary(self, name: str, other: Any, reflected: bool = False) -> Tensor:
        fn = _op(name)
        return fn(other, self) if reflected else fn(self, other)

    def __add__(self, other: Any) -> Tensor:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Tensor:
        return self._binary("add", other, reflected=True)

    def __iadd__(self, other: Any) -> Tensor:
        return self._binary("add_", other)

    def __sub__(self, other: Any) -> Tensor:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._binary("sub", other, reflected=True)

    def __mul__(self, other: Any) -> Tensor:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._binary("mul", other, reflected=True)

    def __truediv__(self, other: Any) -> Tensor:
        return self._binary("div", other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._binary("div", other, reflected=True)

    def __pow__(self, other: Any) -> Tensor:
        return self._binary("pow", other)

    def __rpow__(self, other: Any) -> Tensor:
        return self._binary("pow", other, reflected=True)

    def __matmul__(self, other: Any) -> Tensor:
        return self._binary("matmul", other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return self._binary("matmul", other, reflected=True)

    def __neg__(self) -> Tensor:
        return _op("negate")(self)

    def __mod__(self, other: Any) -> Tensor:
        return self._binary("fmod", other)

    def __rmod__(self, other: Any) -> Tensor:
        return self._binary("fmod", other, reflected=True)

    def __and__(self, other: Any) -> Tensor:
        return self._binary("logical_and", other)

    def __rand__(self, other: Any) -> Tensor:
        return self._binary("logical_and", other, reflected=True)

    def __or__(self, other: Any) -> Tensor:
        return self._binary("logical_or", other)

    def __ror__(self, other: Any) -> Tensor:
        return self._binary("logical_or", other, reflected=True)

    def __invert__(self) -> Tensor:
        return _op("logical_not")(self)


class Variable(Tensor):
    """A tensor of the main graph whose value persists on the device between runs."""

    def __init__(self, graph: Graph, name: str, spec: TensorSpec, data: np.ndarray) -> None:
        super().__init__(graph, name, spec)
        self.initial_data = data  # shaped ``shape_on_host``
        self.host_memmap: np.memmap | None = None  # weights_to_host writes back into it
        self._replica_grouping: ReplicaGrouping | None = None
        self.retrieval_mode = "one_per_group"

    @property
    def _memmap_arr(self) -> np.memmap | None:
        """PopXL's name for the map kept as this variable's host data (None when there is
        none); programs read it directly."""
        return self.host_memmap

    @property
    def replica_grouping(self) -> ReplicaGrouping:
        """The groups of replicas that share one value (default: all replicas, one group)."""
        return self._replica_grouping or self.graph.ir.replica_grouping()

    @property
    def shape_on_replica(self) -> tuple[int, ...]:
        """The shape each replica holds: for a replica-sharded variable, its flat shard
        (``ceil(nelms / shards)`` elements, as PopXL), else ``shape``."""
        remote = getattr(self, "remote", None)
        if remote is not None and remote.sharded:
            return tuple(remote.buffer.tensor_shape)
        return self.shape

    @property
    def shape_on_host(self) -> tuple[int, ...]:
        """The shape of host data: a leading group dimension when there are several groups."""
        groups = self.replica_grouping.num_groups
        return self.shape if groups == 1 else (groups, *self.shape)


class Constant(Tensor):
    """A tensor whose value is fixed when the graph is built."""

    def __init__(self, graph: Graph, name: str, spec: TensorSpec, data: np.ndarray) -> None:
        super().__init__(graph, name, spec)
        self.data = data


def variable(
    data: Any, dtype: dtype | None = None, name: str | None = None, downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None, retrieval_mode: str | None = None,
    log2_scale: int | None = None, nan_on_overflow: bool | None = None,
) -> Variable:
    """Create a variable in the main graph, initialised with ``data``.

    Args:
        data: host data (numpy array, nested lists, scalar, or a torch tensor).
        dtype: element type; inferred from ``data`` when None (64-bit downcast to 32-bit).
        name: tensor name; made unique in the graph.
        downcast: when inferring, store float64/int64/uint64 data as 32-bit.
        replica_grouping: replicas in one group share a value; with several groups ``data``
            has a leading dimension with one value per group. Default: one group of all.
        retrieval_mode: what ``Session.get_tensor_data`` returns: ``"one_per_group"``
            (default) or ``"all_replicas"`` (a leading replica dimension).
        log2_scale: for fp8 ``dtype`` and float data: scale by ``2**log2_scale`` before the
            cast (fp8 arrays and ``uint8`` bits are taken as they are).
        nan_on_overflow: for fp8 ``dtype``: values out of range become NaN (default) or
            saturate (False).

    Returns:
        The new Variable.

    Raises:
        GraphMismatchError: when the current graph is not the main graph.
    """
    from xlgraph.errors import GraphMismatchError, user_source_line

    graph = get_current_graph()
    if not graph.is_main:
        raise GraphMismatchError(
            f"variable {name or 'v'!r} must be created in the main graph, not in subgraph "
            f"{graph.name!r}; pass it into the subgraph as an input instead "
            f"[created at {user_source_line()}]"
        )
    # np.memmap data is kept as it is (no host copy): weights come back through the map
    arr = to_numpy(data, dtype, downcast, copy=not isinstance(data, np.memmap),
                   log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    if isinstance(arr, np.memmap):
        arr = kept_map(arr, replica_grouping, name or "v", graph.ir)
    grouped = replica_grouping is not None and replica_grouping.num_groups > 1
    if grouped and (arr.ndim == 0 or arr.shape[0] != replica_grouping.num_groups):
        raise ValueError(
            f"variable {name or 'v'!r}: data for {replica_grouping} needs a leading dimension of "
            f"{replica_grouping.num_groups} (one value per group), got shape {arr.shape} "
            f"[created at {user_source_line()}]"
        )
    retrieval_mode = getattr(retrieval_mode, "value", retrieval_mode)  # PopART's enum too
    if retrieval_mode not in (None, "one_per_group", "all_replicas"):
        raise ValueError(
            f"retrieval_mode must be 'one_per_group' or 'all_replicas', got {retrieval_mode!r}"
        )
    v = graph.add_variable(arr, name or "v", arr.shape[1:] if grouped else None)
    v._replica_grouping = replica_grouping
    v.retrieval_mode = retrieval_mode or "one_per_group"
    if isinstance(arr, np.memmap):
        v.host_memmap = arr  # as PopXL: the memmap is the variable's host copy
    return v


def constant(
    data: Any, dtype: dtype | None = None, name: str | None = None, downcast: bool = True,
    log2_scale: int | None = None, nan_on_overflow: bool | None = None,
) -> Constant:
    """Create a constant in the current graph (same arguments as ``variable``)."""
    arr = to_numpy(data, dtype, downcast, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    return get_current_graph().add_constant(arr, name or "c")


def graph_input(
    shape: tuple[int, ...], dtype: dtype, name: str | None = None, by_ref: bool = False,
    meta_shape: tuple[int, ...] | None = None,
) -> Tensor:
    """Declare a new input of the current graph.

    Args:
        shape: input shape.
        dtype: input dtype.
        name: input name; made unique in the graph.
        by_ref: when True, in-place changes made by the graph are seen by every caller.
        meta_shape: for a replica shard, the shape of the whole tensor.
    """
    spec = TensorSpec(tuple(shape), dtype, tuple(meta_shape or ()))
    return get_current_graph().add_input(spec, name or "t", by_ref)


def graph_output(t: Tensor) -> None:
    """Mark ``t`` as an output of the current graph."""
    get_current_graph().add_output(t)
