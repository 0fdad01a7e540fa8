"""The conversion table filled: ``xlgraph.poptorch.table``'s registry once the op families
(which import it to register their converters) and PopTorch's own ops are loaded."""

from __future__ import annotations

import torch

from xlgraph.poptorch import (  # noqa: F401 - importing a family registers its converters
    aten_index,
    aten_layers,
    aten_math,
    aten_shape,
    aten_sorting,
    ctc_decoder,
    functional,
)
from xlgraph.poptorch.api_ops import CONVERSIONS as _POPTORCH_OPS
from xlgraph.poptorch.table import CONVERSIONS, op_name, register

__all__ = ["CONVERSIONS"]

for _op, _fn in _POPTORCH_OPS.items():
    if isinstance(_op, torch._ops.OpOverload):
        register(op_name(_op))(_fn)
