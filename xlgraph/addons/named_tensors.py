"""``NamedTensors`` (a DotTree of tensors) and ``NamedTensorData`` (a DotTree of arrays)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xlgraph import Tensor, ops
from xlgraph.addons.dot_tree import DotTree

__all__ = ["NamedTensors", "NamedTensorData", "print_named_tensors"]


class NamedTensorData(DotTree[np.ndarray]):
    """Host arrays by dotted name (what ``TaskSession.get_named_tensors_data`` returns)."""


class NamedTensors(DotTree[Tensor]):
    """Tensors by dotted name: a module's graph inputs, its variables, their gradients."""

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor, sorted by tensor **name** (not by key), as popxl-addons sorts them."""
        return tuple(sorted(self.values_flat(), key=lambda t: t.name))

    @property
    def named_tensors(self) -> dict[str, Tensor]:
        """``{dotted name: tensor}`` in insertion order."""
        return self.to_dict()

    def remap(self, mapping: Mapping[Tensor, Tensor]) -> NamedTensors:
        """The same names with every tensor replaced by ``mapping[tensor]``.

        Raises:
            KeyError: naming the key whose tensor the mapping lacks (as popxl-addons 3.4).
        """
        remapped = {}
        for key, t in self.to_dict().items():
            try:
                remapped[key] = mapping[t]
            except KeyError:
                raise KeyError(f"NamedTensors.remap: the mapping has no tensor for {key!r} "
                               f"(tensor {t.name!r})") from None
        return NamedTensors.from_dict(remapped)

def print_named_tensors(named_tensors: NamedTensors) -> NamedTensors:
    """Print every tensor each time the graph runs, titled by its dotted name.

    Returns:
        The printed tensors (``ops.print_tensor``'s pass-through outputs) under the same names.
    """
    return NamedTensors.from_dict({name: ops.print_tensor(t, title=name)
                                   for name, t in named_tensors.to_dict().items()})
