"""The buffer plan's record: where the values of one body live at run time.

``plan.py`` fills it (storage roots, allocation) and ``layouts.py`` fills its layout part;
both import it from here, so they depend on it and not on each other's modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xlgraph.lower.liveness import Liveness
from xlgraph.lower.program import Step

__all__ = ["Plan"]


@dataclass(eq=False)
class Plan:
    """Where the values of one body live (step tables are keyed by ``Step``)."""

    live: Liveness
    root: dict[int, int] = field(default_factory=dict)  # slot -> storage root slot
    defined: dict[int, int] = field(default_factory=dict)  # root -> position of its step
    last_use: dict[int, int] = field(default_factory=dict)  # root -> position of last read
    escaping: set[int] = field(default_factory=set)  # roots that must be fresh arrays
    layout: dict[int, str] = field(default_factory=dict)
    viewish: set[int] = field(default_factory=set)  # slots that may hold a view
    use_out: set[Step] = field(default_factory=set)  # steps run through kernel_out
    densify: dict[Step, set[int]] = field(default_factory=dict)  # step -> inputs made dense
    copies: dict[Step, set[int]] = field(default_factory=dict)  # step -> inputs always copied
    buffer_of: dict[int, int] = field(default_factory=dict)  # root -> pool buffer
    scratch: dict[Step, list[int]] = field(default_factory=dict)  # step -> scratch buffers
    fused_into: dict[int, int] = field(default_factory=dict)  # dying root -> root fused into it

    @property
    def positions(self) -> dict[Step, int]:
        return self.live.positions

    @property
    def fused(self) -> int:
        """Number of elementwise ops that write into their dying input's buffer."""
        return len(self.fused_into)
