"""Remote buffers by name, and graphs that load or store a whole ``NamedTensors`` at once."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.named_replica_grouping import fill_none_group
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.variable_factory import NamedVariableFactories

__all__ = ["NamedRemoteBuffers", "named_buffers", "named_variable_buffers",
           "create_remote_buffer", "load_remote_graph", "store_remote_graph", "load_remote",
           "store_remote"]


class NamedRemoteBuffers(DotTree[popxl.RemoteBuffer]):
    """Remote buffers by dotted name."""


def shard_count(shard_over: int | popxl.ReplicaGrouping | None) -> int | None:
    """A shard count given as an int or as a ReplicaGrouping (its group size)."""
    if isinstance(shard_over, popxl.ReplicaGrouping):
        return shard_over.group_size
    return None if shard_over is None else int(shard_over)


def create_remote_buffer(spec: popxl.TensorSpec | popxl.Tensor, entries: int = 1,
                         replica_group: popxl.ReplicaGrouping | None = None,
                         shard_over: int | popxl.ReplicaGrouping | None = None,
                         ) -> popxl.RemoteBuffer:
    """A buffer of ``entries`` tensors of ``spec``.

    A spec with a ``meta_shape`` (already a shard) gives a plain buffer of that shard, tagged
    with the meta-shape. Otherwise ``shard_over`` (default: the group size of
    ``replica_group``, itself all replicas by default; an int or a ReplicaGrouping) above 1
    gives a replica-sharded buffer, and 1 a plain one.

    Raises:
        ValueError: the element count does not divide by ``shard_over``.
    """
    spec = spec.spec if isinstance(spec, popxl.Tensor) else spec
    if spec.meta_shape:
        buffer = popxl.remote_buffer(spec.shape, spec.dtype, entries)
        buffer.meta_shape = tuple(spec.meta_shape)
        return buffer
    group = fill_none_group(replica_group)
    shard = shard_count(shard_over) or group.group_size
    if shard > 1:
        if math.prod(spec.shape) % shard:
            raise ValueError(f"create_remote_buffer: {math.prod(spec.shape)} elements of "
                             f"{spec.shape} do not divide into {shard} shards")
        shape = (group.num_groups, *spec.shape) if group.num_groups > 1 else spec.shape
        return popxl.replica_sharded_buffer(shape, spec.dtype, group, shard, entries)
    return popxl.remote_buffer(spec.shape, spec.dtype, entries)


def named_buffers(tensors: NamedTensors, entries: int = 1) -> NamedRemoteBuffers:
    """One buffer per tensor (tagged with the meta-shape of a sharded tensor). Broken in
    popxl-addons 3.4; works here."""
    return NamedRemoteBuffers.from_dict(
        {name: create_remote_buffer(t.spec, entries, shard_over=1)
         for name, t in tensors.to_dict().items()})


def named_variable_buffers(factories: NamedVariableFactories, entries: int = 1,
                           shard_over_dict: bool | int | Mapping[str, int] = True,
                           ) -> NamedRemoteBuffers:
    """One buffer per variable factory, sharded over:

    ``True``: each factory's whole replica group; ``False``: 1 (no sharding); an int ``n``
    (1 to the group size); a mapping: ``shard_over_dict.get(name)``, the whole group when
    absent.

    Raises:
        ValueError: an int outside 1..group size.
    """
    out = {}
    for name, f in factories.to_dict().items():
        group = fill_none_group(f.replica_grouping).group_size
        if shard_over_dict is True:
            shard = group
        elif shard_over_dict is False:
            shard = 1
        elif isinstance(shard_over_dict, Mapping):
            shard = shard_count(shard_over_dict.get(name)) or group
        else:
            shard = shard_count(shard_over_dict)
            if not 1 <= shard <= group:
                raise ValueError(f"named_variable_buffers: shard_over_dict={shard} must be "
                                 f"between 1 and the group size {group} ({name!r})")
        spec = popxl.TensorSpec(f.meta_shape or f.shape, f.dtype)  # the whole variable
        out[name] = create_remote_buffer(spec, entries, f.replica_grouping, shard)
    return NamedRemoteBuffers.from_dict(out)


def _tiles(use_io_tiles: bool) -> contextlib.AbstractContextManager[None]:
    return popxl.io_tiles() if use_io_tiles else contextlib.nullcontext()


def _ensure_entries(buffer: popxl.RemoteBuffer, entries: int) -> None:
    if buffer.entries < entries:
        buffer.set_remote_buffer_info(buffer.tensor_dtype, buffer.tensor_shape, entries)


def load_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1,
                      use_io_tiles: bool = False) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph that loads entry ``load_index`` (its one input, int32) of every buffer; a buffer
    with fewer than ``entries`` entries is given that many.

    Returns:
        ``(graph, names)``: one output per buffer in sorted-name order, so
        ``NamedTensors.pack(names, graph.call(index))`` names them.
    """
    names, bufs = buffers.unpack()
    graph = popxl.gir().create_empty_graph("load_remote")
    with graph, _tiles(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "load_index")
        for name, buffer in zip(names, bufs):
            _ensure_entries(buffer, entries)
            popxl.graph_output(ops.remote_load(buffer, index, name))
    return GraphWithNamedArgs(graph), list(names)


def store_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1,
                       use_io_tiles: bool = False) -> GraphWithNamedArgs:
    """A graph that stores its named args into entry ``store_index`` (its first input) of the
    buffers of the same names: ``graph.bind(tensors).call(index)``."""
    names, bufs = buffers.unpack()
    graph = popxl.gir().create_empty_graph("store_remote")
    args = {}
    with graph, _tiles(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "store_index")
        for name, buffer in zip(names, bufs):
            _ensure_entries(buffer, entries)
            t = popxl.graph_input(buffer.tensor_shape, buffer.tensor_dtype, name,
                                  meta_shape=buffer.meta_shape)
            ops.remote_store(buffer, index, t)
            args[name] = t
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args))


def load_remote(buffers: NamedRemoteBuffers, entry: int = 0,
                use_io_tiles: bool = False) -> NamedTensors:
    """Load entry ``entry`` of every buffer in the current graph, by name."""
    out = {}
    with _tiles(use_io_tiles):
        for name, buffer in buffers.to_dict().items():
            out[name] = ops.remote_load(buffer, entry, name)
    return NamedTensors.from_dict(out)


def store_remote(buffers: NamedRemoteBuffers, tensors: NamedTensors, entry: int = 0,
                 use_io_tiles: bool = False) -> None:
    """Store each tensor of ``tensors`` in entry ``entry`` of the buffer of the same name."""
    with _tiles(use_io_tiles):
        for name, t in tensors.to_dict().items():
            ops.remote_store(buffers.get(name), entry, t)
