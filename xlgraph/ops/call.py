"""Calling subgraphs: ``call``, ``call_with_info``, ``repeat`` and ``CallSiteInfo``."""

from __future__ import annotations

import dis
import sys
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import Any

import numpy as np

from xlgraph.context import get_current_graph
from xlgraph.errors import (
    AutodiffError,
    CallCycleError,
    CallInputError,
    GraphMismatchError,
    ShapeError,
    user_source_line,
    whole_number,
)
from xlgraph.graph import Graph
from xlgraph.op import Op, OpDef, apply, explained, register
from xlgraph.tensor import Tensor, TensorSpec, constant

__all__ = ["call", "call_with_info", "repeat", "repeat_with_info", "CallSiteInfo", "CallOutputs"]


def _call_infer(*specs: TensorSpec, graph: Graph, modified: set[int]) -> tuple[TensorSpec, ...]:
    return tuple(t.spec for t in graph.outputs)


def _repeat_infer(*specs: TensorSpec, graph: Graph, count: int,
                  modified: set[int]) -> tuple[TensorSpec, ...]:
    outs, ins = graph.outputs, graph.inputs
    if len(outs) > len(ins):
        raise ShapeError(f"repeat body {graph.name!r} has more outputs than inputs")
    for i, out in enumerate(outs):
        if out.spec != ins[i].spec:
            raise ShapeError(
                f"repeat body {graph.name!r}: output {i} {out.spec} must match input {i} "
                f"{ins[i].name} {ins[i].spec} (it is carried to the next iteration)"
            )
    return tuple(t.spec for t in outs)


_CALL = OpDef("call", _call_infer, None, kind="call")
_REPEAT = OpDef("repeat", _repeat_infer, None, kind="repeat")


