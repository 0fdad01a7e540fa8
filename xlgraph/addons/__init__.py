"""``xlgraph.addons``: popxl-addons, Graphcore's companion library to PopXL, on xlgraph.

``import xlgraph.addons as addons`` (or, through ``python -m xlgraph.popxl_compat``,
``import popxl_addons as addons``). Built on xlgraph's public PopXL API. The top-level names
are popxl-addons 3.4's: ``DotTree``, ``NamedRemoteBuffers``, the layers, the optimisers, the
custom ops and the ``rts`` functions live in their modules only.
"""

from xlgraph.addons import (
    array_munging,
    debug,
    dot_tree,
    graph,
    graph_cache,
    layers,
    module,
    named_replica_grouping,
    named_tensors,
    ops,
    optimizers,
    patterns,
    performance_utils,
    remote,
    route_tensor,
    rts,
    seed_variable,
    streams,
    task_session,
    testing_utils,
    transforms,
    utils,
    variable_factory,
)
from xlgraph.addons.array_munging import (
    handle_negative_axis,
    pad_axis,
    repeat,
    repeat_axis,
    repeat_shard,
    shard,
    shard2D,
    split2D,
    squeeze_safe,
    tensor_parallel_input,
    unshard,
    unshard2D,
    unshard_arrays,
)
from xlgraph.addons.debug import print_tensor, print_text
from xlgraph.addons.git_commit import git_commit as _git_commit
from xlgraph.addons.graph import BoundGraph, GraphWithNamedArgs
from xlgraph.addons.graph_cache import GraphCache, function
from xlgraph.addons.module import Module
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.ops import (
    cross_entropy,
    cross_entropy_with_grad,
    fp8_amax_scale,
    host_load,
    host_store,
)
from xlgraph.addons.performance_utils import (
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)
from xlgraph.addons.remote import (
    create_remote_buffer,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote_graph,
)
from xlgraph.addons.route_tensor import is_subgraph, route_tensor_into_graph
from xlgraph.addons.seed_variable import seed_variable  # noqa: F811
from xlgraph.addons.streams import InputStreams, OutputStreams
from xlgraph.addons.task_session import TaskSession, write_variables_pb
from xlgraph.addons.transforms import (
    RemoteHandle,
    autodiff,
    autodiff_with_accumulation,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
    disable_fc_pass,
    enable_fc_pass,
    pipelined_execution,
    recompute_graph,
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from xlgraph.addons.utils import OrderedDict, WeightsDict, timer
from xlgraph.addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

GIT_COMMIT: str | None = _git_commit()
"""The 7-character commit of the git repository holding the working directory at import
time (the user's project), or None."""

__all__ = [
    "Module", "GraphWithNamedArgs", "BoundGraph", "NamedTensors", "NamedVariableFactories",
    "VariableFactory", "add_variable_input", "add_replica_sharded_variable_input",
    "GraphCache", "function", "cross_entropy", "cross_entropy_with_grad", "host_load",
    "host_store", "fp8_amax_scale", "autodiff", "autodiff_with_accumulation",
    "set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu",
    "batch_serialise", "batch_serialise_fwd_and_grad", "batch_serial_buffer", "RemoteHandle",
    "pipelined_execution", "recompute_graph", "disable_fc_pass", "enable_fc_pass",
    "load_remote_graph", "store_remote_graph", "named_buffers", "named_variable_buffers",
    "create_remote_buffer", "timer", "OrderedDict", "WeightsDict", "TaskSession",
    "write_variables_pb", "InputStreams", "OutputStreams", "seed_variable",
    "route_tensor_into_graph", "is_subgraph", "total_FLOPs", "evaluate_ir_FLOPs",
    "evaluate_FLOPs", "print_FLOPs", "format_flops_scientific", "print_tensor", "print_text",
    "shard", "unshard_arrays", "unshard", "repeat", "repeat_axis", "split2D", "shard2D",
    "unshard2D", "repeat_shard", "tensor_parallel_input", "pad_axis", "squeeze_safe",
    "handle_negative_axis", "GIT_COMMIT",
    # sub-modules (attributes of the package, as after popxl-addons' own imports)
    "array_munging", "debug", "dot_tree", "graph", "graph_cache", "layers", "module",
    "named_replica_grouping", "named_tensors", "ops", "optimizers", "patterns",
    "performance_utils", "remote", "route_tensor", "rts", "streams", "task_session",
    "testing_utils", "transforms", "utils", "variable_factory",
]

