"""The modelled IPU: ``IPUModel`` and the one table of hardware constants with their sources.

``IPUModel`` mirrors the knobs of ``poplar::IPUModel`` in Python style. Its defaults are
PopXL's ``"ipu_model"``: PopART creates a 4-tile Mk2 (``ipu2``) model unless told otherwise;
``IPUModel.full()`` gives a whole chip (1,472 tiles).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from xlgraph.errors import ArgumentError, whole_number

__all__ = ["Fact", "HARDWARE", "IPUModel"]


@dataclass(frozen=True)
class Fact:
    """A hardware constant and where its value comes from."""

    value: float
    source: str


_GC200 = "Graphcore GC200 IPU (Mk2) / IPU-M2000 datasheet"
_BOW = "Graphcore Bow IPU / Bow-2000 datasheet"
_ISA = ("Graphcore IPU Programmer's Guide (tile architecture); Jia et al. 2019, 'Dissecting the "
        "Graphcore IPU Architecture via Microbenchmarking' (arXiv:1912.03413)")

_COMMON = {
    "tiles": Fact(1472, f"{_GC200}: 1,472 tiles"),
    "memory_bytes_per_tile": Fact(638_976, f"{_GC200}: 624 KiB SRAM per tile, 1,472 x 624 KiB "
                                           f"= 897 MiB ('900 MB In-Processor-Memory')"),
    "workers": Fact(6, f"{_ISA}: six hardware worker contexts per tile"),
    "matrix_flops_per_cycle_16": Fact(128, "float16 flops per tile per cycle on the AMP "
                                           "(matrix) units: 250 TFLOPS / (1,472 x 1.33 GHz)"),
    "matrix_flops_per_cycle_32": Fact(32, "float32 flops per tile per cycle on the AMP units: "
                                          "62.5 TFLOPS / (1,472 x 1.33 GHz)"),
    "vector_flops_per_cycle_16": Fact(4, f"{_ISA}: one 64-bit vector instruction per tile per "
                                         f"cycle, 4 float16 lanes (f16v4)"),
    "vector_flops_per_cycle_32": Fact(2, f"{_ISA}: one 64-bit vector instruction per tile per "
                                         f"cycle, 2 float32 lanes (f32v2)"),
    "memory_bytes_per_cycle": Fact(16, f"{_ISA}: two 64-bit loads per cycle per tile "
                                       f"(47.5 TB/s per chip / (1,472 x 1.33 GHz) = 24 at best)"),
    "exchange_bytes_per_cycle": Fact(4, f"{_GC200}: 8 TB/s all-to-all exchange / (1,472 x "
                                        f"1.33 GHz) = 4.1; poplar::IPUModel exchangeBytesPerCycle"),
    "sync_cycles": Fact(150, "assumption: cycles of one on-chip bulk-synchronous barrier (the "
                             "order of magnitude Jia et al. 2019 measure)"),
    "host_bytes_per_second": Fact(12.5e9, f"{_GC200}: the IPU-M2000 reaches its host over "
                                          f"100 Gb/s RoCE (12.5 GB/s), shared by its 4 IPUs"),
    "host_sync_seconds": Fact(20e-6, "assumption: latency of one host round trip (a "
                                     "Session.run: stream sync through the gateway)"),
    "code_bytes_per_vertex_type": Fact(
        2048, "assumption: machine code of one codelet (vertex type) on a tile: Poplar loads "
              "one copy per vertex type a tile runs, shared by all its vertices; PopVision's "
              "'Vertex Code' rows show hundreds of bytes to a few KiB per codelet"),
    "bytes_per_vertex": Fact(
        32, "assumption: one vertex's state on a tile (a handful of 32-bit edge pointers and "
            "sizes, Poplar's vertex fields) plus its share of the compute set's control code"),
    "exchange_buffer_bytes": Fact(8192, "assumption: exchange code and buffers per tile"),
    "grain_bytes": Fact(8, "linear tile mapping in 64-bit grains (one vector), as "
                           "poputil::mapTensorLinearly maps by default"),
    "min_bytes_per_tile": Fact(128, "poputil::mapTensorLinearly(graph, t) (Poplar "
                                    "TileMapping.cpp): at least 128 bytes per tile"),
}

# the facts of each modelled chip ("ipu2": GC200, "ipu21": Bow), each with its source
HARDWARE: dict[str, dict[str, Fact]] = {
    "ipu2": {**_COMMON, "clock_hz": Fact(1.33e9, f"{_GC200}: 1.33 GHz tile clock")},
    "ipu21": {**_COMMON, "clock_hz": Fact(1.85e9, f"{_BOW}: 1.85 GHz tile clock (350 TFLOPS "
                                                  f"float16 = 1,472 x 128 x 1.85 GHz)")},
}
"""Hardware constants per IPU version, each with its source. Values marked "assumption" are
not published; they are the model's guesses and the report says so."""


