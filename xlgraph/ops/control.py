"""Control flow: ``conditional`` and ``conditional_with_info`` (PopXL's If op).

The op's inputs are ``[cond, *then_inputs, *else_inputs]``: parent input 0 is the condition,
the next ``len(then_branch.inputs)`` feed the then branch in order, the rest the else branch.
Output ``i`` is output ``i`` of whichever branch ran; the branches' outputs must agree.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.graph import Graph
from xlgraph.op import Op, OpDef, apply, explained, register
from xlgraph.ops.call import SiteInfo, _bind_inputs, check_callees, site_op
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = ["conditional", "conditional_with_info", "ConditionalSiteInfo"]


def _cond_infer(cond: TensorSpec, *inputs: TensorSpec, then_graph: Graph, else_graph: Graph,
                n_then: int, modified: set[int]) -> tuple[TensorSpec, ...]:
    if cond.dtype is not dtypes.bool:
        raise DTypeError(f"the condition must be bool, got {cond}")
    if int(np.prod(cond.shape, dtype=np.int64)) != 1:
        raise ShapeError(f"the condition must have exactly one element, got {cond}")
    outs, other = then_graph.outputs, else_graph.outputs
    if len(outs) != len(other):
        raise ShapeError(
            f"branches disagree: {then_graph.name!r} has {len(outs)} outputs, "
            f"{else_graph.name!r} has {len(other)}"
        )
    for i, (a, b) in enumerate(zip(outs, other)):
        if a.spec != b.spec:
            raise ShapeError(
                f"branches disagree on output {i}: {then_graph.name!r} gives {a.id} {a.spec}, "
                f"{else_graph.name!r} gives {b.id} {b.spec}"
            )
    return tuple(t.spec for t in outs)


_CONDITIONAL = OpDef("conditional", _cond_infer, None, kind="conditional")


def branch_of(op: Op, then_branch: bool) -> tuple[Graph, builtins.slice, set[int]]:
    """For a conditional op: the branch graph, the slice of ``op.inputs`` feeding it, and the
    indices of its inputs marked modified at the site (for the lowering)."""
    graph = op.attrs["then_graph" if then_branch else "else_graph"]
    first = 1 if then_branch else 1 + op.attrs["n_then"]
    modified = {i - first for i in op.attrs["modified"] if i >= first}
    return graph, builtins.slice(first, first + len(graph.inputs)), modified


class ConditionalSiteInfo(SiteInfo):
    """Mappings between the branch graphs' tensors and the tensors at one conditional site.

    Parent input indices count the condition (index 0); graph input indices are per branch.
    """

    @property
    def called_graph(self) -> tuple[Graph, Graph]:
        """``(then_branch, else_branch)``."""
        return self.op.attrs["then_graph"], self.op.attrs["else_graph"]

    @property
    def then_called_graph(self) -> Graph:
        return self.op.attrs["then_graph"]

    @property
    def else_called_graph(self) -> Graph:
        return self.op.attrs["else_graph"]

    def _offset(self, then_branch: bool) -> int:
        return 1 if then_branch else 1 + self.op.attrs["n_then"]

    def _branch(self, then_branch: bool) -> Graph:
        return self.then_called_graph if then_branch else self.else_called_graph

    def is_parent_index_in_then_branch(self, idx: int) -> bool:
        """Whether parent input ``idx`` feeds the then branch (the condition feeds neither)."""
        return 1 <= idx < 1 + self.op.attrs["n_then"]

    def graph_to_parent_input_index(self, idx: int, then_branch: bool = True) -> int:
        """Parent input index of input ``idx`` of the chosen branch."""
        if not 0 <= idx < len(self._branch(then_branch).inputs):
            raise IndexError(f"branch input index {idx} is out of range")
        return self._offset(then_branch) + idx

    def parent_to_graph_input_index(self, idx: int) -> int:
        """Branch input index fed by parent input ``idx`` (see is_parent_index_in_then_branch)."""
        if idx == 0:
            raise IndexError("parent input 0 is the condition; it feeds no branch input")
        return idx - self._offset(self.is_parent_index_in_then_branch(idx))

    def graph_to_parent_output_index(self, idx: int, then_branch: bool = True) -> int:
        return idx

    def parent_to_graph_output_index(self, idx: int, then_branch: bool = True) -> int:
        return idx

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to an input or output of either branch."""
        for then_branch in (True, False):
            g = self._branch(then_branch)
            for i, t in enumerate(g.inputs):
                if t is graph_tensor:
                    return self.op.inputs[self._offset(then_branch) + i]
            for i, t in enumerate(g.outputs[: len(self.op.outputs)]):
                if t is graph_tensor:
                    return self.op.outputs[i]
        raise ValueError(f"{graph_tensor.id} is not an input or output of either branch")

    def parent_to_graph(self, parent_tensor: Tensor, then_branch: bool = True) -> Tensor:
        """The input of the chosen branch that ``parent_tensor`` is passed to."""
        g, first = self._branch(then_branch), self._offset(then_branch)
        for i, t in enumerate(self.op.inputs[first: first + len(g.inputs)]):
            if t is parent_tensor:
                return g.inputs[i]
        branch = "then" if then_branch else "else"
        raise ValueError(f"{parent_tensor.id} is not an input of the {branch} branch")

    def set_parent_input_modified(self, parent_tensor: Tensor,
                                  infer_modified_regions: bool = False) -> None:
        """Make in-place changes either branch makes to this input visible in the parent."""
        self._mark_modified(parent_tensor, 1, "a branch input of this conditional")

    def __repr__(self) -> str:
        then, other = self.called_graph
        return f"ConditionalSiteInfo[{then.name} / {other.name} at {self.op.created_at}]"


