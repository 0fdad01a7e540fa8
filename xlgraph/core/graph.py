"""Graphs: an append-only, topologically ordered list of ops with named tensors."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xlgraph.core import context
from xlgraph.core.dispatch import provided
from xlgraph.core.pb_views import PbGraph
from xlgraph.core.tensor import Constant, Tensor, TensorSpec, Variable
from xlgraph.errors import GraphMismatchError, IrFrozenError, user_source_line

if TYPE_CHECKING:  # records above this module, by the members it reads (kinds.py)
    from xlgraph.core.kinds import IrLike as Ir
    from xlgraph.core.kinds import OpLike as Op

__all__ = ["Graph"]


class Graph:
    """A graph of ops, from ``ir.main_graph`` or ``ir.create_graph``; ``with g:`` builds in it."""

    def __init__(self, ir: Ir, name: str, is_main: bool = False) -> None:
        self.ir = ir
        self.name = name
        self.is_main = is_main
        self.ops: list[Op] = []
        self._tensors: dict[str, Tensor] = {}
        self._suffixes: dict[str, int] = {}  # base name -> next ``__t<i>`` to try
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._input_at: dict[Tensor, int] = {}  # input -> its position
        self._inputs_seen: tuple[Tensor, ...] | None = None  # ``inputs``, until they change
        self._outputs_seen: tuple[Tensor, ...] | None = None
        self._output_at: dict[Tensor, int] = {}  # output -> its first position
        self.call_sites: list[Op] = []
        # outputs the user declared, set when autodiff first adds activations as outputs
        self.declared_outputs: int | None = None
        # False for a graph with a hand-written gradient (popxl-addons' ``build_grad``): autodiff
        # of a graph calling it needs its GradGraphInfo in ``called_graphs_grad_info``
        self.recursively_autodiffable = True
        self._op_created_hooks: dict[int, Callable[[Op], Any]] = {}
        self._next_hook = 0

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> Graph:
        context.push_graph(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        context.pop_graph()

    # -- views -------------------------------------------------------------------------------
    @property
    def _ir(self) -> Ir:
        """The Ir (PopXL keeps it in ``graph._ir``; the applications' LM heads build their
        loss graphs with ``fwd_graph.graph._ir.create_graph(...)``)."""
        return self.ir

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The graph's inputs, in order (parameters of a subgraph)."""
        if self._inputs_seen is None:  # one tuple until the inputs change
            self._inputs_seen = tuple(self._inputs)
        return self._inputs_seen

    @property
    def _by_ref_inputs(self) -> set[Tensor]:
        """The inputs passed by reference (PopXL's private set, read by its own tests)."""
        return {t for t in self._inputs if t.by_ref}

    @property
    def inputs_by_name(self) -> dict[str, Tensor]:
        """The inputs keyed by their names."""
        return {t.name: t for t in self._inputs}

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The graph's outputs, in order."""
        if self._outputs_seen is None:
            self._outputs_seen = tuple(self._outputs)
        return self._outputs_seen

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor of the graph: inputs, op outputs, variables and constants."""
        return tuple(self._tensors.values())

    @property
    def variables(self) -> tuple[Variable, ...]:
        """The variables of the graph (only the main graph holds variables)."""
        return tuple(t for t in self._tensors.values() if isinstance(t, Variable))

    @property
    def constants(self) -> tuple[Constant, ...]:
        """The constants of the graph."""
        return tuple(t for t in self._tensors.values() if isinstance(t, Constant))

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        """The subgraphs this graph's ops call (call, repeat, conditional), once each."""
        seen: dict[int, Graph] = {}
        for op in self.ops:
            for g in op.called_graphs:
                seen.setdefault(id(g), g)
        return tuple(seen.values())

    @property
    def _pb_graph(self) -> PbGraph:
        """A read-only PopART view of this graph (``getOps()``, input and output ids), as
        PopXL programs reach ``graph._pb_graph``."""
        return PbGraph(self)

    @property
    def id(self) -> str:
        """The graph's unique identifier in its Ir (its unique name)."""
        return self.name

    @property
    def main_graph(self) -> Graph:
        """The main graph of this graph's Ir."""
        return self.ir.main_graph

    def input_index(self, t: Tensor) -> int | None:
        """The position of ``t`` among the graph's inputs, or None when it is not one."""
        return self._input_at.get(t)

    def output_index(self, t: Tensor) -> int | None:
        """The first position of ``t`` among the graph's outputs, or None."""
        return self._output_at.get(t)

    def get_tensor(self, tensor_id: str) -> Tensor:
        """The tensor named ``tensor_id`` in this graph (``KeyError`` when there is none)."""
        return self._tensors[tensor_id]

    def __contains__(self, t: object) -> bool:
        if not isinstance(t, Tensor):
            raise TypeError(f"`in graph` expects a Tensor, got {type(t).__name__}")
        return t.graph is self

    def __repr__(self) -> str:
        return f"Graph[id={self.id} name={self.name}]"  # PopXL's form

    def __str__(self) -> str:
        return provided("format_listing")(self)  # xlgraph.core.listing

    def to_dot(self, path: str | Path | None = None) -> str:
        """This graph as Graphviz DOT text: inputs, variables, constants, ops, named edges.

        Args:
            path: also write the text there (``.dot``), or render it (``.svg``, ``.png``;
                needs Graphviz's ``dot`` program).

        Returns:
            The DOT text.
        """
        return provided("write_dot")(provided("graph_dot")(self), path)  # core.listing

    def _repr_mimebundle_(self, include: object = None, exclude: object = None
                          ) -> dict[str, str]:
        """Jupyter's view: the drawing (SVG, through Graphviz's ``dot``), else the listing and
        a one-line hint."""
        return provided("display_bundle")(self)  # core.listing

    # -- building ----------------------------------------------------------------------------
    def check_mutable(self) -> None:
        """Raise ``IrFrozenError`` when a Session owns the Ir (its graphs can no longer change)."""
        if self.ir.frozen:
            raise IrFrozenError(
                f"graph {self.name!r} belongs to an Ir owned by a Session and cannot be modified "
                f"[at {user_source_line()}]"
            )

    def unique_name(self, name: str) -> str:
        """``name`` in the current name scope, with a ``__t<N>`` suffix if the graph has it.

        Each base name keeps the next suffix to try, so making n names is O(n) however many
        share a base."""
        name = context.scoped_name(name)
        if name not in self._tensors:
            return name
        i = self._suffixes.get(name, 0)
        while f"{name}__t{i}" in self._tensors:
            i += 1
        self._suffixes[name] = i + 1
        return f"{name}__t{i}"

    def add_tensor(self, spec: TensorSpec, name: str, producer: Op | None = None) -> Tensor:
        """Low-level: add a tensor of ``spec`` (produced by ``producer``); ops call this."""
        self.check_mutable()
        t = Tensor(self, self.unique_name(name), spec, producer)
        self._tensors[t.name] = t
        return t

    def add_input(self, spec: TensorSpec, name: str, by_ref: bool = False) -> Tensor:
        """Low-level: add a graph input; ``graph_input`` is the public way."""
        if self.is_main:
            raise GraphMismatchError(
                f"graph_input {name!r}: the main graph has no inputs; use h2d_stream + "
                f"ops.host_load to feed data [at {user_source_line()}]"
            )
        t = self.add_tensor(spec, name)
        t.by_ref = by_ref
        self._input_at[t] = len(self._inputs)
        self._inputs.append(t)
        self._inputs_seen = None
        return t

    def add_output(self, t: Tensor) -> None:
        """Low-level: mark ``t`` as an output; ``graph_output`` is the public way."""
        self.check_mutable()
        if t.graph is not self:
            raise GraphMismatchError(
                f"graph_output: tensor {t.id} {t.spec} belongs to graph {t.graph.name!r}, not "
                f"{self.name!r} [at {user_source_line()}]"
            )
        self._output_at.setdefault(t, len(self._outputs))
        self._outputs.append(t)
        self._outputs_seen = None

    def add_variable(self, data: np.ndarray, name: str,
                     shape: tuple[int, ...] | None = None) -> Variable:
        """A new variable holding ``data``; ``shape`` (one replica's) defaults to data's."""
        self.check_mutable()
        from xlgraph import dtypes

        spec = TensorSpec(data.shape if shape is None else shape, dtypes.of_array(data))
        v = Variable(self, self.unique_name(name), spec, data)
        self._tensors[v.name] = v
        return v

    def add_constant(self, data: np.ndarray, name: str) -> Constant:
        """Low-level: add a constant holding ``data``; ``constant`` is the public way."""
        self.check_mutable()
        from xlgraph import dtypes

        spec = TensorSpec(data.shape, dtypes.of_array(data))
        c = Constant(self, self.unique_name(name), spec, data)
        self._tensors[c.name] = c
        return c

    def append_op(self, op: Op) -> None:
        """Low-level: append ``op`` to the graph; op builders call this."""
        self.check_mutable()
        self.ops.append(op)
        for hook in list(self._op_created_hooks.values()):
            hook(op)

    # -- editing (used by graph transforms) --------------------------------------------------
    def remove_ops(self, ops: Iterable[Op]) -> None:
        """Drop ``ops`` and the tensors they produce; the other ops keep their order (and are
        renumbered)."""
        self.check_mutable()
        dropped = set(ops)
        self.ops = [op for op in self.ops if op not in dropped]
        for i, op in enumerate(self.ops):
            op.index = i
        for op in dropped:
            for t in op.outputs:
                self._tensors.pop(t.name, None)

    def remove_outputs(self, positions: Iterable[int]) -> None:
        """Drop the outputs at ``positions`` (a graph not called yet); the others keep their
        order."""
        self.check_mutable()
        gone = set(positions)
        self._outputs = [t for i, t in enumerate(self._outputs) if i not in gone]
        self._output_at = {}
        for i, t in enumerate(self._outputs):
            self._output_at.setdefault(t, i)
        self._outputs_seen = None

    def remove_inputs(self, inputs: Iterable[Tensor]) -> None:
        """Drop graph inputs that no op reads and no output returns.

        Raises:
            ValueError: if one of them is still used.
        """
        self.check_mutable()
        gone = set(inputs)
        used = {t for op in self.ops for t in op.inputs} | set(self._outputs)
        if gone & used:
            names = ", ".join(sorted(t.id for t in gone & used))
            raise ValueError(f"graph {self.name!r}: inputs {names} are still used")
        self._inputs = [t for t in self._inputs if t not in gone]
        self._input_at = {t: i for i, t in enumerate(self._inputs)}
        self._inputs_seen = None
        for t in gone:
            del self._tensors[t.name]

    # -- hooks -------------------------------------------------------------------------------
    def register_op_created_hook(self, fn: Callable[[Op], Any]) -> int:
        """Call ``fn(op)`` for every op added to this graph from now on; returns a handle."""
        handle = self._next_hook
        self._next_hook += 1
        self._op_created_hooks[handle] = fn
        return handle

    def remove_op_created_hook(self, handle: int) -> None:
        """Stop calling the hook registered under ``handle``.

        Raises:
            KeyError: for an unknown handle.
        """
        if handle not in self._op_created_hooks:
            raise KeyError(f"graph {self.name!r} has no op-created hook with handle {handle}")
        del self._op_created_hooks[handle]
