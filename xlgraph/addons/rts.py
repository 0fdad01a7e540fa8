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


def replica_sharded_spec(t: popxl.Tensor | popxl.TensorSpec,
                         shard_over: int | popxl.ReplicaGrouping) -> popxl.TensorSpec:
    """The spec of one replica's shard of ``t``: flat, ``nelms / shard_over`` elements, with
    ``t``'s shape as ``meta_shape``. ``t``'s own spec when it is already a shard, when
    ``shard_over`` is 1 or when it does not divide the element count. ``shard_over`` is a
    count or a ReplicaGrouping (its group size)."""
    spec = t.spec if isinstance(t, popxl.Tensor) else t
    n = shard_over.group_size if isinstance(shard_over, popxl.ReplicaGrouping) else shard_over
    nelms = math.prod(spec.shape)
    if spec.meta_shape or n == 1 or nelms % n:
        return spec
    return popxl.TensorSpec((nelms // n,), spec.dtype, tuple(spec.shape))


def _tiles(use_io_tiles: bool) -> contextlib.AbstractContextManager[None]:
    return popxl.io_tiles() if use_io_tiles else contextlib.nullcontext()


def gather_replica_sharded_tensor(t: popxl.Tensor, use_io_tiles: bool = False,
                                  replica_group: popxl.ReplicaGrouping | None = None,
                                  ) -> popxl.Tensor:
    """The whole tensor (shaped ``t.meta_shape``) gathered from the shards of the replicas
    of ``replica_group`` (default: all); ``t`` itself when it has no meta-shape."""
    if not t.meta_shape:
        return t
    with _tiles(use_io_tiles):
        whole = ops.collectives.replicated_all_gather(t, group=replica_group)
    if whole.shape != tuple(t.meta_shape):
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
    """Reduce ``t`` over ``replica_group`` (default: all replicas) and keep this replica's
    shard in ``shard_group`` (default: the replica group).

    A shard group of more than one replica that divides the element count gives a
    reduce-scatter when it is the replica group, else an all-reduce over the replica group
    then this replica's slice within the shard group; otherwise a plain all-reduce.
    """
    replica_group = replica_group or popxl.gir().replica_grouping()
    shard_group = shard_group or replica_group
    if shard_group.group_size > 1 and t.nelms % shard_group.group_size == 0:
        if shard_group == replica_group:
            return ops.collectives.replicated_reduce_scatter(
                t, op, replica_group, configure_output_for_replicated_tensor_sharding=True)
        reduced = ops.collectives.replicated_all_reduce(t, op, replica_group)
        return ops.collectives.replica_sharded_slice(reduced, shard_group)
    return ops.collectives.replicated_all_reduce(t, op, replica_group)


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
