"""``GradGraphInfo`` and ``ExpectedConnection``: how a gradient graph meets its forward graph."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from xlgraph.tensor import Tensor

if TYPE_CHECKING:
    from xlgraph.graph import Graph
    from xlgraph.ops.call import CallSiteInfo

__all__ = ["ExpectedConnectionType", "ExpectedConnection", "GradGraphInfo"]


class ExpectedConnectionType(Enum):
    """``Fwd``: a forward tensor; ``FwdGrad``: the gradient of a forward tensor."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


@dataclass(frozen=True)
class ExpectedConnection:
    """One input or output of a gradient graph, described by the forward tensor it relates to."""

    fwd_tensor: Tensor
    connection_type: ExpectedConnectionType

    def __repr__(self) -> str:
        return f"({self.fwd_tensor.id}, {self.connection_type.name})"


@dataclass(frozen=True, eq=False)
class GradGraphInfo:
    """The result of ``autodiff``.

    ``expected_inputs`` start with the FwdGrad seeds in ``grads_provided`` order, followed by the
    forward tensors (Fwd) the gradient graph reads; ``expected_outputs`` match ``grads_required``.
    """

    graph: Graph
    forward_graph: Graph
    expected_inputs: tuple[ExpectedConnection, ...]
    expected_outputs: tuple[ExpectedConnection, ...]

    @property
    def _expected_inputs(self) -> list[ExpectedConnection]:
        """``expected_inputs`` as a list (PopXL's attribute, read by user code)."""
        return list(self.expected_inputs)

    @property
    def _expected_outputs(self) -> list[ExpectedConnection]:
        """``expected_outputs`` as a list (PopXL's attribute, read by user code)."""
        return list(self.expected_outputs)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of ``expected_inputs``, in order."""
        return tuple(c.fwd_tensor for c in self.expected_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of ``expected_outputs``, in order."""
        return tuple(c.fwd_tensor for c in self.expected_outputs)

    def inputs_dict(self, fwd_call_info: CallSiteInfo) -> dict[Tensor, Tensor]:
        """``{gradient-graph input: parent tensor}`` for the Fwd inputs, from a forward call site.

        The gradient seeds (FwdGrad inputs) are not included: pass them positionally.
        """
        if fwd_call_info.called_graph is not self.forward_graph:
            raise TypeError(
                f"the call site calls {fwd_call_info.called_graph.name!r}, but this gradient "
                f"graph belongs to {self.forward_graph.name!r}"
            )
        return {
            self.graph.inputs[i]: fwd_call_info.graph_to_parent(c.fwd_tensor)
            for i, c in enumerate(self.expected_inputs)
            if c.connection_type is ExpectedConnectionType.Fwd
        }

    def fwd_graph_ins_to_grad_parent_outs(
        self, grad_call_info: CallSiteInfo
    ) -> dict[Tensor, Tensor]:
        """``{forward-graph tensor: its gradient at the gradient call site}``."""
        return {
            c.fwd_tensor: grad_call_info.parent_output(i)
            for i, c in enumerate(self.expected_outputs)
        }

    def fwd_parent_ins_to_grad_parent_outs(
        self, fwd_call_info: CallSiteInfo, grad_call_info: CallSiteInfo
    ) -> dict[Tensor, Tensor]:
        """``{parent tensor at the forward call site: its gradient at the gradient call site}``."""
        return {
            fwd_call_info.graph_to_parent(c.fwd_tensor): grad_call_info.parent_output(i)
            for i, c in enumerate(self.expected_outputs)
        }

    def __repr__(self) -> str:
        return (
            f"GradGraphInfo[ graph={self.graph.name} expected_inputs={list(self.expected_inputs)} "
            f"expected_outputs={list(self.expected_outputs)} ]"
        )
