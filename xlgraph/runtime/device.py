"""Simulated devices. Both run the same numpy plan; ``ipu_model`` also carries a hardware spec."""

from __future__ import annotations

from dataclasses import dataclass

from xlgraph.errors import UnsupportedDeviceError

__all__ = ["DeviceSpec", "Device", "make_device"]


@dataclass(frozen=True)
class DeviceSpec:
    """The modelled hardware: PopART's default IPU model has 4 tiles of a Mk2 IPU."""

    num_ipus: int = 1
    tiles_per_ipu: int = 4
    bytes_per_tile: int = 638_976
    clock_hz: float = 1.33e9
    workers_per_tile: int = 6


@dataclass(frozen=True)
class Device:
    """A device a Session runs on: its name and, for the IPU model, its hardware spec."""

    name: str
    spec: DeviceSpec | None = None


def make_device(desc: str) -> Device:
    """The device for ``"cpu"`` or ``"ipu_model"``.

    Raises:
        UnsupportedDeviceError: for ``"ipu_hw"`` or an unknown name.
    """
    if desc == "cpu":
        return Device("cpu")
    if desc == "ipu_model":
        return Device("ipu_model", DeviceSpec())
    if desc == "ipu_hw":
        raise UnsupportedDeviceError(
            "device 'ipu_hw' needs Graphcore hardware and its SDK, which xlgraph does not use; "
            "run on the simulator with Session(ir, 'ipu_model') or Session(ir, 'cpu')"
        )
    raise UnsupportedDeviceError(
        f"unknown device {desc!r}; choose 'cpu' or 'ipu_model' ('ipu_hw' is not available)"
    )
