"""The host-transfer rule, checked when a Session is created.

Each run moves ``num_host_transfers`` transfers through every stream the program uses: a
stream's ``host_load`` ops (or ``host_store`` ops) must execute exactly that many times per run,
counting each op once per iteration of the repeats around it. Fewer would leave transfers
unread (inputs dropped, outputs left as zeros); more would wrap around and read or overwrite
a transfer twice. The two arms of a conditional must agree, since which one runs is known only
at run time.
"""

from __future__ import annotations

from collections import Counter

from xlgraph.core.trampoline import Nested, run
from xlgraph.errors import StreamInputError
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.ops.control import branch_of

__all__ = ["check_host_transfers", "transfers_per_run"]

_KINDS = ("host_load", "host_store")


def transfers_per_run(graph: Graph, memo: dict[Graph, Counter]) -> Counter:
    """``{(kind, stream id): executions}`` of the host transfer ops of one run of ``graph``."""
    return run(_per_run(graph, memo))


def _per_run(graph: Graph, memo: dict[Graph, Counter]) -> Nested[Counter]:
    if graph in memo:
        return memo[graph]
    total: Counter = Counter()
    for op in graph.ops:
        kind = op.defn.kind
        if kind in _KINDS:
            total[(kind, id(op.attrs["stream"]))] += 1
        elif kind == "conditional":
            arms = [(yield _per_run(branch_of(op, True)[0], memo)),
                    (yield _per_run(branch_of(op, False)[0], memo))]
            if arms[0] != arms[1]:
                raise StreamInputError(
                    f"{op.describe()}: its branches make different host transfers "
                    f"({_text(arms[0], graph.ir)} vs {_text(arms[1], graph.ir)}); both arms of "
                    f"a conditional must load and store the same streams the same number of times"
                )
            total.update(arms[0])
        else:
            times = op.attrs["count"] if kind == "repeat" else 1
            for callee in op.called_graphs:
                for key, n in (yield _per_run(callee, memo)).items():
                    total[key] += n * times
    memo[graph] = total
    return total


def _names(ir: Ir) -> dict[int, str]:
    return {id(s): s.name for s in (*ir.h2d_streams, *ir.d2h_streams)}


def _text(counts: Counter, ir: Ir) -> str:
    names = _names(ir)
    return ", ".join(f"{kind} {names.get(sid, '?')!r} x{n}" for (kind, sid), n in counts.items())


def check_host_transfers(ir: Ir) -> None:
    """Raise ``StreamInputError`` when a stream does not move ``num_host_transfers`` transfers
    per run (see the module docstring for the rule)."""
    want = ir.num_host_transfers
    names = _names(ir)
    wrong: list[str] = []
    for (kind, sid), n in transfers_per_run(ir.main_graph, {}).items():
        if n != want:
            wrong.append(f"{kind} of stream {names.get(sid, '?')!r} runs {n} time(s)")
    if wrong:
        raise StreamInputError(
            f"each run makes num_host_transfers={want} transfers per stream, so every stream's "
            f"host_load (or host_store) ops must execute {want} time(s) per run, counting "
            f"repeat iterations; but {'; '.join(wrong)}. Set ir.num_host_transfers or repeat "
            f"the transfers to match"
        )

