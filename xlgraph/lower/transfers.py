"""The host-transfer rule, warned about when a Session is created.

Each run moves ``num_host_transfers`` transfers through every stream the program uses: each
execution of a stream's ``host_load`` (or ``host_store``) takes the next transfer, counting each
op once per iteration of the repeats around it, and wraps around after the last. PopXL never
checks the count, and programs rely on that (an inference benchmark sets
``num_host_transfers`` to its device iterations but loads each input once per run), so a
mismatch only warns: fewer executions leave the later transfers unread (outputs stay zero), more
read or overwrite a transfer twice. The two arms of a conditional should agree, since which one
runs is known only at run time.
"""

from __future__ import annotations

import warnings
from collections import Counter

from xlgraph.core.trampoline import Nested, run
from xlgraph.errors import user_source_line
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.ops.control import branch_of

__all__ = ["check_host_transfers", "transfers_per_run"]

_KINDS = ("host_load", "host_store")


def transfers_per_run(graph: Graph, memo: dict[Graph, Counter],
                      notes: list[str] | None = None) -> Counter:
    """``{(kind, stream id): executions}`` of the host transfer ops of one run of ``graph``
    (a conditional counts its then-arm; ``notes`` gets a line for arms that differ)."""
    return run(_per_run(graph, memo, [] if notes is None else notes))


def _per_run(graph: Graph, memo: dict[Graph, Counter], notes: list[str]) -> Nested[Counter]:
    if graph in memo:
        return memo[graph]
    total: Counter = Counter()
    for op in graph.ops:
        kind = op.defn.kind
        if kind in _KINDS:
            total[(kind, id(op.attrs["stream"]))] += 1
        elif kind == "conditional":
            arms = [(yield _per_run(branch_of(op, True)[0], memo, notes)),
                    (yield _per_run(branch_of(op, False)[0], memo, notes))]
            if arms[0] != arms[1]:
                notes.append(
                    f"{op.describe()}: its branches make different host transfers "
                    f"({_text(arms[0], graph.ir)} vs {_text(arms[1], graph.ir)})")
            total.update(arms[0])
        else:
            times = op.attrs["count"] if kind == "repeat" else 1
            for callee in op.called_graphs:
                for key, n in (yield _per_run(callee, memo, notes)).items():
                    total[key] += n * times
    memo[graph] = total
    return total


def _names(ir: Ir) -> dict[int, str]:
    return {id(s): s.name for s in (*ir.h2d_streams, *ir.d2h_streams)}


def _text(counts: Counter, ir: Ir) -> str:
    names = _names(ir)
    return ", ".join(f"{kind} {names.get(sid, '?')!r} x{n}" for (kind, sid), n in counts.items())


def check_host_transfers(ir: Ir) -> None:
    """Warn (``UserWarning``) when a stream does not move ``num_host_transfers`` transfers per
    run, or a conditional's arms transfer differently (see the module docstring)."""
    want = ir.num_host_transfers
    names = _names(ir)
    notes: list[str] = []
    for (kind, sid), n in transfers_per_run(ir.main_graph, {}, notes).items():
        if n != want:
            notes.append(f"{kind} of stream {names.get(sid, '?')!r} runs {n} time(s) per run "
                         f"for num_host_transfers={want}")
    if notes:
        warnings.warn(
            f"host transfers do not match ir.num_host_transfers={want} (PopXL does not check "
            f"this either; each transfer op takes the next slice and wraps around, and output "
            f"slices never stored stay zero): {'; '.join(notes)} [Session created at "
            f"{user_source_line()}]", UserWarning, stacklevel=2)
