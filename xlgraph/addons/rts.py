"""Replicated tensor sharding (RTS): shard specs, gathering shards, reduce-scattering grads."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.named_tensors import NamedTensors

__all__ = ["replica_sharded_spec", "gather_replica_sharded_tensor",
           "all_gather_replica_sharded_graph", "reduce_replica_sharded_tensor",
           "reduce_replica_sharded_graph"]

Groups = Mapping[str, popxl.ReplicaGrouping] | None


def replica_sharded_spec(t: popxl.Tensor | popxl.TensorSpec, shard_over: int) -> popxl.TensorSpec:
    """The spec of one replica's shard of ``t``: flat, ``ceil(nelms / shard_over)`` elements,
    with ``t``'s shape as ``meta_shape``."""
    spec = t.spec if isinstance(t, popxl.Tensor) else t
    return popxl.TensorSpec((math.ceil(math.prod(spec.shape) / shard_over),), spec.dtype,
                            tuple(spec.shape))


def _tiles(use_io_tiles: bool) -> contextlib.AbstractContextManager[None]:
    return popxl.io_tiles() if use_io_tiles else contextlib.nullcontext()


def gather_replica_sharded_tensor(t: popxl.Tensor, use_io_tiles: bool = False,
                                  replica_group: popxl.ReplicaGrouping | None = None,
                                  ) -> popxl.Tensor:
    """The whole tensor (shaped ``t.meta_shape``) gathered from the shards of the replicas
    of ``replica_group`` (default: all)."""
    with _tiles(use_io_tiles):
        whole = ops.collectives.replicated_all_gather(t, group=replica_group)
    if t.meta_shape and whole.shape != tuple(t.meta_shape):
        whole = whole.reshape(t.meta_shape)
    return whole


def all_gather_replica_sharded_graph(tensors: NamedTensors, use_io_tiles: bool = False,
                                     replica_groups: Groups = None,
                                     ) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph whose named args are shards like ``tensors`` and whose outputs are the whole
    tensors, in the order of the returned names."""
    names, ts = tensors.unpack()
    graph = popxl.gir().create_empty_graph("all_gather")
    args = {}
    with graph:
        for name, t in zip(names, ts):
            shard = popxl.graph_input(t.shape, t.dtype, name, meta_shape=t.meta_shape)
            args[name] = shard
            group = replica_groups.get(name) if replica_groups else None
            popxl.graph_output(gather_replica_sharded_tensor(shard, use_io_tiles, group))
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), list(names)


def reduce_replica_sharded_tensor(t: popxl.Tensor, op: str = "add",
                                  replica_group: popxl.ReplicaGrouping | None = None,
                                  shard_group: popxl.ReplicaGrouping | None = None,
                                  ) -> popxl.Tensor:
    """Reduce ``t`` over the replicas and keep this replica's shard: a reduce-scatter over
    ``shard_group`` (default: all replicas), then, when ``replica_group`` is given, an
    all-reduce over the replicas that hold the same shard."""
    shard = ops.collectives.replicated_reduce_scatter(
        t, op, shard_group, configure_output_for_replicated_tensor_sharding=True)
    if replica_group is not None and replica_group.group_size > 1:
        shard = ops.collectives.replicated_all_reduce(shard, op, replica_group)
    return shard


def reduce_replica_sharded_graph(tensors: NamedTensors, op: str = "add",
                                 use_io_tiles: bool = False, shard_groups: Groups = None,
                                 replica_group: popxl.ReplicaGrouping | None = None,
                                 ) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph whose named args are whole tensors like ``tensors`` and whose outputs are this
    replica's reduced shards, in the order of the returned names."""
    names, ts = tensors.unpack()
    graph = popxl.gir().create_empty_graph("reduce_scatter")
    args = {}
    with graph, _tiles(use_io_tiles):
        for name, t in zip(names, ts):
            whole = popxl.graph_input(t.shape, t.dtype, name)
            args[name] = whole
            group = shard_groups.get(name) if shard_groups else None
            popxl.graph_output(reduce_replica_sharded_tensor(whole, op, replica_group, group))
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), list(names)
