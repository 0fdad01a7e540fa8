"""``apply_pre_alias_patterns``: PopART's pre-alias graph patterns, for programs that call it.

In popxl-addons it runs PopART's pre-alias patterns on every graph, which replaces the ops
marked "replaceable by identity" (the identity side of the tensor-parallel all-reduce pair)
before lowering. xlgraph's ops need no such rewrite (an identity-forward collective is an
identity already), so the call checks its level, records it on the Ir and changes nothing
else: it is accepted and has no effect on the simulator.
"""

from __future__ import annotations

import xlgraph as popxl

__all__ = ["apply_pre_alias_patterns", "LEVELS"]

LEVELS = ("no_patterns", "minimal", "default", "all")


def apply_pre_alias_patterns(ir: popxl.Ir, level: str = "default") -> None:
    """Accept PopART's pre-alias pattern pass at ``level``; no effect on xlgraph's graphs.

    Raises:
        ValueError: ``level`` is not one of ``no_patterns``, ``minimal``, ``default``, ``all``.
    """
    if level not in LEVELS:
        raise ValueError(f"apply_pre_alias_patterns(level={level!r}): expected one of "
                         f"{list(LEVELS)}")
    ir.pre_alias_patterns_level = level
