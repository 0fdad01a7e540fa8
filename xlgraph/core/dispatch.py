"""Functions the layers above the core lend it, looked up by name.

The core defines ``Tensor``'s operators and methods (``+``, ``@``, ``t[i]``, ``t.reshape``) and
``Op.cost``; their implementations live above it, in the op library (``xlgraph.ops``) and the
cost model (``xlgraph.cost``), which fill this table when they are imported. So the core imports
nothing above it (as JAX's array methods dispatch to ``jax.numpy``). ``import xlgraph`` loads
both, so the table is always full for users.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["provide", "provided"]

_TABLE: dict[str, Callable[..., Any]] = {}


def provide(**functions: Callable[..., Any]) -> None:
    """Lend the core ``functions`` under their keyword names (a later call replaces one)."""
    _TABLE.update(functions)


def provided(name: str) -> Callable[..., Any]:
    """The function lent under ``name``.

    Raises:
        RuntimeError: when the layer that provides it has not been imported.
    """
    try:
        return _TABLE[name]
    except KeyError:
        raise RuntimeError(
            f"{name!r} is provided by a layer above the core that is not loaded: import xlgraph"
        ) from None
