"""Simulated devices. Both run the same numpy plan; ``ipu_model`` also models the hardware."""

from __future__ import annotations

from dataclasses import dataclass

from xlgraph.errors import UnsupportedDeviceError
from xlgraph.ipu.hardware import IPUModel

__all__ = ["Device", "make_device"]


@dataclass(frozen=True)
class Device:
    """A device a Session runs on: its name and, for the IPU model, the modelled hardware."""

    name: str
    model: IPUModel | None = None


def make_device(desc: str, ipu_model: IPUModel | None = None) -> Device:
    """The device for ``"cpu"`` or ``"ipu_model"`` (``ipu_model``: the hardware it models,
    PopXL's 4-tile Mk2 IPU by default).

    Raises:
        UnsupportedDeviceError: for ``"ipu_hw"`` or an unknown name, or ``ipu_model`` given
            with another device.
    """
    if ipu_model is not None and desc != "ipu_model":
        raise UnsupportedDeviceError(
            f"ipu_model={ipu_model!r} describes the hardware of device 'ipu_model', not "
            f"{desc!r}: use Session(ir, 'ipu_model', ipu_model=...)"
        )
    if desc == "cpu":
        return Device("cpu")
    if desc == "ipu_model":
        return Device("ipu_model", ipu_model or IPUModel())
    if desc == "ipu_hw":
        raise UnsupportedDeviceError(
            "device 'ipu_hw' needs Graphcore hardware and its SDK, which xlgraph does not use; "
            "run on the simulator with Session(ir, 'ipu_model') or Session(ir, 'cpu')"
        )
    raise UnsupportedDeviceError(
        f"unknown device {desc!r}; choose 'cpu' or 'ipu_model' ('ipu_hw' is not available)"
    )
