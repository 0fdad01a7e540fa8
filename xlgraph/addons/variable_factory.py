"""Variable factories: how to make a module's variables once its graph is built.

A module's ``build`` declares each state tensor as a graph input together with a
``VariableFactory`` that knows its initial data; ``NamedVariableFactories.init()`` then makes
the variables in the main graph (or ``init_remote`` in remote buffers).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.memmap_dir import open_map
from xlgraph.addons.named_replica_grouping import NamedReplicaGrouping, fill_none_group
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.utils import to_numpy

__all__ = [
    "VariableFactory",
    "NamedVariableFactories",
    "add_variable_input",
    "add_replica_sharded_variable_input",
]


def _default_grouping() -> popxl.ReplicaGrouping | None:
    """The current Ir's all-replica grouping, or None outside any graph."""
    try:
        ir = popxl.gir()
    except RuntimeError:
        return None
    return ir.replica_grouping()


class VariableFactory:
    """Initial data and placement for one variable.

    Args:
        data_iter: a callable returning the data, an iterator of data, or the data itself.
        dtype: the variable's dtype (default: the data's, 64-bit downcast to 32-bit).
        name: the default variable name.
        by_ref: whether the graph input is passed by reference (modified in place).
        replica_grouping: replicas of one group share a value; with several groups the data
            is drawn once per group and stacked. Default: the current Ir's all-replica
            grouping, as popxl-addons (None only when made outside any graph).
        shard_over: replicas that split the variable (replicated tensor sharding).
    """

    def __init__(self, data_iter: Callable[[], Any] | Iterable[Any],
                 dtype: popxl.dtype | None = None, name: str | None = None,
                 by_ref: bool = False, replica_grouping: popxl.ReplicaGrouping | None = None,
                 shard_over: int = 1) -> None:
        self.name = name
        self.by_ref = by_ref
        self.replica_grouping = replica_grouping if replica_grouping is not None else \
            _default_grouping()
        if isinstance(shard_over, popxl.ReplicaGrouping):  # a grouping counts its members
            shard_over = shard_over.group_size
        self.shard_over = int(shard_over or 1)
        self._pending: np.ndarray | None = None
        if callable(data_iter):
            self._source: Callable[[], Any] = data_iter
            first = self._probe(data_iter, "calling it")
        else:
            try:
                it = iter(data_iter)
            except TypeError:
                raise ValueError(f"VariableFactory {name!r}: data_iter must be a callable or an "
                                 f"iterable, got {type(data_iter).__name__}") from None
            self._source = functools.partial(next, it)
            first = self._pending = self._probe(self._source, "taking its first element")
        self.data_iter = data_iter
        self.dtype = dtype or popxl.dtypes.of_array(to_numpy(first, None, True))
        self._data_shape = tuple(np.shape(first))

    def _probe(self, source: Callable[[], Any], how: str) -> np.ndarray:
        try:
            data = source()
        except Exception as exc:  # the user's callable: report any failure as a bad source
            raise ValueError(f"VariableFactory {self.name!r}: {how} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(data, np.ndarray | np.generic | int | float | bool):
            raise ValueError(f"VariableFactory {self.name!r}: data_iter gave a "
                             f"{type(data).__name__}, expected a numpy array or a scalar")
        return np.asarray(data)

    def _draw(self, dtype: popxl.dtype | None) -> np.ndarray:
        if self._pending is not None:
            data, self._pending = self._pending, None
        else:
            data = self._source()
        return to_numpy(data, dtype, True)

    @property
    def shape(self) -> tuple[int, ...]:
        """The variable's shape on a replica: the data's shape, or one flat shard
        ``(ceil(nelms / shard_over),)`` when sharded (as popxl-addons; the whole shape is
        then ``meta_shape``)."""
        if self.shard_over > 1:
            return (math.ceil(math.prod(self._data_shape) / self.shard_over),)
        return self._data_shape

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """The whole tensor's shape when sharded, else ``()``."""
        return self._data_shape if self.shard_over > 1 else ()

    @property
    def shape_on_replica(self) -> tuple[int, ...]:
        """A replica's shape (``shape``)."""
        return self.shape

    @property
    def spec(self) -> popxl.TensorSpec:
        return popxl.TensorSpec(self.shape_on_replica, self.dtype, self.meta_shape)

    def _groups(self) -> int:
        return fill_none_group(self.replica_grouping).num_groups

    def next_data(self, empty: bool = False) -> np.ndarray:
        """The next initial value (stacked per group when there are several groups);
        zeros of the right shape when ``empty``."""
        groups = self._groups()
        if empty:
            shape = self._data_shape if groups == 1 else (groups, *self._data_shape)
            return np.zeros(shape, self.dtype.as_numpy())
        draws = [self._draw(self.dtype) for _ in range(groups)]
        for d in draws:
            if d.shape != self._data_shape:
                raise ValueError(f"variable factory {self.name!r}: data of shape {d.shape}, "
                                 f"expected {self._data_shape} like its first data")
        return draws[0] if groups == 1 else np.stack(draws)

    def create_input(self, prefix: str | None = None) -> popxl.Tensor:
        """A graph input of the current graph for this variable."""
        name = ".".join(p for p in (prefix, self.name) if p) or None
        return popxl.graph_input(self.shape_on_replica, self.dtype, name, by_ref=self.by_ref,
                                 meta_shape=self.meta_shape)

    def create_input_named(self, name: str) -> popxl.Tensor:
        """A graph input of the current graph for this variable, named ``name``."""
        return popxl.graph_input(self.shape_on_replica, self.dtype, name, by_ref=self.by_ref,
                                 meta_shape=self.meta_shape)

    def create_tensor(self, name: str | None = None, empty: bool = False,
                      memmap_dir: str | os.PathLike | None = None,
                      read_only_if_exists: bool = False) -> popxl.Variable:
        """A main-graph variable holding ``next_data()``.

        With ``memmap_dir`` the host data lives in a raw memory map ``<dir>/<name>.npy``
        (made and filled when absent; reused when present and of the variable's dtype and
        shape, read-only with ``read_only_if_exists``; see ``addons.memmap_dir``).

        Raises:
            MemmapError: the existing map holds another dtype or shape.
        """
        name = name or self.name
        if self.shard_over > 1:
            raise ValueError(f"variable {name!r} is sharded over {self.shard_over} "
                             f"replicas: make it with init_remote(named_variable_buffers(...))")
        data = self._data(name, empty, memmap_dir, read_only_if_exists)
        return popxl.variable(data, self.dtype, name, replica_grouping=self.replica_grouping)

    def _data(self, name: str, empty: bool, memmap_dir: str | os.PathLike | None,
              read_only: bool) -> np.ndarray:
        """``next_data(empty)``, or with ``memmap_dir`` the variable's map there."""
        if memmap_dir is None:
            return self.next_data(empty)
        groups = self._groups()
        shape = self._data_shape if groups == 1 else (groups, *self._data_shape)
        return open_map(Path(memmap_dir) / f"{name}.npy", name, np.dtype(self.dtype.as_numpy()),
                        shape, lambda: self.next_data(empty), read_only)

    def create_remote_tensor(self, buffer: popxl.RemoteBuffer, entry: int,
                             name: str | None = None, empty: bool = False,
                             memmap_dir: str | os.PathLike | None = None,
                             read_only_if_exists: bool = False) -> popxl.Variable:
        """A variable stored in entry ``entry`` of ``buffer`` (sharded when the buffer is);
        ``memmap_dir`` and ``read_only_if_exists`` as for ``create_tensor``."""
        name = name or self.name
        data = self._data(name, empty, memmap_dir, read_only_if_exists)
        if buffer.meta_shape:
            return popxl.remote_replica_sharded_variable(
                data, buffer, entry, self.dtype, name, replica_grouping=self.replica_grouping)
        return popxl.remote_variable(data, buffer, entry, self.dtype, name,
                                     replica_grouping=self.replica_grouping)

    def __repr__(self) -> str:
        return (f"VariableFactory({self.name!r}, {self.dtype.name}{list(self._data_shape)}"
                f"{', by_ref' if self.by_ref else ''}"
                f"{f', shard_over={self.shard_over}' if self.shard_over > 1 else ''})")


class NamedVariableFactories(DotTree[VariableFactory]):
    """Variable factories by dotted name, as ``Module.create_graph`` returns them."""

    def _each(self, prefix: str | None, make: Callable[[str, VariableFactory], Any],
              ) -> NamedTensors:
        out = {}
        for name, factory in self.to_dict().items():
            full = f"{prefix}.{name}" if prefix else name
            out[name] = make(full, factory)
        return NamedTensors.from_dict(out)

    def _sorted(self) -> NamedVariableFactories:
        keys, values = self.unpack()
        return type(self).pack(keys, values)

    def init(self, prefix: str | None = None, empty: bool = False,
             memmap_dir: str | os.PathLike | None = None,
             read_only_if_exists: bool = False) -> NamedTensors:
        """Make every variable in the main graph, in alphabetical order of the dotted names
        (so the draws from random initialisers follow that order); variable names are the
        dotted names (after ``prefix.`` when given). See ``VariableFactory.create_tensor``."""
        with popxl.gmg():
            return self._sorted()._each(prefix, lambda name, f: f.create_tensor(
                name, empty, memmap_dir, read_only_if_exists))

    def init_remote(self, buffers: DotTree, entry: int = 0, prefix: str | None = None,
                    empty: bool = False, memmap_dir: str | os.PathLike | None = None,
                    read_only_if_exists: bool = False) -> NamedTensors:
        """Make every variable in entry ``entry`` of its buffer in ``buffers`` (a tree with the
        same names, from ``named_variable_buffers``); ``memmap_dir`` as for ``init``."""
        with popxl.gmg():
            return self._sorted()._each(prefix, lambda name, f: f.create_remote_tensor(
                buffers.get(name[len(prefix) + 1:] if prefix else name), entry, name, empty,
                memmap_dir, read_only_if_exists))

    def init_zero(self) -> NamedTensors:
        """Zero tensors of every variable's replica shape, in the current graph."""
        return self._each(None, lambda name, f: ops.init(f.shape_on_replica, f.dtype, name,
                                                         "zero"))

    def init_undef(self) -> NamedTensors:
        """Uninitialised tensors of every variable's replica shape, in the current graph."""
        return self._each(None, lambda name, f: ops.init(f.shape_on_replica, f.dtype, name,
                                                         "undef"))

    @property
    def replica_groupings(self) -> NamedReplicaGrouping:
        """Every factory's replica grouping (all replicas when it has none)."""
        return NamedReplicaGrouping.from_dict(
            {k: fill_none_group(f.replica_grouping) for k, f in self.to_dict().items()})


def add_variable_input(name: str, data_iter: Any, dtype: popxl.dtype | None = None,
                       by_ref: bool = False,
                       replica_grouping: popxl.ReplicaGrouping | None = None,
                       ) -> tuple[popxl.Tensor, VariableFactory]:
    """Declare a graph input of the current graph and the factory of its variable.

    Returns:
        ``(graph input, factory)``.
    """
    factory = VariableFactory(data_iter, dtype, name, by_ref, replica_grouping)
    return factory.create_input(), factory


def add_replica_sharded_variable_input(name: str, data_iter: Any,
                                       dtype: popxl.dtype | None = None, by_ref: bool = False,
                                       replica_grouping: popxl.ReplicaGrouping | None = None,
                                       shard_over: int | None = None,
                                       ) -> tuple[popxl.Tensor, VariableFactory]:
    """As ``add_variable_input`` for a variable sharded over ``shard_over`` replicas (default:
    the group size); the input is one flat shard whose ``meta_shape`` is the whole tensor."""
    if shard_over is None:
        shard_over = fill_none_group(replica_grouping).group_size
    elif isinstance(shard_over, popxl.ReplicaGrouping):
        shard_over = shard_over.group_size
    factory = VariableFactory(data_iter, dtype, name, by_ref, replica_grouping, shard_over)
    return factory.create_input(), factory
