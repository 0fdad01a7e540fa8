"""``torch.bincount`` as PopTorch runs it: ``minlength`` bins, a shape fixed at compile time.

torch sizes the result by the largest value (``max(input) + 1``), which only the data knows. An
IPU graph needs the size when it is compiled, so the output has ``minlength`` bins and values
outside ``[0, minlength)`` are not counted. While capturing, ``torch.bincount`` calls
``bincount_op``, a torch custom op with that static shape (eager torch runs it too).
"""

from __future__ import annotations

import torch

from xlgraph.poptorch.support import Error

__all__ = ["MinlengthError", "bincount_op"]


class MinlengthError(Error):
    """``torch.bincount`` captured without ``minlength``, so with no size known at compile
    time (a ``poptorch.Error``, as PopTorch's)."""


@torch.library.custom_op("xlgraph_poptorch::bincount", mutates_args=())
def _bincount(x: torch.Tensor, weights: torch.Tensor | None, minlength: int) -> torch.Tensor:
    keep = (x >= 0) & (x < minlength)
    kept = None if weights is None else weights[keep]
    return torch.bincount(x[keep], kept, minlength)[:minlength]


@_bincount.register_fake
def _(x: torch.Tensor, weights: torch.Tensor | None, minlength: int) -> torch.Tensor:
    if weights is None:
        return x.new_empty((minlength,), dtype=torch.int64)
    dtype = weights.dtype if weights.dtype in (torch.float32, torch.float64) else torch.float64
    return weights.new_empty((minlength,), dtype=dtype)


def bincount_op(input: torch.Tensor, weights: torch.Tensor | None = None,  # noqa: A002
                minlength: int = 0) -> torch.Tensor:
    """``torch.bincount`` with ``minlength`` bins (see the module docstring).

    Raises:
        MinlengthError: ``minlength`` is 0, leaving the size to the data.
    """
    if minlength <= 0:
        raise MinlengthError(
            "Bincount `minlength` must be specified and must be a constant. On the IPU MK2 "
            "platform the minimum length is also the maximum length")
    return _bincount(input, weights, int(minlength))
