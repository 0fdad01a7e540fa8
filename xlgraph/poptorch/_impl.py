"""The private helpers of PopTorch's ``poptorch._impl`` that programs reach.

``isDispatchTracing()`` is False unless set: xlgraph's capture runs ``forward`` on torch's own
devices, so a ``forward`` choosing ``device="ipu"`` when both ``isRunningOnIpu()`` and
``isDispatchTracing()`` hold keeps creating host tensors, which the capture records.
"""

from __future__ import annotations

from typing import Any

from xlgraph.poptorch import weights
from xlgraph.poptorch.capture import capturing
from xlgraph.poptorch.support import Error

__all__ = ["createPoptorchError", "isDispatchTracing", "isRunningOnIpu", "isWrapped",
           "setDispatchTracing", "setIpuContext", "unwrapIfWrapped"]

_STATE = {"dispatch_tracing": False, "ipu_context": False}


def createPoptorchError(msg: str) -> Error:  # noqa: N802
    """A ``poptorch.Error`` with ``msg`` (not raised)."""
    return Error(msg)


def isDispatchTracing() -> bool:  # noqa: N802
    """Whether ``setDispatchTracing(True)`` is in force (xlgraph's capture never sets it)."""
    return _STATE["dispatch_tracing"]


def setDispatchTracing(val: bool) -> None:  # noqa: N802
    """Set what ``isDispatchTracing()`` returns."""
    _STATE["dispatch_tracing"] = bool(val)


def setIpuContext(val: bool) -> None:  # noqa: N802
    """Make ``isRunningOnIpu()`` True (``val``) outside a capture too."""
    _STATE["ipu_context"] = bool(val)


def isRunningOnIpu() -> bool:  # noqa: N802
    """True while a model's ``forward`` is captured for the device, or under
    ``setIpuContext(True)``."""
    return capturing() or _STATE["ipu_context"]


def isWrapped(obj: Any) -> bool:  # noqa: N802
    """Whether ``obj`` is a module whose class a live ``trainingModel`` replaced."""
    return weights.is_hooked(obj)


def unwrapIfWrapped(obj: Any) -> Any:  # noqa: N802
    """``obj`` with its own class back, if a ``trainingModel`` wrapped it."""
    if weights.is_hooked(obj):
        obj.__class__ = obj._xlgraph_original
    return obj


def _restoreWrapperIfNecessary(obj: Any) -> Any:  # noqa: N802
    """``obj`` itself: xlgraph's wrapped modules copy and pickle as their own class."""
    return obj