def _check_branch(graph: Any, what: str) -> Graph:
    if not isinstance(graph, Graph) or graph.is_main:
        raise TypeError(f"conditional: {what} must be a subgraph, got {graph!r}")
    return graph


@register(_CONDITIONAL)
def conditional_with_info(
    cond: Any, then_branch: Graph, else_branch: Graph,
    then_inputs: Sequence[Any] | None = None, else_inputs: Sequence[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None, check_inputs: bool = True,
) -> ConditionalSiteInfo:
    """Run ``then_branch`` when ``cond`` is true at run time, else ``else_branch``.

    Args:
        cond: a single-element bool tensor (or a Python bool, made a constant).
        then_branch: the graph run when ``cond`` is true.
        else_branch: the graph run otherwise; its outputs must match ``then_branch``'s.
        then_inputs: parent tensors for the then branch's first inputs, in order.
        else_inputs: likewise for the else branch.
        then_inputs_dict: ``{then-branch input: parent tensor}`` for its remaining inputs.
        else_inputs_dict: likewise for the else branch.
        check_inputs: accepted for PopXL compatibility; inputs are always checked.

    Returns:
        The ConditionalSiteInfo of the new op.

    Raises:
        CallInputError: missing, duplicate, unknown or foreign branch inputs.
        DTypeError, ShapeError: a bad condition, or branches whose outputs disagree.

    Example:
        >>> (y,) = ops.conditional(flag, double_graph, negate_graph, [x], [x])
    """
    then_branch = _check_branch(then_branch, "then_branch")
    else_branch = _check_branch(else_branch, "else_branch")
    check_callees("conditional", [then_branch, else_branch])
    if not isinstance(cond, Tensor):
        cond = constant(np.asarray(cond, np.bool_), dtypes.bool)
    then_bound = _bind_inputs(then_branch, then_inputs or (), then_inputs_dict)
    else_bound = _bind_inputs(else_branch, else_inputs or (), else_inputs_dict)
    attrs = {"then_graph": then_branch, "else_graph": else_branch, "n_then": len(then_bound),
             "modified": set()}
    op = site_op(apply(_CONDITIONAL, [cond, *then_bound, *else_bound], attrs))
    for g in {id(then_branch): then_branch, id(else_branch): else_branch}.values():
        g.call_sites.append(op)
    return ConditionalSiteInfo(op)


@explained("conditional")
def conditional(
    cond: Any, then_branch: Graph, else_branch: Graph,
    then_inputs: Sequence[Any] | None = None, else_inputs: Sequence[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """``conditional_with_info`` returning the outputs of the branch that ran (a tuple)."""
    info = conditional_with_info(cond, then_branch, else_branch, then_inputs, else_inputs,
                                 then_inputs_dict, else_inputs_dict)
    return info.outputs
