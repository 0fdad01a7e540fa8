"""Graph transforms: ``autodiff`` and its result types."""

from xlgraph.transforms.autodiff import GradContext, autodiff
from xlgraph.transforms.grad_info import ExpectedConnection, ExpectedConnectionType, GradGraphInfo

__all__ = [
    "autodiff",
    "GradContext",
    "GradGraphInfo",
    "ExpectedConnection",
    "ExpectedConnectionType",
]
