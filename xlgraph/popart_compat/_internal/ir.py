"""``popart._internal.ir`` as PopXL programs import it: the names they use to inspect graphs.

``Ir``, ``Graph``, ``Op``, ``Tensor`` are the types of the read-only views that
``ir._pb_ir``, ``graph._pb_graph`` and their methods return (``xlgraph.core.pb_views``);
``op.<Class>`` (also ``op.collectives.<Class>``, ``op.exchange.<Class>``, ...) is the class of
the views of ops of that PopART type, named as PopART's C++ class (``SubtractOp``,
``GroupNormOp``, else ``<Type>Op``), for ``isinstance`` checks and
``testing_utils.ops_of_type``; ``SessionOptions`` and ``GraphId`` / ``TensorId`` (strings) as
PopART names them; ``patterns.Patterns(patterns.PatternsLevel.Default)`` for
``ir._pb_ir.setPatterns`` (recorded; pattern passes have no effect on the simulator).
Anything else raises ``AttributeError`` naming the support page.
"""

from __future__ import annotations

import enum
import sys
from types import ModuleType
from typing import Any

from xlgraph.core.pb_views import (
    SUPPORT_PAGE,
    PbGraph,
    PbIrGraphs,
    PbOp,
    PbSession,
    PbTensor,
    op_class_named,
)
from xlgraph.options import SessionOptions

__all__ = ["Ir", "Graph", "Op", "Tensor", "Session", "SessionOptions", "GraphId", "TensorId",
           "OpId", "op", "patterns"]

Ir = PbIrGraphs
Graph = PbGraph
Op = PbOp
Tensor = PbTensor
Session = PbSession
GraphId = str
TensorId = str
OpId = int


class _OpNamespace(ModuleType):
    """``_ir.op`` and its sub-namespaces: ``<Type>Op`` names the view class of that type."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "Op":
            return PbOp
        if name.endswith("Op") and len(name) > 2:
            return op_class_named(name)
        if name in _GROUPS:
            return _namespace(f"{self.__name__}.{name}")
        raise AttributeError(f"popart._internal.ir: {self.__name__}.{name} is not provided by "
                             f"xlgraph's read-only PopART views; see {SUPPORT_PAGE}")


_GROUPS = ("collectives", "exchange", "ipucopy", "init", "dynamic", "var_updates")


def _namespace(name: str) -> _OpNamespace:
    return _OpNamespace(name, "PopART op classes by type (read-only views).")


op = _namespace("op")


class PatternsLevel(enum.Enum):
    """PopART's pattern levels."""

    NoPatterns = 0
    Minimal = 1
    Default = 2
    All = 3


class Patterns:
    """A PopART pattern set at ``level``, for ``ir._pb_ir.setPatterns``: recorded, with no
    effect on the simulator (identity-replaceable ops lower as identities already)."""

    def __init__(self, level: PatternsLevel = PatternsLevel.Default) -> None:
        self.level = level
        self.runtime_asserts = True

    def enableRuntimeAsserts(self, enabled: bool) -> Patterns:  # noqa: N802 - PopART's name
        """Record whether PopART's runtime asserts are on; returns this pattern set."""
        self.runtime_asserts = bool(enabled)
        return self


patterns = ModuleType(f"{__name__}.patterns", "PopART's pattern sets (recorded, no effect).")
patterns.Patterns, patterns.PatternsLevel = Patterns, PatternsLevel  # type: ignore[attr-defined]
sys.modules[patterns.__name__] = patterns


def __getattr__(name: str) -> Any:
    raise AttributeError(f"popart._internal.ir.{name} is not provided by xlgraph's read-only "
                         f"PopART views; see {SUPPORT_PAGE}")
