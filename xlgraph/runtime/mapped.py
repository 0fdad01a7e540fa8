"""The Session's memory-mapped variables: which maps it writes back, and what it refuses.

The rule (docs/popxl-compat.md): a map is written back only when the program writes its
variable, so a Session that only reads a map never puts its copy, read when it attached, over
what another Session saved there since; a read-only map is never written. As in PopXL, an Ir
with a read-only map (``ir._has_read_only_memmap``) turns ``weights_to_host_on_exit`` off and
refuses an explicit ``weights_to_host``; its other variables still come back when
``get_tensor_data`` asks for them.
"""

from __future__ import annotations

import numpy as np

from xlgraph.core.memmaps import is_read_only, popart_log
from xlgraph.errors import MemmapError, user_source_line
from xlgraph.ir import Ir
from xlgraph.runtime.host_maps import Spill, is_large_map
from xlgraph.runtime.remote_memory import RemoteMemory
from xlgraph.runtime.replica_layout import ReplicaLayout
from xlgraph.tensor import Variable

__all__ = ["MappedVariables"]


def _stored(ir: Ir, remote: list[Variable]) -> set[Variable]:
    """The remote variables whose entry some ``remote_store`` may overwrite."""
    stores = [op.attrs for g in ir.graphs for op in g.ops if op.defn.name == "remote_store"]
    return {v for v in remote for a in stores
            if a["buffer"] is v.remote.buffer and a["offset"] in (None, v.remote.offset)}


def _describe(v: Variable) -> str:
    return f"{v.id!r} ({v.host_memmap.filename})"


class MappedVariables:
    """The maps of an Ir's variables, and which of them a run writes (``changed``: the
    executable's written variables; ``remote``: the Session's off-chip memory)."""

    def __init__(self, ir: Ir, changed: set[Variable], remote: RemoteMemory) -> None:
        self.ir = ir
        self.remote = remote
        self.maps = [v for v in ir.main_graph.variables if v.host_memmap is not None]
        self.written = {v for v in self.maps if v in changed} | (
            _stored(ir, [v for v in remote.variables if v.host_memmap is not None]))
        self.read_only = [v for v in self.maps if is_read_only(v.host_memmap)]
        trained = [_describe(v) for v in self.read_only if v in self.written]
        if trained:
            popart_log().warning(
                "The program writes %s, whose memory map is read-only: the new values stay on "
                "the device and are never written to the file.", ", ".join(trained))

    @staticmethod
    def host_copy(v: Variable, layout: ReplicaLayout) -> np.ndarray:
        """``v``'s host copy in the device layout: its map itself when the layouts agree."""
        if v.host_memmap is not None and layout.device_shape(v) == v.shape_on_host:
            return v.host_memmap
        return np.array(layout.expand(v, v.initial_data))

    def through_map(self, v: Variable, value: np.ndarray) -> np.ndarray:
        """``get_tensor_data`` of remote variable ``v`` whose value is ``value``: as PopXL, a
        mapped one comes back through its map (left alone when the program never stores it)."""
        if v.host_memmap is None:
            return value
        self.check_read(v)
        if not self.kept(v):
            np.copyto(v.host_memmap, value)
        return v.host_memmap

    def remote_to_host(self) -> None:
        """Write the remote variables the program stores back into their maps."""
        for v in self.remote.variables:
            if v.host_memmap is not None and not self.kept(v):
                np.copyto(v.host_memmap, self.remote.read(v, v.host_memmap))

    def kept(self, v: Variable) -> bool:
        """Whether ``v``'s map is left as it is when weights come back: the program never
        writes ``v`` (its map still holds the device's value) or the map is read-only."""
        return v.host_memmap is not None and (
            v not in self.written or is_read_only(v.host_memmap))

    def spare(self, v: Variable, live: np.ndarray, host: np.ndarray) -> np.ndarray | Spill:
        """Where a run keeps its snapshot of ``v`` (a written variable, device array ``live``,
        host copy ``host``): a file for a large map (restored from ``host`` while that is in
        sync, which a map left alone never is), else a spare array."""
        if is_large_map(v.host_memmap):
            return Spill(None if self.kept(v) else host)
        return np.empty_like(live)

    def flush(self) -> None:
        """Flush every writable map to its file (PopXL's ``weights_to_host`` does)."""
        for v in self.maps:
            if not is_read_only(v.host_memmap):
                v.host_memmap.flush()

    def on_exit(self, requested: bool) -> bool:
        """``weights_to_host_on_exit`` for this Ir: off when it has a read-only map."""
        if requested and self.ir._has_read_only_memmap:
            popart_log().info("weights_to_host_on_exit is turned off: the ir contains a read-only "
                      "memmap (%s).", ", ".join(map(_describe, self.read_only)))
            return False
        return requested

    def check_weights_to_host(self) -> None:
        """PopXL refuses ``weights_to_host`` for an Ir with a read-only map."""
        if self.ir._has_read_only_memmap:
            raise MemmapError(
                "Writing data from device to host is not possible as the `ir` contains a "
                f"read-only memmap. Read-only: {', '.join(map(_describe, self.read_only))}; "
                f"other variables come back through session.get_tensor_data "
                f"[at {user_source_line()}]")

    def check_read(self, v: Variable) -> None:
        """While attached: ``v``'s device value cannot come back into a read-only map."""
        if v in self.written and is_read_only(v.host_memmap):
            raise MemmapError(
                f"get_tensor_data: the program writes {_describe(v)}, whose memory map is "
                f"read-only, so its device value cannot come back through the map; open the "
                f"map writable (read_only_if_exists=False) [at {user_source_line()}]")

    def check_write(self, v: Variable) -> None:
        """``write_variable_data`` writes through the map: not into a read-only one."""
        if is_read_only(v.host_memmap):
            raise MemmapError(f"write_variable_data: the memory map of {_describe(v)} is "
                              f"read-only [at {user_source_line()}]")
