"""Synthetic MNIST-style data for the xlgraph.datasets tests (tests/test_datasets*.py)."""

from __future__ import annotations

import hashlib
import struct
import subprocess

import numpy as np

SIDE = 28


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, SIDE, SIDE), dtype=np.uint8)


def _labels(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 10, n, dtype=np.uint8)


def _idx_reference(array: np.ndarray) -> bytes:
    """IDX bytes of a uint8 array, built by hand (independent of the module)."""
    magic = 0x0800 | array.ndim
    return struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.tobytes()


def _csv(images: np.ndarray, labels: np.ndarray) -> bytes:
    header = "label," + ",".join(f"{r}x{c}" for r in range(1, SIDE + 1) for c in range(1, SIDE + 1))
    rows = [",".join(map(str, [int(y), *x.ravel().tolist()])) for x, y in zip(images, labels)]
    return ("\r\n".join([header, *rows]) + "\r\n").encode()


def _sha256s(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    return {n: hashlib.sha256(_idx_reference(a)).hexdigest() for n, a in arrays.items()}


def _completed(cmd, returncode=0, stderr=""):
    return subprocess.CompletedProcess(cmd, returncode, "", stderr)
