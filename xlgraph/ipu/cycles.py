"""Estimated cycles per op of a lowered program on the modelled IPU.

Every kernel step is one bulk-synchronous superstep: a sync (``sync_cycles``), an exchange of the
bytes its operands must receive, then compute. The steps of one ``merge_exchange()`` scope share
one sync (the group's first step pays it). A step runs on its op's tile set: the compute tiles, or
the ``numIOTiles`` IO tiles for ops created under ``io_tiles()``. Compute takes the op's declared
flops at the tile throughput for its dtype and engine (the AMP matrix units for matmul and
convolution, the 64-bit vector unit otherwise), spread over the tiles its operands occupy, and
never less than its bytes at the tile memory bandwidth. Exchange: an input shaped like the output
is mapped like it and moves nothing; a broadcast operand of an elementwise op goes whole to every
tile; a matrix op (``C = A @ B``, or a convolution) keeps the largest of ``A``, ``B`` and ``C``
where the planner put it and moves the other two over a 2-D grid of tiles, so each tile receives
their sum over ``sqrt(tiles)``; other inputs are redistributed evenly. Host transfers move their
bytes over the host link, and each run pays one host round trip. Loop bodies count once per
iteration, a conditional its larger arm, a compiled function once per call. Views cost nothing.
This is a model, not a measurement: it leaves out instruction overheads, bank conflicts, code
loading and the host framework (see docs/ipu_model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from xlgraph.core.trampoline import Nested, run
from xlgraph.cost import Cost, nbytes, op_cost
from xlgraph.ipu.hardware import IPUModel
from xlgraph.ipu.mapping import TileRange, tile_sets, tiles_spanned
from xlgraph.ipu.memory import tile_set_of
from xlgraph.lower.program import Program, Step

__all__ = ["OpRow", "CycleEstimate", "estimate_cycles", "row_name"]


@dataclass
class OpRow:
    """One op's totals over a run."""

    name: str
    op: str
    where: str
    flops: float = 0.0
    bytes: int = 0
    cycles: float = 0.0
    executions: int = 0
    tiles: int = 1
    positions: list[int] = field(default_factory=list)  # its steps on the liveness curve

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "op": self.op, "where": self.where, "flops": self.flops,
                "bytes": self.bytes, "cycles": self.cycles, "executions": self.executions,
                "tiles": self.tiles, "positions": list(self.positions)}


@dataclass
class CycleEstimate:
    """Cycles of one ``Session.run``: ``rows`` per op, the host share, and the total."""

    rows: list[OpRow]
    device_cycles: float
    host_cycles: float

    @property
    def total(self) -> float:
        return self.device_cycles + self.host_cycles


def row_name(s: Step) -> str:
    """The name of ``s``'s row: its op's name, prefixed by its graph's outside the main graph."""
    op = s.op
    if op is None:
        return s.kind
    return op.name if op.graph.is_main else f"{op.graph.name}/{op.name}"


def step_cycles(model: IPUModel, cost: Cost, ins: list, outs: list, elementwise: bool,
                tile_count: int | None = None, sync: bool = True) -> tuple[float, int]:
    """(cycles, tiles used) of one kernel execution with ``cost`` on specs ``ins``/``outs``,
    spread over at most ``tile_count`` tiles (default all), paying a sync when ``sync``."""
    sizes = [nbytes(s) for s in (*ins, *outs)]
    tiles = tiles_spanned(max(sizes, default=0), model, tile_count)
    if cost.flops == 0 and cost.bytes_read == 0 and cost.bytes_written == 0:
        return 0.0, tiles
    itemsize = max((np.dtype(s.dtype.as_numpy()).itemsize for s in (*outs, *ins)), default=4)
    rate = model.flops_per_cycle(itemsize, cost.matrix)
    compute = cost.flops / (tiles * rate)
    memory = (cost.bytes_read + cost.bytes_written) / (tiles * model.fact("memory_bytes_per_cycle"))
    if cost.matrix:  # the largest of A, B and C stays put; the other two cross a 2-D grid
        abc = [nbytes(s) for s in (*ins[:2], *outs[:1])]
        received = (sum(abc) - max(abc)) / math.sqrt(tiles)
    else:  # an input shaped like the output is mapped like it: already on the right tiles
        out_shape = outs[0].shape if outs else None
        received = sum(nbytes(s) if elementwise else nbytes(s) / tiles
                       for s in ins if s.shape != out_shape)
    exchange = received / model.exchange_bytes_per_cycle
    return model.sync_cycles * sync + exchange + max(compute, memory), tiles


class _Estimator:
    def __init__(self, program: Program, model: IPUModel, sets: dict[str, TileRange]) -> None:
        self.program = program
        self.model = model
        self.sets = sets
        self.rows: dict[object, OpRow] = {}
        self.host_bytes = 0
        self.link_bytes_per_cycle = model.host_bytes_per_second / model.tile_clock_frequency

    def row(self, s: Step) -> OpRow:
        key = s.op if s.op is not None else s
        if key not in self.rows:
            op = s.op
            self.rows[key] = OpRow(row_name(s), s.defn.name if s.defn else s.kind,
                                   op.created_at if op is not None else "")
        return self.rows[key]

    def body(self, steps: list[Step], times: int) -> Nested[float]:
        total = 0.0
        specs = self.program.specs
        synced_groups: set[object] = set()  # merge_exchange groups whose sync is paid
        for s in steps:
            if s.kind == "loop":
                total += (yield self.body(s.body, times * s.count)) * s.count
            elif s.kind == "cond":
                total += max((yield self.body(s.body, times)), (yield self.body(s.orelse, times)))
            elif s.kind == "func":
                total += yield self.body(s.func.steps, times)
            elif s.kind in ("host_load", "host_store"):
                size = sum(nbytes(specs[x]) for x in (s.outs if s.kind == "host_load" else s.ins))
                self.host_bytes += size * times
                row = self.row(s)
                row.bytes += size * times
                row.cycles += size * times / self.link_bytes_per_cycle
                row.executions += times
            elif s.kind == "kernel":
                ins, outs = [specs[x] for x in s.ins], [specs[x] for x in s.outs]
                cost = op_cost(s.defn, ins, outs, s.attrs)
                group = s.op.hints.get("exchange_group") if s.op is not None else None
                sync = group is None or group not in synced_groups
                synced_groups.add(group)
                cycles, tiles = step_cycles(self.model, cost, ins, outs, s.defn.elementwise,
                                            self.sets[tile_set_of(s)][1], sync)
                row = self.row(s)
                row.flops += cost.flops * times
                row.bytes += (cost.bytes_read + cost.bytes_written) * times
                row.cycles += cycles * times
                row.executions += times
                row.tiles = max(row.tiles, tiles)
                total += cycles
        return total


def estimate_cycles(program: Program, model: IPUModel,
                    sets: dict[str, TileRange] | None = None) -> CycleEstimate:
    """The cycle estimate of one run of ``program`` on ``model`` with the compute and IO tile
    ``sets`` (default: every tile computes)."""
    est = _Estimator(program, model, sets or tile_sets(model))
    device = run(est.body(program.steps, 1))
    link = est.host_bytes / est.link_bytes_per_cycle
    host = model.host_sync_seconds * model.tile_clock_frequency + link
    rows = sorted(est.rows.values(), key=lambda r: -r.cycles)
    return CycleEstimate(rows, device, host)