class SiteInfo:
    """What every call-like site shares: its op, parent inputs and outputs, modified inputs."""

    def __init__(self, subgraph_op: Op) -> None:
        self.op = subgraph_op

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(self.op.inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(self.op.outputs)

    def parent_input(self, idx: int) -> Tensor:
        return self.op.inputs[idx]

    def parent_output(self, idx: int) -> Tensor:
        return self.op.outputs[idx]

    def _mark_modified(self, parent_tensor: Tensor, first: int, what: str) -> None:
        hits = [i for i, t in enumerate(self.op.inputs) if t is parent_tensor and i >= first]
        if not hits:
            raise ValueError(f"{parent_tensor.id} is not {what}")
        self.op.attrs["modified"].update(hits)


def site_op(outputs: tuple[Tensor, ...]) -> Op:
    """The op just appended by ``apply`` (found through an output when it has one)."""
    return outputs[0].producer if outputs else get_current_graph().ops[-1]


def _unpacks(frame: FrameType | None, count: int) -> bool:
    """Whether ``frame`` is executing ``a, b, ... = value`` with ``count`` targets."""
    if frame is None:
        return False
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset == frame.f_lasti:
            return ins.opname == "UNPACK_SEQUENCE" and ins.arg == count
    return False


class CallOutputs(tuple):
    """The outputs of a call or repeat site (a tuple).

    When ``autodiff`` has added activations as outputs of the called graph, the site has more
    outputs than the graph declared; unpacking only the declared ones raises an
    ``AutodiffError`` (a ``ValueError``) that names this rule instead of Python's bare "too many
    values to unpack".
    """

    graph: Graph

    def __new__(cls, outputs: Sequence[Tensor], graph: Graph) -> CallOutputs:
        self = super().__new__(cls, outputs)
        self.graph = graph
        return self

    def __iter__(self) -> Iterator[Tensor]:
        declared = self.graph.declared_outputs
        if declared is None or declared >= len(self):
            return super().__iter__()
        return self._checked(declared)

    def _checked(self, declared: int) -> Iterator[Tensor]:
        for i, t in enumerate(super().__iter__()):
            if i == declared and _unpacks(sys._getframe(1), declared):
                raise AutodiffError(
                    f"too many values to unpack (expected {declared}): graph "
                    f"{self.graph.name!r} now has {len(self)} outputs because autodiff added "
                    f"the activations its gradient graph reads as outputs, and call sites gain "
                    f"them too (see 'Activations' in docs/autodiff.md); take the declared ones "
                    f"by index, e.g. outputs[:{declared}] [at {user_source_line()}]")
            yield t


class CallSiteInfo(SiteInfo):
    """Mappings between a called graph's tensors and the tensors at one call site."""

    @property
    def called_graph(self) -> Graph:
        return self.op.attrs["graph"]

    @property
    def outputs(self) -> CallOutputs:
        return CallOutputs(self.op.outputs, self.called_graph)

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to a called graph's input or output."""
        g = self.called_graph
        i = g.input_index(graph_tensor)
        if i is not None:
            return self.op.inputs[i]
        i = g.output_index(graph_tensor)
        if i is not None and i < len(self.op.outputs):
            return self.op.outputs[i]
        raise ValueError(f"{graph_tensor.id} is not an input or output of graph {g.name!r}")

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The called graph's input that ``parent_tensor`` is passed to."""
        for i, t in enumerate(self.op.inputs):
            if t is parent_tensor:
                return self.called_graph.inputs[i]
        raise ValueError(f"{parent_tensor.id} is not an input of this call site")

    def graph_to_parent_input_index(self, idx: int) -> int:
        return idx

    def parent_to_graph_input_index(self, idx: int) -> int:
        return idx

    def graph_to_parent_output_index(self, idx: int) -> int:
        return idx

    def parent_to_graph_output_index(self, idx: int) -> int:
        return idx

    def set_parent_input_modified(self, parent_tensor: Tensor,
                                  infer_modified_regions: bool = False) -> None:
        """Make in-place changes the called graph makes to this input visible in the parent."""
        self._mark_modified(parent_tensor, 0, "an input of this call site")

    def __repr__(self) -> str:
        return f"CallSiteInfo[{self.called_graph.name} at {self.op.created_at}]"


def _flatten(values: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list | tuple):
            out.extend(_flatten(v))
        else:
            out.append(v)
    return out


def _bind_inputs(graph: Graph, inputs: Sequence[Any],
                 inputs_dict: Mapping[Tensor, Any] | None) -> list[Tensor]:
    """Match positional and keyed inputs to ``graph.inputs``; raise on any mismatch."""
    where = user_source_line()
    parent = get_current_graph()
    ins = graph.inputs
    given: list[Any] = [None] * len(ins)
    positional = _flatten(inputs)
    if len(positional) > len(ins):
        raise CallInputError(
            f"call of {graph.name!r}: {len(positional)} positional inputs given but the graph "
            f"has {len(ins)} inputs [at {where}]"
        )
    given[: len(positional)] = positional
    for sub, value in (inputs_dict or {}).items():
        idx = graph.input_index(sub) if isinstance(sub, Tensor) else None
        if idx is None:
            name = getattr(sub, "id", repr(sub))
            raise CallInputError(
                f"call of {graph.name!r}: {name} is not an input of that graph [at {where}]"
            )
        if given[idx] is not None:
            raise CallInputError(
                f"call of {graph.name!r}: input {sub.name!r} given twice [at {where}]"
            )
        given[idx] = value
    missing = [t for t, v in zip(ins, given) if v is None]
    if missing:
        table = "\n".join(
            f"  {t.name:<20} {str(t.spec):<14} {'MISSING' if v is None else v.id}"
            for t, v in zip(ins, given)
        )
        raise CallInputError(
            f"call of {graph.name!r}: missing inputs "
            f"{[t.name for t in missing]} [at {where}]\n{table}"
        )
    bound = []
    for sub, value in zip(ins, given):
        if not isinstance(value, Tensor):
            with parent:
                value = constant(np.asarray(value), sub.dtype)
        if value.graph is not parent:
            raise CallInputError(
                f"call of {graph.name!r}: input {sub.name!r} got {value.id} from graph "
                f"{value.graph.name!r}, not from the calling graph {parent.name!r} [at {where}]"
            )
        if value.spec != sub.spec:
            raise CallInputError(
                f"call of {graph.name!r}: input {sub.name!r} expects {sub.spec}, got {value.id} "
                f"{value.spec} [at {where}]"
            )
        bound.append(value)
    return bound


def _call_path(top: Graph, bottom: Graph) -> list[Op] | None:
    """The call sites by which ``top`` reaches ``bottom`` (``[]`` when they are one graph), or
    None. Walks up from ``bottom`` through ``call_sites``, which is short while graphs are built
    bottom-up (a new graph has no callers yet)."""
    if top is bottom:
        return []
    via: dict[Graph, tuple[Op, Graph]] = {}
    stack = [bottom]
    while stack:
        g = stack.pop()
        for op in g.call_sites:
            caller = op.graph
            if caller in via or caller is bottom:
                continue
            via[caller] = (op, g)
            if caller is top:
                path, cur = [], top
                while cur is not bottom:
                    op, cur = via[cur]
                    path.append(op)
                return path
            stack.append(caller)
    return None


def check_callees(op_name: str, callees: Sequence[Graph]) -> None:
    """Refuse a call site in the current graph of a graph of another Ir, or of a graph that
    calls the current graph (a cycle would never end): the error names the cycle's graphs and
    the user lines of its call sites."""
    parent, where = get_current_graph(), user_source_line()
    for callee in callees:
        if callee.ir is not parent.ir:
            raise GraphMismatchError(
                f"{op_name} of {callee.name!r}: that graph belongs to another Ir than the calling "
                f"graph {parent.name!r}; build the graphs of one program in one Ir [at {where}]")
        path = _call_path(callee, parent)
        if path is not None:
            steps = [f"{parent.name!r} calls {callee.name!r} here"]
            for i, op in enumerate(path):
                target = path[i + 1].graph if i + 1 < len(path) else parent
                steps.append(f"{op.graph.name!r} calls {target.name!r} ({op.defn.name} at "
                             f"{op.created_at})")
            raise CallCycleError(
                f"{op_name} of {callee.name!r} in graph {parent.name!r} would make a call cycle: "
                f"{'; '.join(steps)}. A graph cannot call itself, directly or through other "
                f"graphs [at {where}]")


def _site(defn: OpDef, graph: Graph, inputs: Sequence[Any],
          inputs_dict: Mapping[Tensor, Any] | None, **attrs: Any) -> CallSiteInfo:
    if not isinstance(graph, Graph) or graph.is_main:
        what = repr(graph) if isinstance(graph, Graph) else f"a {type(graph).__name__}"
        hint = "; pass its .graph" if isinstance(getattr(graph, "graph", None), Graph) else ""
        raise TypeError(f"{defn.name} expects a subgraph, got {what}{hint}")
    check_callees(defn.name, [graph])
    bound = _bind_inputs(graph, inputs, inputs_dict)
    op = site_op(apply(defn, bound, {"graph": graph, **attrs, "modified": set()}))
    graph.call_sites.append(op)
    return CallSiteInfo(op)


@register(_CALL)
def call_with_info(graph: Graph, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None,
                   check_inputs: bool = True) -> CallSiteInfo:
    """Call ``graph`` and return the ``CallSiteInfo`` of the call site.

    Args:
        graph: the subgraph to run.
        *inputs: parent tensors for the graph's first inputs, in order.
        inputs_dict: ``{graph input: parent tensor}`` for the remaining inputs.
        check_inputs: accepted for PopXL compatibility; inputs are always checked.

    Raises:
        CallInputError: missing, duplicate, unknown, foreign or mis-shaped inputs.
    """
    return _site(_CALL, graph, inputs, inputs_dict)


@explained("call")
def call(graph: Graph, *inputs: Any,
         inputs_dict: Mapping[Tensor, Any] | None = None) -> tuple[Tensor, ...]:
    """Call ``graph``; returns its outputs in the parent graph (always a tuple)."""
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs


@register(_REPEAT)
def repeat_with_info(graph: Graph, repeat_count: int, *inputs: Any,
                     inputs_dict: Mapping[Tensor, Any] | None = None,
                     check_inputs: bool = True) -> CallSiteInfo:
    """Run ``graph`` ``repeat_count`` times; output i of one iteration feeds input i of the next."""
    count = whole_number(repeat_count, "repeat_count")
    return _site(_REPEAT, graph, inputs, inputs_dict, count=count)


@explained("repeat")
def repeat(graph: Graph, repeat_count: int, *inputs: Any,
           inputs_dict: Mapping[Tensor, Any] | None = None) -> tuple[Tensor, ...]:
    """``repeat_with_info`` returning the outputs of the last iteration."""
    return repeat_with_info(graph, repeat_count, *inputs, inputs_dict=inputs_dict).outputs
