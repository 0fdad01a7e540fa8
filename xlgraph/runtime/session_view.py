"""A Session as Jupyter shows it (``Session._repr_html_``): its device, replicas and memory.

Memory is the variables' bytes (one replica's) and, on ``"ipu_model"``,
the modelled chip's peak over its tiles and the fullest tile against its capacity (the
figures of ``session.report()``, estimates of the model in ``xlgraph.ipu``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.ipu.page.html import escape
from xlgraph.ipu.report_plot import format_bytes

__all__ = ["session_rows", "session_html"]


def session_rows(session: Any) -> list[tuple[str, str]]:
    """``(heading, value)`` rows of a ``Session`` (which imports this module): device,
    replicas, state, variables' and modelled memory."""
    ir, model = session.ir, session.device.model
    device = session.device.name + (f": {model.describe()}" if model is not None else "")
    replicas = f"{ir.replication_factor}"
    if ir.instance_replication_factor != ir.replication_factor:
        replicas += f" ({ir.instance_replication_factor} in this instance)"
    variables = session.executable.variables
    size = sum(v.nelms * np.dtype(v.dtype.as_numpy()).itemsize for v in variables)
    rows = [("device", device), ("replicas", replicas),
            ("attached", "yes" if session.is_attached else "no"),
            ("variables", f"{len(variables):,} tensor{'s' * (len(variables) != 1)}, "
                          f"{format_bytes(size)} per replica")]
    memory = session._memory
    if memory is not None:
        peak = memory.peak
        cap = memory.model.memory_bytes_per_tile
        fullest = int(peak.argmax())
        rows.append(("modelled memory", f"peak {format_bytes(peak.sum())} over "
                     f"{memory.model.tiles:,} tiles; fullest tile {fullest}: "
                     f"{format_bytes(peak[fullest])} of {format_bytes(cap)} "
                     f"({100 * peak[fullest] / cap:.1f}%)"))
    return rows


def session_html(session: Any) -> str:
    """The rows as an HTML table (user text escaped)."""
    body = "".join(f'<tr><th style="text-align: left">{escape(k)}</th>'
                   f'<td style="text-align: left">{escape(v)}</td></tr>'
                   for k, v in session_rows(session))
    return f"<table><caption>Session of Ir {session.ir.id}</caption>{body}</table>"
