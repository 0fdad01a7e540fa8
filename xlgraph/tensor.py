"""PopXL's ``popxl.tensor`` path: tensors, specs, factories (code in ``xlgraph.core.tensor``),
and PopXL's type aliases for host data (``HostTensor``, ``HostScalarTensor``, ``ScalarType``,
``TensorLike``), used in type hints."""

from collections.abc import Iterable
from typing import Union

import numpy as np

from xlgraph.core.tensor import *  # noqa: F403
from xlgraph.core.tensor import Tensor
from xlgraph.core.tensor import __all__ as _core_all

# PopXL's aliases (typing.Union, as PopXL writes them); torch stays a forward reference so
# xlgraph never imports it.
ScalarType = Union[int, float, bool]  # noqa: UP007
HostTensor = Union[np.ndarray, "torch.Tensor"]  # noqa: F405, F821, UP007
HostScalarTensor = Union[ScalarType, np.number, HostTensor]  # noqa: UP007
TensorLike = Union[Tensor, HostScalarTensor, Iterable[HostScalarTensor]]  # noqa: UP007

__all__ = [*_core_all, "ScalarType", "HostTensor", "HostScalarTensor", "TensorLike"]
