"""Remote buffers by name, and graphs that load or store a whole ``NamedTensors`` at once."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.variable_factory import NamedVariableFactories

__all__ = ["NamedRemoteBuffers", "named_buffers", "named_variable_buffers",
           "create_remote_buffer", "load_remote_graph", "store_remote_graph"]


class NamedRemoteBuffers(DotTree[popxl.RemoteBuffer]):
    """Remote buffers by dotted name."""


def create_remote_buffer(spec: popxl.TensorSpec | popxl.Tensor, entries: int = 1,
                         replica_group: popxl.ReplicaGrouping | None = None,
                         shard_over: int | None = None) -> popxl.RemoteBuffer:
    """A buffer of ``entries`` tensors of ``spec``; replica-sharded over ``shard_over``
    replicas when that is above 1 (the spec's ``meta_shape``, else its shape, is the whole
    tensor)."""
    spec = spec.spec if isinstance(spec, popxl.Tensor) else spec
    if shard_over and shard_over > 1:
        whole = tuple(spec.meta_shape) or tuple(spec.shape)
        return popxl.replica_sharded_buffer(whole, spec.dtype, replica_group, shard_over, entries)
    return popxl.remote_buffer(spec.shape, spec.dtype, entries)


def named_buffers(tensors: NamedTensors, entries: int = 1) -> NamedRemoteBuffers:
    """One buffer per tensor (sharded for tensors with a ``meta_shape``)."""
    out = {}
    for name, t in tensors.to_dict().items():
        shard = math.prod(t.meta_shape) // max(1, t.nelms) if t.meta_shape else 1
        out[name] = create_remote_buffer(t.spec, entries, shard_over=shard if shard > 1 else None)
    return NamedRemoteBuffers.from_dict(out)


def named_variable_buffers(factories: NamedVariableFactories, entries: int = 1,
                           shard_over_dict: bool | Mapping[str, int] = True,
                           ) -> NamedRemoteBuffers:
    """One buffer per variable factory.

    Args:
        factories: the variables.
        entries: entries per buffer.
        shard_over_dict: True: shard as each factory says; False: no sharding; a mapping:
            ``{dotted name: shard_over}``.
    """
    out = {}
    for name, f in factories.to_dict().items():
        if shard_over_dict is True:
            shard = f.shard_over
        elif shard_over_dict is False:
            shard = 1
        else:
            shard = shard_over_dict.get(name, 1)
        spec = popxl.TensorSpec(f.shape, f.dtype)
        out[name] = create_remote_buffer(spec, entries, f.replica_grouping, shard)
    return NamedRemoteBuffers.from_dict(out)


def _tiles(use_io_tiles: bool) -> contextlib.AbstractContextManager[None]:
    return popxl.io_tiles() if use_io_tiles else contextlib.nullcontext()


def load_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1,
                      use_io_tiles: bool = False) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph that loads entry ``index`` (its one input) of every buffer.

    Returns:
        ``(graph, names)``: the outputs follow ``names``, so
        ``NamedTensors.pack(names, graph.call(index))`` names them.
    """
    names, bufs = buffers.unpack()
    graph = popxl.gir().create_empty_graph("load_remote")
    with graph, _tiles(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "index")
        for name, buffer in zip(names, bufs):
            _check_entries(name, buffer, entries)
            popxl.graph_output(ops.remote_load(buffer, index, name))
    return GraphWithNamedArgs(graph), list(names)


def store_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1,
                       use_io_tiles: bool = False) -> GraphWithNamedArgs:
    """A graph that stores its named args into entry ``index`` (its first input) of the
    buffers of the same names: ``graph.bind(tensors).call(index)``."""
    names, bufs = buffers.unpack()
    graph = popxl.gir().create_empty_graph("store_remote")
    args = {}
    with graph, _tiles(use_io_tiles):
        index = popxl.graph_input((), popxl.int32, "index")
        for name, buffer in zip(names, bufs):
            _check_entries(name, buffer, entries)
            shape = buffer.tensor_shape
            t = popxl.graph_input(shape, buffer.tensor_dtype, name, meta_shape=buffer.meta_shape)
            ops.remote_store(buffer, index, t)
            args[name] = t
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args))


def _check_entries(name: str, buffer: popxl.RemoteBuffer, entries: int) -> None:
    if buffer.entries < entries:
        raise ValueError(f"remote buffer {name!r} has {buffer.entries} entries, fewer than "
                         f"the {entries} asked for")
