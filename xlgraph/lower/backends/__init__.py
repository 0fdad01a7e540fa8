"""Backends of the generated step function.

``"numpy"`` runs every kernel through numpy (the reference). ``"numba"`` (``pip install
xlgraph[fast]``) runs the ops that declare a loop form (``OpDef.loop``, see
``xlgraph.ops.loops``) as compiled loops, one call where numpy needs several, and leaves the rest
(matmuls and other BLAS calls included) to numpy. ``Session(..., backend=None)`` takes
``XLGRAPH_BACKEND`` from the environment, else ``"numba"`` when numba is installed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any, Protocol

from xlgraph.tensor import TensorSpec

BACKENDS = ("numpy", "numba")

# How far the numba backend's results may be from numpy's (``numpy.testing.assert_allclose``
# arguments per dtype): its loops do the same float operations in the same order, except that
# ``exp``/``log`` come from the compiler's math library instead of numpy's SIMD code (they may
# differ in the last bit) and most row sums accumulate left to right instead of pairwise.
TOLERANCE = {"float32": {"rtol": 1e-5, "atol": 1e-6}, "float64": {"rtol": 1e-12, "atol": 1e-14}}


class Backend(Protocol):
    """Compiles loop forms: ``kernel`` gives the function a generated line calls instead of
    ``kernel_out`` (with the extra arguments to append), or None to keep numpy."""

    name: str

    def kernel(self, loop: Callable[..., Any], ins: list[TensorSpec], outs: list[TensorSpec],
               attrs: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]] | None: ...

    def matmul(self, dtype: Any) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """A fused segment's 2-D matrix product of ``dtype`` as ``(fn, extra)``, called as
        ``fn(a, b, out, *extra)``, or None (numba's ``np.dot`` then multiplies)."""

    def direct(self, fn: Callable[..., Any], args: list[Any]) -> Callable[..., Any] | None:
        """``fn``'s machine code for exactly these arguments' types, called without the
        per-call type dispatch, when it is compiled for them (else None: call ``fn``)."""


def default_backend() -> str:
    """``XLGRAPH_BACKEND`` if set, else ``"numba"`` when it is installed, else ``"numpy"``."""
    name = os.environ.get("XLGRAPH_BACKEND")
    if name:
        return name
    return "numba" if importlib.util.find_spec("numba") is not None else "numpy"


def get_backend(name: str | None) -> Backend | None:
    """The backend called ``name`` (None: ``default_backend()``); None stands for numpy."""
    name = default_backend() if name is None else name
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {name!r}")
    if name == "numpy":
        return None
    from xlgraph.lower.backends.numba_backend import NumbaBackend

    return NumbaBackend()
