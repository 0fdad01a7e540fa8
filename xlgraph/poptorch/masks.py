"""Boolean-mask indexing, the part of it a fixed-shape graph can hold.

``x[mask]`` has as many elements as ``mask`` has ``True`` values: a shape only the data decides,
which an IPU graph (and an xlgraph graph) cannot have. What a graph can hold is the masked
*update*: ``y[mask] = v`` and ``y[mask] *= 2`` (``y[mask] = f(y[mask])`` for elementwise ``f``).
There the selected elements never leave their places, so the selection is carried as the whole
tensor (its "lanes"), elementwise ops run on every lane, and ``index_put`` keeps the result where
the mask is set: ``where(mask, f(y), y)``.

``plan(graph)`` finds those lanes before conversion and raises ``DataDependentError`` (module
path, user line, the ``torch.where`` forms to use) for any other value whose shape depends on
the data: a returned ``x[mask]``, ``nonzero``, a reduction over a selection...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from xlgraph.poptorch.capture import (
    DataDependentError,
    DynamicShapeError,
    module_path,
    source_line,
)

__all__ = ["MaskPlan", "plan"]

aten = torch.ops.aten
_INDEX = aten.index.Tensor
_INDEX_PUT = (aten.index_put.default, aten.index_put_.default)
_READS_VALUE = (aten._local_scalar_dense.default, aten.item.default)
# not tagged pointwise by torch, but elementwise all the same
_ELEMENTWISE = (aten._to_copy.default, aten.clone.default, aten.alias.default)


@dataclass
class MaskPlan:
    """How the captured graph's data-dependent values are converted.

    Attributes:
        lanes: ``{node: key of its mask}`` for the selections ``x[mask]`` (converted as
            ``x``) and the elementwise results computed from them (converted on every lane).
        symbolic: nodes computing sizes of those selections (``sym_size``, their runtime
            asserts): nothing to convert.
    """

    lanes: dict[torch.fx.Node, Any] = field(default_factory=dict)
    symbolic: set[torch.fx.Node] = field(default_factory=set)

    def root(self, node: torch.fx.Node) -> bool:
        """Whether ``node`` is a selection ``x[mask]`` itself (converted as ``x``)."""
        return node in self.lanes and node.target == _INDEX


def _dynamic(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return val is not None and bool(free_unbacked_symbols(val))


def bool_mask(indices: Any) -> torch.fx.Node | None:
    """The mask node of ``x[mask]`` index lists (one boolean tensor on the leading dims, or a
    ``uint8`` one, which torch reads as a mask)."""
    if not isinstance(indices, list | tuple) or len(indices) != 1:
        return None
    mask = indices[0]
    if isinstance(mask, torch.fx.Node) and mask.meta.get("val") is not None \
            and mask.meta["val"].dtype in (torch.bool, torch.uint8):
        return mask
    return None


def _key(node: Any) -> Any:
    """A structural key: two nodes computing the same op of the same inputs (``x > 0`` written
    twice) have the same key."""
    if isinstance(node, list | tuple):
        return tuple(_key(n) for n in node)
    if isinstance(node, torch.fx.Node) and node.op == "call_function":
        return (str(node.target), _key(node.args), tuple(sorted(
            (k, _key(v)) for k, v in node.kwargs.items())))
    return node


def _lane_inputs_ok(node: torch.fx.Node, lanes: dict[torch.fx.Node, Any],
                    mask: Any) -> bool:
    """An elementwise op may run on lanes when its other tensor inputs are lanes of the same
    mask or 0-d tensors (which broadcast to every lane)."""
    for arg in node.all_input_nodes:
        if arg in lanes:
            if lanes[arg] != mask:
                return False
        elif not isinstance(arg.meta.get("val"), torch.Tensor) or arg.meta["val"].dim() != 0:
            return False
    return True


_SHAPE_ADVICE = ("its shape depends on the data, which a compiled graph cannot have. Keep every "
                 "element and select with torch.where(mask, x, other), x.masked_fill(mask, "
                 "value), (x * mask).sum(), or assign in place (y[mask] = value, y[mask] *= 2), "
                 "which poptorch converts")


def _error(node: torch.fx.Node, why: str, advice: str = _SHAPE_ADVICE,
           kind: type[DataDependentError] = DynamicShapeError) -> DataDependentError:
    """The error for ``node``: a data-dependent shape unless ``kind`` says otherwise."""
    where = source_line(node)
    for user in node.users:  # torch records no stack for some nodes; their users have it
        if where != "<unknown source>":
            break
        where = source_line(user)
    return kind(f"{why} at {module_path(node)}, {where}: {advice}; "
                f"poptorch.cond for a branch on a tensor value.")


def plan(graph: torch.fx.Graph) -> MaskPlan:
    """The lanes of ``graph``'s boolean-mask selections.

    Raises:
        DataDependentError: a value whose shape depends on the data is not only updated in
            place elementwise (``x[mask]`` returned or reduced, ``nonzero``, ``unique``...).
    """
    result = MaskPlan()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        if node.target in _READS_VALUE:
            raise _error(node, "Tensor.item() (or float(), int()) reads a tensor's value",
                         "only the device knows it. Keep it a tensor: x + x.sum() broadcasts "
                         "the 0-d sum", kind=DataDependentError)
        if node.target == _INDEX and _dynamic(node) and bool_mask(node.args[1]) is not None:
            result.lanes[node] = _key(bool_mask(node.args[1]))
        elif node.target in _INDEX_PUT and bool_mask(node.args[1]) is not None:
            values = node.args[2]
            if isinstance(values, torch.fx.Node) and _dynamic(values) and \
                    result.lanes.get(values) != _key(bool_mask(node.args[1])):
                raise _error(node, "assigning a boolean-mask selection of another mask")
        elif not isinstance(val, torch.Tensor) and _dynamic(node):
            result.symbolic.add(node)  # a size of a selection, and checks on it
        elif node.target == aten._assert_scalar.default:
            result.symbolic.add(node)
        elif any(n in result.lanes for n in node.all_input_nodes):
            mask = next(result.lanes[n] for n in node.all_input_nodes if n in result.lanes)
            elementwise = node.target in _ELEMENTWISE or (
                hasattr(node.target, "tags") and torch.Tag.pointwise in node.target.tags)
            if not (elementwise and _lane_inputs_ok(node, result.lanes, mask)):
                raise _error(node, "a boolean-mask selection (x[mask]) used other than "
                                   "elementwise and assigned back with the same mask")
            result.lanes[node] = mask
        elif _dynamic(node):
            raise _error(node, f"{node.target} gives a result")
    for node in graph.nodes:
        if node.op == "output":
            for out in node.all_input_nodes:
                if out in result.lanes:
                    raise _error(out, "a boolean-mask selection (x[mask]) is returned")
    return result
