"""The few PopART names PopXL programs reach through ``import popart``.

Only ``python -m xlgraph.popxl_compat`` installs this package as ``popart`` (it is not PopART
and nothing else imports it under that name): ``SessionOptions`` (PopART's option names, as
``ir._pb_ir.getSessionOptions()`` gives them), ``VariableRetrievalMode``, ``ReductionType``,
``CommGroupType``, ``CommGroup``, ``VirtualGraphMode``, ``DataType``, ``getLogger()``, the
exception types (``popart_exception`` is xlgraph's own
error type, so ``except popart.popart_exception`` catches xlgraph's errors),
``versionString()``, ``DeviceInfo``, and ``popart._internal.ir`` (read-only views of xlgraph's
graphs). Any other ``popart.X`` raises ``AttributeError`` naming what the alias provides.
"""

from __future__ import annotations

import enum

from xlgraph.core.popart_log import LEVELS, popart_logger
from xlgraph.errors import ExecutionError, XlgraphError
from xlgraph.options import SessionOptions
from xlgraph.replica_grouping import CommGroup, CommGroupType, VariableRetrievalMode

__all__ = ["SessionOptions", "VariableRetrievalMode", "ReductionType", "CommGroupType",
           "CommGroup", "VirtualGraphMode", "DataType", "getLogger", "popart_exception",
           "poplar_exception", "poplar_runtime_error", "poplar_application_runtime_error",
           "versionString", "DeviceInfo", "DeviceType"]

# PopART's exception types are xlgraph's: a program's ``except popart.popart_exception`` then
# catches what xlgraph raises (every xlgraph error derives from XlgraphError).
popart_exception = XlgraphError
poplar_exception = XlgraphError
poplar_runtime_error = ExecutionError
poplar_application_runtime_error = ExecutionError

VERSION = "3.4.0"  # the PopART API these names follow


def versionString() -> str:  # noqa: N802 - PopART's name
    """The PopART API version this stand-in follows (PopART's ``versionString()`` form)."""
    return VERSION


class DeviceType(enum.Enum):
    """PopART's device kinds; xlgraph's simulated devices are ``IpuModel`` and ``Cpu``."""

    IpuModel = "ipu_model"
    Cpu = "cpu"
    Ipu = "ipu_hw"
    OfflineIpu = "offline_ipu"
    Sim = "sim"


class DeviceInfo:
    """What PopART says about a device, for the simulated devices: ``type``, ``numIpus``,
    ``tilesPerIPU``, ``version``. PopXL programs mostly name it in type hints."""

    def __init__(self, type: DeviceType = DeviceType.IpuModel, numIpus: int = 1,  # noqa: A002, N803
                 tilesPerIPU: int = 1472) -> None:  # noqa: N803 - PopART's names
        self.type = type
        self.numIpus = numIpus
        self.tilesPerIPU = tilesPerIPU
        self.version = "ipu2"

    def __repr__(self) -> str:
        return (f"DeviceInfo(type={self.type.name}, numIpus={self.numIpus}, "
                f"tilesPerIPU={self.tilesPerIPU})")


class VirtualGraphMode(enum.Enum):
    """How PopART places ops on IPUs (``opts.virtualGraphMode``); recorded, every IPU runs in
    the one simulator."""

    Off = 0
    Manual = 1
    Auto = 2
    ExecutionPhases = 3


class DataType(enum.Enum):
    """PopART's element types, as programs pass and compare them."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    INT32 = 4
    INT64 = 5
    UINT32 = 6
    UINT64 = 7
    BOOL = 8
    FLOAT = 9
    FLOAT16 = 10
    BFLOAT16 = 11
    DOUBLE = 12
    COMPLEX64 = 13
    COMPLEX128 = 14
    STRING = 15
    FLOAT8_143 = 16
    FLOAT8_152 = 17
    UNDEFINED = 18


class Logger:
    """PopART's logger (``popart.getLogger()``): lines on stderr at or above its level."""

    def __init__(self) -> None:
        self._log = popart_logger()

    def setLevel(self, level: str) -> None:  # noqa: N802 - PopART's name
        """One of TRACE, DEBUG, INFO, WARN, ERR, CRITICAL, OFF."""
        if str(level).upper() not in LEVELS:
            raise ValueError(f"popart.getLogger().setLevel: unknown level {level!r}; one of "
                             f"{', '.join(LEVELS)}")
        self._log.setLevel(LEVELS[str(level).upper()])

    def debug(self, msg: str) -> None:
        """Log ``msg`` at DEBUG level."""
        self._log.debug(msg)

    def info(self, msg: str) -> None:
        """Log ``msg`` at INFO level."""
        self._log.info(msg)

    def warn(self, msg: str) -> None:
        """Log ``msg`` at WARN level."""
        self._log.warning(msg)

    def error(self, msg: str) -> None:
        """Log ``msg`` at ERROR level."""
        self._log.error(msg)

    def critical(self, msg: str) -> None:
        """Log ``msg`` at CRITICAL level."""
        self._log.critical(msg)


def getLogger() -> Logger:  # noqa: N802 - PopART's name
    """PopART's logger (the one PopXL and xlgraph's PopXL layer log through)."""
    return Logger()


class ReductionType(enum.Enum):
    """How a loss reduces over the batch; the values are PopXL's ``reduction`` strings, and
    ``ops.nll_loss`` takes either."""

    Sum = "sum"
    Mean = "mean"
    NoReduction = "none"


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"popart.{name}: xlgraph's popart alias (python -m xlgraph.popxl_compat) provides only "
        f"{', '.join(__all__)} and _internal.ir; the rest of PopART is not available (see "
        f"docs/popxl-compat.md)"
    )
