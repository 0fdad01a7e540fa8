"""popxl-addons ops: ``cross_entropy``, ``cross_entropy_with_grad`` and the stream helpers.

popxl-addons also ships custom C++ ops (sharded losses, fp8 scaling, sparse matmul, strided
collectives); asking for one of those names raises an AttributeError that says so.
"""

from __future__ import annotations

from typing import Any

from xlgraph.addons.ops import cross_entropy as _cross_entropy_module
from xlgraph.addons.ops import streams
from xlgraph.addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from xlgraph.addons.ops.streams import host_load, host_store

__all__ = ["cross_entropy", "cross_entropy_with_grad", "host_load", "host_store", "streams"]

del _cross_entropy_module


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"popxl_addons.ops.{name} is not provided by xlgraph.addons: popxl-addons' custom C++ "
        f"ops are not re-implemented; build it from xlgraph.ops (see docs/addons.md)"
    )
