"""popxl-addons graph transforms: autodiff (with accumulation), recomputation, pipelining,
batch serialisation and repeat_graph."""

from xlgraph.addons.transforms import available_memory_proportion, use_fc_pass
from xlgraph.addons.transforms.autodiff import autodiff, autodiff_with_accumulation
from xlgraph.addons.transforms.available_memory_proportion import (
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from xlgraph.addons.transforms.batch_serialisation import (
    BatchSerialResult,
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from xlgraph.addons.transforms.pipelining import Pipeline, pipelined_execution
from xlgraph.addons.transforms.recomputation import add_recompute_inputs, recompute_graph
from xlgraph.addons.transforms.repeat_graph import repeat_graph
from xlgraph.addons.transforms.use_fc_pass import disable_fc_pass, enable_fc_pass

__all__ = ["autodiff", "autodiff_with_accumulation", "pipelined_execution", "Pipeline",
           "add_recompute_inputs", "recompute_graph", "repeat_graph", "RemoteHandle",
           "BatchSerialResult", "batch_serial_buffer", "batch_serialise",
           "batch_serialise_fwd_and_grad", "available_memory_proportion",
           "set_available_memory_proportion_by_ipu",
           "set_graph_available_memory_proportion_by_ipu", "use_fc_pass", "disable_fc_pass",
           "enable_fc_pass"]
