"""What the layers share: the truncated-normal initialiser and torch weight conversion."""

from __future__ import annotations

from typing import Any

import numpy as np

import xlgraph as popxl

__all__ = ["truncnorm", "host_array"]


def truncnorm(shape: tuple[int, ...], std: float = 0.02) -> np.ndarray:
    """Normal(0, ``std``) samples truncated to ±2 ``std`` (values beyond are drawn again)."""
    out = np.random.normal(0, std, shape)
    bad = np.abs(out) > 2 * std
    while bad.any():
        out[bad] = np.random.normal(0, std, int(bad.sum()))
        bad = np.abs(out) > 2 * std
    return out


def host_array(t: Any, dtype: popxl.dtype) -> np.ndarray:
    """A torch tensor or parameter (or an array) as a numpy array of ``dtype``."""
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t).astype(dtype.as_numpy())
