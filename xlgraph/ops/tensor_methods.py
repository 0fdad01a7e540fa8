"""Tensor's operators and methods (``a + b``, ``a @ b``, ``t[i]``, ``t.reshape(...)``): the op
library lends its builders to the core's ``Tensor`` through ``xlgraph.core.dispatch``."""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.core.dispatch import provide
from xlgraph.core.tensor import Tensor, constant
from xlgraph.ops.elementwise import add, add_, div, mul, negate, pow, sub, where
from xlgraph.ops.indexing import gather
from xlgraph.ops.linalg import matmul
from xlgraph.ops.math import fmod, logical_and, logical_not, logical_or
from xlgraph.ops.movement import (
    detach,
    detach_,
    flatten,
    flatten_,
    reshape,
    reshape_,
    slice,
    transpose,
    transpose_,
)
from xlgraph.ops.movement import (
    getitem as basic_getitem,
)
from xlgraph.ops.placement import ipu_copy


def getitem(t: Tensor, key: Any) -> Tensor:
    """``t[key]``: ints/slices slice (numpy basic indexing); an integer tensor or array gathers
    along axis 0; a boolean tensor or array keeps ``t`` where true and zeroes it elsewhere
    (``where(mask, t, 0)``: the shape is kept, as in PopXL).

    Raises:
        TypeError: for any other key.
    """
    if isinstance(key, list):
        key = np.asarray(key)
    if isinstance(key, np.ndarray) and key.dtype.kind in "biu":
        key = constant(key, dtypes.bool if key.dtype.kind == "b" else dtypes.int32)
    if isinstance(key, Tensor):
        if key.dtype is dtypes.bool:
            return where(key, t, 0)
        if key.dtype.is_int:
            return gather(t, key)
        raise TypeError(f"{t.id}[...]: an index tensor must be integer or bool, got {key.spec}")
    if isinstance(key, np.ndarray):
        raise TypeError(f"{t.id}[...]: an index array must be integer or bool, got {key.dtype}")
    return basic_getitem(t, key)


provide(
    add=add, add_=add_, sub=sub, mul=mul, div=div, pow=pow, matmul=matmul, negate=negate,
    fmod=fmod, logical_and=logical_and, logical_or=logical_or, logical_not=logical_not,
    getitem=getitem, reshape=reshape, reshape_=reshape_, flatten=flatten, flatten_=flatten_,
    transpose=transpose, transpose_=transpose_, detach=detach, detach_=detach_, slice=slice,
    ipu_copy=ipu_copy,
)
