"""``disable_fc_pass`` / ``enable_fc_pass``: PopART's fully-connected pass flag.

PopART plans a matmul of a forward pass with its gradients so that the weight is laid out
once for all three ("fully connected pass"). The flag only changes PopART's tile planning: on
xlgraph's simulator it is recorded on each matmul op (``op.hints["fully_connected_pass"]``)
and has no effect on values or on the ipu_model's estimates. Call after building.
"""

from __future__ import annotations

import xlgraph as popxl

__all__ = ["disable_fc_pass", "enable_fc_pass"]


def _toggle(ir: popxl.Ir, enabled: bool) -> None:
    for graph in ir.graphs:
        for op in graph.ops:
            if op.defn.name.startswith("matmul"):
                op.hints["fully_connected_pass"] = enabled


def disable_fc_pass(ir: popxl.Ir) -> None:
    """Mark every existing matmul of ``ir`` as planned without the fully-connected pass."""
    _toggle(ir, False)


def enable_fc_pass(ir: popxl.Ir) -> None:
    """Mark every existing matmul of ``ir`` as planned with the fully-connected pass."""
    _toggle(ir, True)
