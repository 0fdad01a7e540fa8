"""Value checks of PopTorch's setters: counts, ids and seeds are whole numbers in a range.

A setter refuses a bad value at once, naming itself, the argument and the value, instead of
storing it for the executor to trip over later (``deviceIterations(0)`` would divide by zero).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["COUNT_MAX", "OptionValueError", "flag", "non_negative", "whole"]

COUNT_MAX = 2**31 - 1  # device-loop counts, replicas and IPU ids fit a 32-bit counter


class OptionValueError(ValueError, AssertionError):
    """A setter's value that is not a whole number in its range (an ``AssertionError`` too:
    PopTorch's setters assert their argument types)."""


def whole(setter: str, arg: str, value: Any, low: int = 1, high: int = COUNT_MAX) -> int:
    """``value`` as an int when it is a whole number in ``[low, high]`` (bools, floats and
    strings are refused), else ``OptionValueError`` naming ``setter``, ``arg`` and the value.

    Example:
        >>> whole("Options.deviceIterations", "device_iterations", 4)
        4
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionValueError(f"{setter}: {arg} must be a whole number in [{low}, {high}], "
                               f"got {value!r} ({type(value).__name__})")
    if not low <= int(value) <= high:
        raise OptionValueError(f"{setter}: {arg} must be a whole number in [{low}, {high}], "
                               f"got {int(value)}")
    return int(value)


def non_negative(setter: str, arg: str, value: Any) -> float:
    """``value`` as a float when it is a finite real number >= 0, else ``OptionValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value < 0:
        raise OptionValueError(f"{setter}: {arg} must be a finite number >= 0, got {value!r} "
                               f"({type(value).__name__})")
    return float(value)


def flag(setter: str, arg: str, value: Any) -> bool:
    """``value`` when it is a bool, else ``OptionValueError`` (``"no"`` would read as True)."""
    if not isinstance(value, bool):
        raise OptionValueError(f"{setter}: {arg} must be True or False, got {value!r} "
                               f"({type(value).__name__})")
    return value