@dataclass(frozen=True)
class IPUModel:
    """The hardware ``Session(ir, "ipu_model", ipu_model=...)`` models.

    Args:
        ipu_version: ``"ipu2"`` (Mk2 GC200, the default) or ``"ipu21"`` (Bow).
        num_ipus: IPUs; memory and compute add up over them (no inter-IPU links are modelled).
        tiles_per_ipu: 4 by default, as PopXL's ipu_model; 1472 is a whole chip.
        memory_bytes_per_tile: tile SRAM (None: the version's, 638,976 bytes).
        tile_clock_frequency: Hz (None: the version's).
        num_worker_contexts: worker threads per tile.
        exchange_bytes_per_cycle: bytes a tile receives per cycle over the exchange.
        host_bytes_per_second: host link bandwidth for stream data.
        host_sync_seconds: latency of one host round trip (once per ``Session.run``).
        sync_cycles: cycles of one internal sync (one per compute step).
    """

    ipu_version: str = "ipu2"
    num_ipus: int = 1
    tiles_per_ipu: int = 4
    memory_bytes_per_tile: int | None = None
    tile_clock_frequency: float | None = None
    num_worker_contexts: int | None = None
    exchange_bytes_per_cycle: float | None = None
    host_bytes_per_second: float | None = None
    host_sync_seconds: float | None = None
    sync_cycles: int | None = None

    def __post_init__(self) -> None:
        if self.ipu_version not in HARDWARE:
            raise ValueError(f"IPUModel: ipu_version {self.ipu_version!r} is not one of "
                             f"{sorted(HARDWARE)}")
        table = HARDWARE[self.ipu_version]
        defaults = {
            "memory_bytes_per_tile": "memory_bytes_per_tile", "tile_clock_frequency": "clock_hz",
            "num_worker_contexts": "workers", "exchange_bytes_per_cycle":
                "exchange_bytes_per_cycle", "host_bytes_per_second": "host_bytes_per_second",
            "host_sync_seconds": "host_sync_seconds", "sync_cycles": "sync_cycles",
        }
        for knob, key in defaults.items():
            if getattr(self, knob) is None:
                value = table[key].value
                object.__setattr__(self, knob, int(value) if knob in _INTS else value)
        for knob, least in _WHOLE.items():
            whole_number(getattr(self, knob), f"IPUModel {knob}", least)
        for knob in _REALS:
            value, zero_ok = getattr(self, knob), knob == "host_sync_seconds"
            if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                    or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok)):
                raise ArgumentError(f"IPUModel {knob} must be a finite number "
                                    f"{'>= 0' if zero_ok else '> 0'}, got {value!r}")

    @classmethod
    def full(cls, ipu_version: str = "ipu2", num_ipus: int = 1, **knobs: object) -> IPUModel:
        """A model of whole chips (every tile of ``ipu_version``)."""
        tiles = int(HARDWARE[ipu_version]["tiles"].value)
        return cls(ipu_version, num_ipus, tiles, **knobs)  # type: ignore[arg-type]

    @property
    def tiles(self) -> int:
        """Tiles over all IPUs."""
        return self.num_ipus * self.tiles_per_ipu

    def fact(self, key: str) -> float:
        """A constant of this model's IPU version from ``HARDWARE``."""
        return HARDWARE[self.ipu_version][key].value

    def flops_per_cycle(self, itemsize: int, matrix: bool) -> float:
        """Peak flops per tile per cycle for operands of ``itemsize`` bytes."""
        width = 16 if itemsize <= 2 else 32
        return self.fact(f"{'matrix' if matrix else 'vector'}_flops_per_cycle_{width}")

    def peak_flops_per_cycle(self) -> float:
        """The fastest any op can go on the whole model: float16 on every tile's AMP units."""
        return self.tiles * self.fact("matrix_flops_per_cycle_16")

    def describe(self) -> str:
        """One line naming the chip, the IPU count, tiles, memory per tile and clock."""
        return (f"{self.num_ipus} x {self.ipu_version} IPU, {self.tiles_per_ipu} tiles of "
                f"{self.memory_bytes_per_tile:,} bytes, {self.tile_clock_frequency / 1e9:.2f} GHz")

    def replace(self, **knobs: object) -> IPUModel:
        """A copy with some knobs changed."""
        return dataclasses.replace(self, **knobs)  # type: ignore[arg-type]


_INTS = {"memory_bytes_per_tile", "num_worker_contexts", "sync_cycles"}
_WHOLE = {"num_ipus": 1, "tiles_per_ipu": 1, "memory_bytes_per_tile": 1, "num_worker_contexts": 1,
          "sync_cycles": 0}  # the smallest value of each whole-number knob
_REALS = ("tile_clock_frequency", "exchange_bytes_per_cycle", "host_bytes_per_second",
          "host_sync_seconds")  # positive, except host_sync_seconds (>= 0)
