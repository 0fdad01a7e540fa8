"""xlgraph: PopXL-style explicit graph programs, differentiated and run on a numpy simulator.

Replace ``import popxl`` with ``import xlgraph as popxl``.
"""

from xlgraph import (
    checkpoint,
    data,
    datasets,
    dtypes,
    errors,
    fp8_utils,
    listing,  # noqa: F401 - lends the core Graph and Ir printing (core.dispatch)
    nn,
    ops,
    optim,
    random_seed,
    session,
    tensorlocation,
    testing,
    training,
    transforms,
    typing_,
    utils,
)
from xlgraph.context import (
    gcg,
    get_current_graph,
    get_ir,
    get_main_graph,
    gir,
    gmg,
    in_sequence,
    io_tiles,
    ipu,
    name_scope,
)
from xlgraph.dtypes import (
    bool,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float8_143,
    float8_152,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from xlgraph.graph import Graph
from xlgraph.ipu import IPUModel
from xlgraph.ir import Ir
from xlgraph.module import Module
from xlgraph.random_seed import create_seeds
from xlgraph.remote import (
    remote_replica_sharded_variable,
    remote_variable,
    replica_sharded_buffer,
    replica_sharded_variable,
)
from xlgraph.remote_buffer import RemoteBuffer, remote_buffer  # binds the function over the module
from xlgraph.replica_grouping import ReplicaGrouping
from xlgraph.runtime import Session
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from xlgraph.tensor import (
    Constant,
    Tensor,
    TensorSpec,
    Variable,
    constant,
    graph_input,
    graph_output,
    variable,
)
from xlgraph.tensorlocation import (
    ExecutionContext,
    ReplicatedTensorSharding,
    TensorLocation,
    TensorStorage,
    TileSet,
)
from xlgraph.typing_ import TensorByRef

__version__ = "0.1.0"

__all__ = [
    "Ir", "IPUModel", "Graph", "Tensor", "TensorSpec", "Variable", "Constant", "Module", "Session",
    "variable", "constant", "graph_input", "graph_output", "h2d_stream", "d2h_stream",
    "HostToDeviceStream", "DeviceToHostStream", "in_sequence", "name_scope",
    "gcg", "get_current_graph", "gmg", "get_main_graph", "gir", "get_ir",
    "dtypes", "errors", "ops", "transforms", "dtype", "create_seeds",
    "checkpoint", "data", "datasets", "nn", "optim", "training",
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "half", "float32", "float", "float64", "double",
]

# -- PopXL's module layout and the rest of its top-level names --------------------------------
__all__ += [
    "fp8_utils", "random_seed", "session", "tensorlocation", "testing", "typing_", "utils",
    "float8_143", "float8_152", "complex64", "complex128", "io_tiles", "ipu", "TensorByRef",
    "TensorLocation", "TensorStorage", "ReplicatedTensorSharding", "TileSet", "ExecutionContext",
]

# -- replicas and remote memory -------------------------------------------------------------------
__all__ += [
    "ReplicaGrouping", "RemoteBuffer", "remote_buffer", "remote_variable",
    "remote_replica_sharded_variable", "replica_sharded_buffer", "replica_sharded_variable",
]
