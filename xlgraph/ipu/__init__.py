"""The IPU model behind ``Session(ir, "ipu_model")``: hardware, tile memory, cycles, report.

``IPUModel`` describes the hardware (``hardware.py``, one table of constants with sources);
``memory.py`` maps every tensor onto tiles and checks the peak against tile capacity at Session
creation; ``cycles.py`` estimates cycles per op; ``report.py`` presents both
(``session.report()``). Everything here is a model of the chip, not a measurement.
"""

from __future__ import annotations

from typing import Any

from xlgraph.ipu.autoreport import engine_option_true
from xlgraph.ipu.cycles import estimate_cycles
from xlgraph.ipu.hardware import HARDWARE, IPUModel
from xlgraph.ipu.mapping import tile_sets
from xlgraph.ipu.memory import MemoryProfile, check_fits, profile_memory
from xlgraph.ipu.report import ProfileReport
from xlgraph.ir import Ir

__all__ = ["HARDWARE", "IPUModel", "MemoryProfile", "ProfileReport", "model_memory",
           "make_report"]


def _lowered(ir: Ir, executable: Any) -> Any:
    """The compiled plan of one replica of ``ir`` (built for the model when the Session
    interprets, or runs several replicas at once)."""
    if hasattr(executable, "plans") and executable.ctx is None:
        return executable
    from xlgraph.lower.executable import CompiledExecutable

    return CompiledExecutable(ir)


def model_memory(ir: Ir, executable: Any, model: IPUModel) -> MemoryProfile:
    """The tile memory of ``ir`` lowered as ``executable``; raises OutOfMemoryError when it
    does not fit ``model``, unless Poplar's engine option ``debug.allowOutOfMemory`` is
    ``"true"`` (then the program runs and its report shows the tiles over)."""
    lowered = _lowered(ir, executable)
    sets = tile_sets(model, ir.session_options.numIOTiles)
    profile = profile_memory(lowered.program, lowered.plans, model, sets)
    if not engine_option_true(ir.session_options.engineOptions, "debug.allowOutOfMemory"):
        check_fits(profile)
    return profile


def make_report(ir: Ir, memory: MemoryProfile) -> ProfileReport:
    """The profile report: ``memory`` with the cycle estimate of the same program."""
    cycles = estimate_cycles(memory.program, memory.model, memory.tile_sets)
    return ProfileReport.from_profile(memory, cycles, ir.num_host_transfers)
