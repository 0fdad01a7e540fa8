"""Exception types and the helper that finds the user's source line."""

from __future__ import annotations

import functools
import numbers
import os
import sys
from typing import Any

__all__ = [
    "XlgraphError",
    "ShapeError",
    "DTypeError",
    "GraphMismatchError",
    "CallInputError",
    "CallCycleError",
    "StreamInputError",
    "NotAttachedError",
    "UnsupportedDeviceError",
    "AutodiffError",
    "SchedulingError",
    "IrFrozenError",
    "EmptyProgramError",
    "ExecutionError",
    "LimitError",
    "DeviceMemoryError",
    "OutOfMemoryError",
    "CheckpointError",
    "ArgumentError",
    "NumericsError",
    "ProfileFormatError",
    "MemmapError",
    "UndefinedValue",
    "user_source_line",
    "whole_number",
    "flag",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class XlgraphError(Exception):
    """Base class of every error xlgraph raises on purpose."""


class ShapeError(XlgraphError, ValueError):
    """An op got tensors whose shapes it cannot combine."""


class DTypeError(XlgraphError, TypeError):
    """An op got tensors of a dtype it does not accept."""


class GraphMismatchError(XlgraphError, ValueError):
    """A tensor of one graph was used in another (there is no implicit capture)."""


class CallInputError(XlgraphError, ValueError):
    """A call site gave missing, duplicate, unknown or foreign inputs."""


class CallCycleError(XlgraphError, ValueError):
    """A call, repeat or conditional would make a graph call itself (directly or through others)."""


class StreamInputError(XlgraphError, ValueError):
    """``Session.run`` got missing, unexpected, mis-shaped or mis-typed stream data."""


class NotAttachedError(XlgraphError, ValueError):
    """A runtime call needs the Session to be attached (``with session:``)."""


class UnsupportedDeviceError(XlgraphError, ValueError):
    """The requested device is not available in xlgraph."""


class AutodiffError(XlgraphError, ValueError):
    """``transforms.autodiff`` cannot differentiate the given graph."""


class SchedulingError(XlgraphError, ValueError):
    """The op order of a graph is ambiguous or invalid."""


class IrFrozenError(XlgraphError, RuntimeError):
    """The Ir is owned by a Session and can no longer be modified."""


class EmptyProgramError(XlgraphError, RuntimeError):
    """A Session was asked to run an Ir with neither operations nor variables (PopXL refuses
    it too)."""


class ExecutionError(XlgraphError, RuntimeError):
    """A kernel failed while a Session was running; variables were restored."""


class DistributedError(XlgraphError, RuntimeError):
    """Instances of a multi-process job could not complete a collective (one failed, or none
    answered in time)."""


class WorkerProcessError(XlgraphError, RuntimeError):
    """A worker process of a ``multiprocessing`` Pool ended before its tasks were done (under
    the PopXL runner and ``poprun``, see ``xlgraph.compat_pool``)."""


class LimitError(XlgraphError, ValueError):
    """The program is beyond a limit of the simulator (such as its nesting depth)."""


class DeviceMemoryError(XlgraphError, MemoryError):
    """The simulator could not allocate the memory a program needs."""


class OutOfMemoryError(XlgraphError, MemoryError):
    """The program does not fit the modelled IPU's tile memory (Session on "ipu_model")."""


class CheckpointError(XlgraphError, ValueError):
    """A checkpoint cannot be written or read (the message names the file or the entry)."""


class ArgumentError(XlgraphError, ValueError):
    """An op got an invalid non-tensor argument (an axis, a size, a probability, a count)."""


class UndefinedValue(XlgraphError, ValueError):  # noqa: N818 - PopXL's public name
    """A value was asked for that is not defined (PopXL's name)."""


class ProfileFormatError(XlgraphError, ValueError):
    """A file that is not an xlgraph profile report, or of a schema version not read here."""


class MemmapError(XlgraphError, ValueError):
    """A memory-mapped variable's map cannot be used as asked: not kept as it is (another
    dtype or layout), an existing map of another spec, or a read-only map to write."""


class NumericsError(XlgraphError, FloatingPointError):
    """A value became NaN or Inf while ``Session(..., check_numerics=True)`` was running."""


@functools.lru_cache(maxsize=1024)
def _user_file(filename: str) -> str | None:
    """The base name of ``filename`` when it is user code (outside xlgraph), else None (a pure
    function of the name, memoised: every op built asks it for each frame of its stack)."""
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep) or "<frozen" in path:
        return None
    return os.path.basename(path)


_SKIPPED_CODE: set[Any] = set()  # code of user functions that build ops (op_debug_context)


def skip_in_source_lines(fn: Any) -> None:
    """Frames of ``fn`` count as xlgraph's own in ``user_source_line`` (for functions a user
    writes to build ops, so errors name the line that called them)."""
    _SKIPPED_CODE.add(fn.__code__)


def user_source_line() -> str:
    """``file:line`` of the innermost stack frame outside the xlgraph package (and outside
    functions marked by ``skip_in_source_lines``)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = _user_file(frame.f_code.co_filename)
        if name is not None and frame.f_code not in _SKIPPED_CODE:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def whole_number(value: object, what: str, minimum: int = 1) -> int:
    """``value`` as an int, or ``ArgumentError`` when it is not a whole number >= ``minimum``
    (``2.5``, ``True``, ``-3``, ``"4"`` are refused where a count or a size is expected)."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or int(value) < minimum:  # type: ignore[call-overload]
        raise ArgumentError(f"{what} must be a whole number >= {minimum}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def flag(value: object, what: str) -> bool:
    """``value`` when it is a real boolean (Python's or numpy's), else ``ArgumentError``
    naming ``what`` and the user's line: ``"no"``, ``0``, ``1`` and ``None`` are not flags."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    if isinstance(value, bool) or numpy_bool:
        return bool(value)
    raise ArgumentError(f"{what} must be True or False, got {value!r} "
                        f"[at {user_source_line()}]")
