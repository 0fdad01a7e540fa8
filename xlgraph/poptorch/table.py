"""The conversion table: every ATen op the frontend converts, keyed by its ``OpOverload`` name.

``CONVERSIONS["aten.add.Tensor"]`` is a ``Conversion``: the function writing the op with xlgraph
ops, called as ``fn(ctx, *args, **kwargs)`` with ATen's argument names (tensors are xlgraph
tensors, everything else plain Python), and whether the graph walker applies torch's type
promotion to its tensor inputs first. The walker (``xlgraph.poptorch.convert``) also casts every
result to the dtype torch gives it, so converters never deal with dtypes. Adding an op is one
``@register`` function (or one line in a family) in the modules that
``xlgraph.poptorch.conversions`` imports to fill the table.

``converts(name)`` answers for a PopTorch operation name (``torch.bucketize``, ``torch.nn.GRU``):
the names ``xlgraph.poptorch.coverage`` lists, each checked against torch by the op sweep test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CONVERSIONS", "Conversion", "converts", "op_name", "register"]


@dataclass(frozen=True)
class Conversion:
    """How one ATen overload becomes xlgraph ops.

    Attributes:
        name: the overload's name, ``aten.add.Tensor``.
        fn: ``fn(ctx, *args, **kwargs)`` -> xlgraph tensor(s) or Python values.
        promote: ``True`` to cast every tensor argument to torch's promoted dtype first,
            ``"result"`` to cast them to the result's dtype (``sum`` of bools counts in int64),
            or the positions of the arguments to cast (``where``'s condition stays bool).
    """

    name: str
    fn: Callable[..., Any]
    promote: bool | str | tuple[int, ...] = False


CONVERSIONS: dict[str, Conversion] = {}


def register(*names: str, promote: bool | str | tuple[int, ...] = False
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated ``fn(ctx, ...)`` as the conversion of each overload in ``names``."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            assert name not in CONVERSIONS, f"{name} is converted twice"
            CONVERSIONS[name] = Conversion(name, fn, promote)
        return fn
    return register


def op_name(target: Any) -> str:
    """The table key of an fx node target: ``aten.add.Tensor``, ``operator.getitem``."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    if module in ("_operator", "operator"):
        return f"operator.{target.__name__}"
    return str(target)


def converts(name: str) -> bool:
    """Whether the PopTorch operation ``name`` (as PopTorch's supported-ops list writes it) is
    converted: listed in ``coverage.COVERED`` and checked against torch by the op sweep."""
    from xlgraph.poptorch.coverage import COVERED

    return name in COVERED
