"""Tile memory of a lowered program: always-live and not-always-live bytes per tile and step.

*Always-live* memory is held for the whole run: variables, constants, and modelled code and
exchange overheads: ``code_bytes_per_vertex_type`` once per vertex type (op kind and dtype) on
each tile that runs one, ``bytes_per_vertex`` of state per op on each tile it spans, and
``exchange_buffer_bytes`` per tile. Stream buffers are on the host (PopART's host-side FIFOs);
on the device a stream's data is the value ``host_load`` makes, live like any other. (Before,
every op was charged 512 bytes of code on every tile it used; Poplar shares a codelet between
all vertices of its type.) *Not-always-live* memory is every other value, from
the step that makes its storage to its last use, as the shared liveness analysis and the buffer
plan give them (views cost nothing, a compiled function's peak counts at its call). The
simulator's scratch arrays (numpy temporaries of kernels such as ``accumulate_``) are not
device memory: the IPU's vertices update in place, so the model does not charge them. Every
tensor sits on tiles by the linear mapping: values
made by ops on the IO tile set (``popxl.io_tiles()``) on the ``numIOTiles`` reserved IO tiles,
everything else on the compute tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xlgraph.cost import nbytes
from xlgraph.errors import OutOfMemoryError
from xlgraph.ipu.hardware import IPUModel
from xlgraph.ipu.mapping import TileRange, bytes_per_tile, tile_sets, tiles_spanned
from xlgraph.lower.plan import Plan
from xlgraph.lower.program import Function, Program, Step, walk

__all__ = ["MemoryProfile", "profile_memory", "check_fits"]


@dataclass(eq=False)
class MemoryProfile:
    """Memory of the main program on every tile.

    ``always_live[category]`` are per-tile bytes; ``curve[p, t]`` the not-always-live bytes on
    tile ``t`` while the step at position ``p`` runs (row 0: before the first step).
    """

    model: IPUModel
    always_live: dict[str, np.ndarray]
    curve: np.ndarray
    steps: list[Step]  # steps[p - 1] is the step at position p
    live_roots: list[tuple[int, int, int, str, str, str]]  # (start, end, bytes, name, spec, set)
    resident: list[tuple[str, str, np.ndarray]]  # (name, spec, bytes per tile): always-live
    plan: Plan
    program: Program
    tile_sets: dict[str, TileRange]  # "compute" and "io": (first tile, number of tiles)

    @property
    def always_live_total(self) -> np.ndarray:
        """Always-live bytes per tile, all categories summed."""
        return sum(self.always_live.values(), np.zeros(self.model.tiles, np.int64))

    @property
    def peak(self) -> np.ndarray:
        """Peak bytes per tile (always-live plus the largest not-always-live)."""
        return self.always_live_total + self.curve.max(axis=0)

    def largest_at(self, position: int, tile: int, count: int = 5) -> list[tuple[str, str, int]]:
        """(name, spec, bytes on ``tile``) of the largest values live at ``position``."""
        live = [(int(bytes_per_tile(size, self.model, self.tile_sets[where])[tile]), name, spec)
                for start, end, size, name, spec, where in self.live_roots
                if start <= position <= end]
        live.sort(reverse=True)
        return [(name, spec, size) for size, name, spec in live[:count] if size]


def _slot_names(program: Program) -> dict[int, str]:
    names = {slot: v.name for slot, v in program.variable_slots.items()}
    names.update((slot, c.name) for slot, c in program.constant_slots.items())
    for s in program.walk():
        if s.op is not None and s.kind in ("kernel", "host_load"):
            names.update((o, t.name) for o, t in zip(s.outs, s.op.outputs))
    return names


def tile_set_of(step: Step) -> str:
    """``"io"`` for a step whose op was created under ``io_tiles()``, else ``"compute"``."""
    return step.op.hints.get("tile_set", "compute") if step.op is not None else "compute"


class _Builder:
    def __init__(self, program: Program, plans: dict[Program | Function, Plan],
                 model: IPUModel, sets: dict[str, TileRange]) -> None:
        self.program = program
        self.plans = plans
        self.model = model
        self.sets = sets
        self.names = _slot_names(program)
        self.function_peaks: dict[Function, np.ndarray] = {}
        bodies = [program.steps] + [fn.steps for fn in program.functions]
        self.io_slots = {o for body in bodies for s in walk(body) if tile_set_of(s) == "io"
                         for o in s.outs}

    def tiles(self, size: int, where: str = "compute") -> np.ndarray:
        return bytes_per_tile(size, self.model, self.sets[where])

    def body_curve(self, body: Program | Function, steps: list[Step], entry: set[int],
                   roots_out: list[tuple[int, int, int, str, str, str]] | None) -> np.ndarray:
        """Not-always-live bytes per position and tile of one body."""
        plan, specs = self.plans[body], self.program.specs
        live = plan.live
        delta = np.zeros((live.end + 2, self.model.tiles), np.int64)
        constants = self.program.constant_slots
        for root, start in plan.defined.items():
            if root in entry or root in constants:
                continue
            end = min(max(plan.last_use.get(root, start), start), live.end)
            size = nbytes(specs[root])
            where = "io" if root in self.io_slots else "compute"
            vec = self.tiles(size, where)
            delta[start] += vec
            delta[end + 1] -= vec
            if roots_out is not None:
                roots_out.append((start, end, size, self.names.get(root, f"%{root}"),
                                  str(specs[root]), where))
        for s, pos in live.positions.items():
            if s.kind == "func":
                delta[pos] += self.function_peaks[s.func]
                delta[pos + 1] -= self.function_peaks[s.func]
        return np.cumsum(delta[:-1], axis=0)

    def always_live(self) -> dict[str, np.ndarray]:
        zeros = np.zeros(self.model.tiles, np.int64)
        program = self.program
        per_type = int(self.model.fact("code_bytes_per_vertex_type"))
        per_vertex = int(self.model.fact("bytes_per_vertex"))
        types = np.zeros(self.model.tiles, np.int64)
        vertices = zeros.copy()
        seen: dict[tuple[str, str], np.ndarray] = {}
        bodies = [program.steps] + [fn.steps for fn in program.functions]
        for s in (s for body in bodies for s in walk(body) if s.kind == "kernel"):
            size = max((nbytes(program.specs[o]) for o in s.outs), default=0)
            first, count = self.sets[tile_set_of(s)]
            used = np.zeros(self.model.tiles, bool)
            used[first:first + tiles_spanned(size, self.model, count)] = True
            vertices[used] += per_vertex
            dtype = program.specs[s.outs[0]].dtype.name if s.outs else ""
            key = (s.defn.name if s.defn is not None else s.kind, dtype)
            tiles = seen.setdefault(key, np.zeros(self.model.tiles, bool))
            types[used & ~tiles] += 1
            tiles |= used
        return {
            "variables": sum((self.tiles(nbytes(v.spec)) for v in
                              program.variable_slots.values()), zeros),
            "constants": sum((self.tiles(nbytes(program.specs[c])) for c in
                              program.constant_slots), zeros),
            "code": types * per_type,
            "vertex state": vertices,
            "exchange": zeros + int(self.model.fact("exchange_buffer_bytes")),
        }

    def always_live_tensors(self) -> list[tuple[str, str, np.ndarray]]:
        """(name, spec, bytes per tile) of every variable and constant."""
        program = self.program
        out = [(v.name, str(v.spec), self.tiles(nbytes(v.spec)))
               for v in program.variable_slots.values()]
        out += [(self.names.get(c, f"%{c}"), str(program.specs[c]),
                 self.tiles(nbytes(program.specs[c]))) for c in program.constant_slots]
        return out


def profile_memory(program: Program, plans: dict[Program | Function, Plan], model: IPUModel,
                   sets: dict[str, TileRange] | None = None) -> MemoryProfile:
    """The memory profile of ``program`` (its ``plans`` from the lowering) on ``model``, with
    the compute and IO tile ``sets`` (default: every tile computes)."""
    sets = sets or tile_sets(model)
    builder = _Builder(program, plans, model, sets)
    for fn in program.functions:  # callees first
        builder.function_peaks[fn] = builder.body_curve(fn, fn.steps, set(fn.params),
                                                        None).max(axis=0)
    roots: list[tuple[int, int, int, str, str, str]] = []
    curve = builder.body_curve(program, program.steps, set(program.variable_slots), roots)
    plan = plans[program]
    steps = sorted(plan.live.positions, key=plan.live.positions.__getitem__)
    return MemoryProfile(model, builder.always_live(), curve, steps, roots,
                         builder.always_live_tensors(), plan, program, sets)


def check_fits(profile: MemoryProfile) -> None:
    """Raise OutOfMemoryError when any tile needs more than ``memory_bytes_per_tile``.

    The error names the tile, the bytes over, the always-live tensors there (variables,
    optimizer state and constants: they hold their memory whatever the schedule), then the op
    and user line at the not-always-live peak and the largest values live there.
    """
    model = profile.model
    capacity = model.memory_bytes_per_tile
    always = profile.always_live_total
    totals = always + profile.curve.max(axis=0)
    if totals.max() <= capacity:
        return
    tile = int(np.argmax(totals))
    position = int(np.argmax(profile.curve[:, tile]))
    where = "before the first step"
    if position >= 1:
        step = profile.steps[position - 1]
        op = step.op
        what = op.name if op is not None else step.kind
        where = f"at step {position} ({what}" + (f", created at {op.created_at})"
                                                 if op is not None else ")")
    resident = sorted(((int(b[tile]), name, spec) for name, spec, b in profile.resident
                       if b[tile]), reverse=True)
    held = ", ".join(f"{name} {spec} ({size:,} bytes here)" for size, name, spec in resident[:5])
    if len(resident) > 5:
        held += f" and {len(resident) - 5} more ({sum(r[0] for r in resident[5:]):,} bytes)"
    largest = profile.largest_at(position, tile)
    listing = ", ".join(f"{name} {spec} ({size:,} bytes here)" for name, spec, size in largest)
    parts = ", ".join(f"{k} {int(v[tile]):,}" for k, v in profile.always_live.items())
    over = sum(1 for t in totals if t > capacity)
    raise OutOfMemoryError(
        f"the program does not fit the modelled IPU ({model.describe()}): tile {tile} needs "
        f"{int(totals[tile]):,} bytes of its {capacity:,}, {int(totals[tile]) - capacity:,} "
        f"over ({over} of {model.tiles} tiles over); always-live {int(always[tile]):,} "
        f"({parts}); variables, optimizer state and constants there: {held or 'none'}; "
        f"not-always-live {int(profile.curve[position, tile]):,} at its peak {where}; largest "
        f"live tensors there: {listing or 'none'}. Try more tiles (xlgraph.IPUModel.full() or a "
        f"larger tiles_per_ipu), a smaller batch, or recomputing activations in the backward "
        f"pass instead of keeping them"
    )
