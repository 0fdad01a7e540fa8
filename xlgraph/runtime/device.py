"""Simulated devices. Both run the same numpy plan; ``ipu_model`` also models the hardware."""

from __future__ import annotations

from dataclasses import dataclass

from xlgraph.errors import UnsupportedDeviceError
from xlgraph.ipu.hardware import IPUModel

__all__ = ["Device", "make_device", "run_ipu_hw_on"]


@dataclass(frozen=True)
class Device:
    """A device a Session runs on: its name and, for the IPU model, the modelled hardware."""

    name: str
    model: IPUModel | None = None


_ipu_hw_stand_in: list[IPUModel] = []  # set by ``python -m xlgraph.popxl_compat --device``


def run_ipu_hw_on(model: IPUModel | None) -> None:
    """Run programs that ask for ``"ipu_hw"`` on the ipu_model ``model`` (None: refuse
    ``"ipu_hw"`` again). ``python -m xlgraph.popxl_compat --device ipu_model`` sets a whole
    chip, ``IPUModel.full()``: a program written for hardware expects a whole IPU's memory."""
    _ipu_hw_stand_in.clear()
    if model is not None:
        _ipu_hw_stand_in.append(model)


def make_device(desc: str, ipu_model: IPUModel | None = None) -> Device:
    """The device for ``"cpu"`` or ``"ipu_model"`` (``ipu_model``: the hardware it models,
    PopXL's 4-tile Mk2 IPU by default); ``"ipu_hw"`` only after ``run_ipu_hw_on``.

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
    if desc == "ipu_hw" and _ipu_hw_stand_in:
        return Device("ipu_model", _ipu_hw_stand_in[0])
    if desc == "ipu_hw":
        raise UnsupportedDeviceError(
            "Session(ir, 'ipu_hw'): there is no IPU hardware here; use 'ipu_model' (or run the "
            "program unchanged with `python -m xlgraph.popxl_compat --device ipu_model "
            "script.py`, which models a whole chip)"
        )
    raise UnsupportedDeviceError(
        f"unknown device {desc!r}; choose 'cpu' or 'ipu_model' ('ipu_hw' is not available)"
    )
