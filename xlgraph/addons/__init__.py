"""``xlgraph.addons``: popxl-addons, Graphcore's companion library to PopXL, on xlgraph.

``import xlgraph.addons as addons`` (or, through ``python -m xlgraph.popxl_compat``,
``import popxl_addons as addons``). Built only on xlgraph's public PopXL API.
"""

from xlgraph.addons import (
    array_munging,
    dot_tree,
    graph,
    graph_cache,
    layers,
    module,
    named_replica_grouping,
    named_tensors,
    ops,
    optimizers,
    remote,
    route_tensor,
    rts,
    seed_variable,
    streams,
    task_session,
    transforms,
    utils,
    variable_factory,
)
from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.graph import BoundGraph, GraphWithNamedArgs
from xlgraph.addons.graph_cache import GraphCache, function
from xlgraph.addons.module import Module
from xlgraph.addons.named_replica_grouping import NamedReplicaGrouping
from xlgraph.addons.named_tensors import NamedTensorData, NamedTensors
from xlgraph.addons.remote import (
    NamedRemoteBuffers,
    create_remote_buffer,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote_graph,
)
from xlgraph.addons.route_tensor import route_tensor_into_graph
from xlgraph.addons.seed_variable import seed_variable  # noqa: F811
from xlgraph.addons.streams import InputStreams, OutputStreams
from xlgraph.addons.task_session import TaskSession
from xlgraph.addons.transforms import (
    autodiff,
    autodiff_with_accumulation,
    pipelined_execution,
    recompute_graph,
    repeat_graph,
)
from xlgraph.addons.utils import timer
from xlgraph.addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

__all__ = [
    "Module", "GraphCache", "function", "GraphWithNamedArgs", "BoundGraph", "DotTree",
    "NamedTensors", "NamedTensorData", "NamedVariableFactories", "VariableFactory",
    "add_variable_input", "add_replica_sharded_variable_input", "NamedReplicaGrouping",
    "route_tensor_into_graph", "seed_variable", "InputStreams", "OutputStreams", "timer",
    "TaskSession", "task_session",
    "autodiff", "autodiff_with_accumulation", "pipelined_execution", "recompute_graph",
    "repeat_graph", "NamedRemoteBuffers", "create_remote_buffer", "load_remote_graph",
    "named_buffers", "named_variable_buffers", "store_remote_graph", "remote", "rts",
    "array_munging", "dot_tree", "graph", "graph_cache", "layers", "module",
    "named_replica_grouping", "named_tensors", "ops", "optimizers", "route_tensor", "streams",
    "transforms", "utils", "variable_factory",
]
