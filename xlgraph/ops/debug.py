"""``print_tensor``: print a tensor's value to stderr at run time."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from xlgraph.op import OpDef, Sample, apply1, register, same_spec
from xlgraph.tensor import Tensor

__all__ = ["print_tensor"]

_FLOAT_FORMATS = ("auto", "fixed", "scientific", "none")


def format_tensor(x: np.ndarray, summarise_threshold: int = 1000, edge_items: int = 3,
                  max_line_width: int = 75, digits: int = 8, float_format: str = "auto",
                  separator: str = " ", open_bracket: str = "[",
                  close_bracket: str = "]") -> str:
    """The text ``print_tensor`` prints for ``x`` (numpy's array printing with these options).

    ``float_format``: ``auto`` (shortest of fixed/scientific with up to ``digits`` decimals),
    ``fixed`` (exactly ``digits`` decimals), ``scientific`` (``digits`` decimals with an
    exponent) or ``none`` (Python's shortest round-trip text).
    """
    formatter = None
    if x.dtype.kind == "f":
        if float_format == "scientific":
            formatter = {"float_kind": lambda v: f"{v:.{digits}e}"}
        elif float_format == "none":
            formatter = {"float_kind": lambda v: repr(float(v))}
    text = np.array2string(
        np.asarray(x), max_line_width=max_line_width, precision=digits, separator=separator,
        threshold=summarise_threshold, edgeitems=edge_items, formatter=formatter,
        floatmode="fixed" if float_format == "fixed" else "maxprec",
    )
    return text.replace("[", "\0").replace("]", close_bracket).replace("\0", open_bracket)


def _print_tensor(x: np.ndarray, title: str, print_self: bool, print_gradient: bool,
                  **fmt: Any) -> np.ndarray:
    if print_self:
        print(f"{title}: {format_tensor(x, **fmt)}", file=sys.stderr, flush=True)
    return x


def _print_grad(g: Any, dy: Tensor) -> tuple[Tensor]:
    attrs = g.attrs
    if not attrs["print_gradient"]:
        return (dy,)
    fmt = {k: v for k, v in attrs.items() if k not in ("title", "print_self", "print_gradient")}
    return (print_tensor(dy, f"{attrs['title']}_gradient", **fmt),)


def _samples(rng: np.random.Generator) -> list[Sample]:
    return [Sample((rng.normal(size=(3, 4)),), {"title": "sample"}),
            Sample((rng.normal(size=(50, 40)),), {"print_self": False, "edge_items": 2,
                                                  "float_format": "scientific"})]


_PRINT_TENSOR = OpDef("print_tensor", same_spec, _print_tensor, _print_grad, side_effect=True,
                      view=True, samples=_samples)


@register(_PRINT_TENSOR)
def print_tensor(t: Tensor, title: str | None = None, print_self: bool = True,
                 print_gradient: bool = False, summarise_threshold: int = 1000,
                 edge_items: int = 3, max_line_width: int = 75, digits: int = 8,
                 float_format: str = "auto", separator: str = " ", open_bracket: str = "[",
                 close_bracket: str = "]") -> Tensor:
    """Print ``t`` to stderr as ``<title>: <values>`` each time the op runs; returns ``t``.

    The op is never removed as dead code. Its gradient passes ``dy`` through; with
    ``print_gradient=True`` the gradient op also prints it, titled ``<title>_gradient``.

    Args:
        t: the tensor to print.
        title: the label (default ``print_<t.name>``).
        print_self: print in the forward pass.
        print_gradient: print the gradient in the backward pass.
        summarise_threshold: arrays with more elements are summarised with ``...``.
        edge_items: items kept at each edge of a summarised axis.
        max_line_width: wrap lines longer than this.
        digits: decimals shown for floats.
        float_format: ``auto``, ``fixed``, ``scientific`` or ``none``.
        separator: text between items.
        open_bracket: text opening each axis.
        close_bracket: text closing each axis.

    Returns:
        A tensor equal to ``t``; use it so the print is ordered before later uses.

    Example:
        >>> y = ops.print_tensor(x, "activations")
    """
    if float_format not in _FLOAT_FORMATS:
        raise ValueError(f"float_format must be one of {_FLOAT_FORMATS}, got {float_format!r}")
    attrs = {"title": f"print_{t.name}" if title is None else str(title),
             "print_self": bool(print_self), "print_gradient": bool(print_gradient),
             "summarise_threshold": int(summarise_threshold), "edge_items": int(edge_items),
             "max_line_width": int(max_line_width), "digits": int(digits),
             "float_format": float_format, "separator": separator, "open_bracket": open_bracket,
             "close_bracket": close_bracket}
    return apply1(_PRINT_TENSOR, [t], attrs)
