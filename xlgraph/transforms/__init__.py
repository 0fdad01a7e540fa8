"""Graph transforms: ``autodiff``, its result types, the ``grad_of_call`` helper,
``decompose_sum``, and the exchange scopes ``merge_exchange`` / ``io_tile_exchange``."""

from xlgraph.transforms.autodiff import GradContext, autodiff
from xlgraph.transforms.decompose_sum import decompose_sum
from xlgraph.transforms.grad_info import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from xlgraph.transforms.grad_of_call import grad_of_call
from xlgraph.transforms.merge_exchange import io_tile_exchange, merge_exchange

__all__ = [
    "autodiff",
    "grad_of_call",
    "GradContext",
    "GradGraphInfo",
    "ExpectedConnection",
    "ExpectedConnectionType",
    "decompose_sum",
    "merge_exchange",
    "io_tile_exchange",
]
