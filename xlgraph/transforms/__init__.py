"""Graph transforms: ``autodiff``, its result types, and the ``grad_of_call`` helper."""

from xlgraph.transforms.autodiff import GradContext, autodiff
from xlgraph.transforms.grad_info import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from xlgraph.transforms.grad_of_call import grad_of_call

__all__ = [
    "autodiff",
    "grad_of_call",
    "GradContext",
    "GradGraphInfo",
    "ExpectedConnection",
    "ExpectedConnectionType",
]
