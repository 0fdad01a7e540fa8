"""``NamedTensors`` (a DotTree of tensors) and ``NamedTensorData`` (a DotTree of arrays)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xlgraph import Tensor
from xlgraph.addons.dot_tree import DotTree

__all__ = ["NamedTensors", "NamedTensorData", "print_named_tensors"]


class NamedTensorData(DotTree[np.ndarray]):
    """Host arrays by dotted name (what a checkpoint holds)."""


class NamedTensors(DotTree[Tensor]):
    """Tensors by dotted name: a module's graph inputs, its variables, their gradients."""

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor, in ``keys_flat`` order."""
        return tuple(self.values_flat())

    @property
    def named_tensors(self) -> dict[str, Tensor]:
        """``{dotted name: tensor}``."""
        return self.to_dict()

    def remap(self, mapping: Mapping[Tensor, Tensor]) -> NamedTensors:
        """The same names with every tensor replaced by ``mapping[tensor]`` (kept when absent)."""
        return NamedTensors.from_dict({k: mapping.get(t, t) for k, t in self.to_dict().items()})


def print_named_tensors(named_tensors: NamedTensors) -> None:
    """Print one ``name: shape dtype`` line per tensor."""
    for name, t in named_tensors.to_dict().items():
        print(f"{name}: {t.shape} {t.dtype.name}")
