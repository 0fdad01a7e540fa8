"""The reference interpreter: runs the unoptimised op lists directly, with plain value semantics.

It shares the kernels with the compiled path but none of the lowering, so tests use it as the
oracle for the optimised plan (``Session(..., optimize=False)`` runs it, and so do
``check_numerics`` and the differential fuzzer). With several replicas every value carries the
leading replica axis of ``xlgraph.lower.replicas`` and each op runs its replicated form
(``replica_defn``, the one the compiled plan uses) once for all local replicas.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.core.trampoline import Nested, run
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.lower.replica_forms import agree, lifted, replica_defn
from xlgraph.lower.replicas import ReplicaContext
from xlgraph.op import Op, OpDef
from xlgraph.ops.control import branch_of
from xlgraph.ops.half import half_form
from xlgraph.tensor import Tensor


class _HostIO:
    """Per-transfer host data; ``single_replica`` adds (loads) or drops (stores) the replica
    axis that host arrays leave out when an instance runs one replica of several."""

    def __init__(self, inputs: dict[Any, np.ndarray], outputs: dict[Any, np.ndarray],
                 transfers: int, single_replica: bool = False) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.transfers = transfers
        self.single_replica = single_replica
        self.loaded: dict[Any, int] = {}
        self.stored: dict[Any, int] = {}

    def load(self, stream: Any) -> np.ndarray:
        data = self.inputs[stream]
        if self.transfers > 1:
            k = self.loaded.get(stream, 0)
            self.loaded[stream] = k + 1
            data = data[k % self.transfers]
        return np.array(data[None] if self.single_replica else data, copy=True)

    def store(self, stream: Any, value: np.ndarray) -> None:
        if self.single_replica:
            value = value[0]
        if self.transfers > 1:
            k = self.stored.get(stream, 0)
            self.stored[stream] = k + 1
            self.outputs[stream][k % self.transfers] = value
        else:
            self.outputs[stream][...] = value


class Interpreter:
    """Evaluates an Ir op by op. ``current_op`` names the op that was running if one fails.
    With a ``ctx`` (several replicas), values are ``(ctx.local,) + shape``."""

    def __init__(self, ir: Ir, ctx: ReplicaContext | None = None) -> None:
        self.ir = ir
        self.ctx = ctx
        self.single_replica = ctx is not None and ctx.local == 1
        self.current_op: Op | None = None
        self._defns: dict[Op, OpDef] = {}

    def run(self, variables: dict[Tensor, np.ndarray], inputs: dict[Any, np.ndarray],
            outputs: dict[Any, np.ndarray]) -> None:
        io = _HostIO(inputs, outputs, self.ir.num_host_transfers, self.single_replica)
        env: dict[Tensor, Any] = dict(variables)
        run(self.graph(self.ir.main_graph, env, io))

    def constant(self, c: Tensor) -> np.ndarray:
        """A fresh array holding constant ``c``."""
        return c.data.copy() if self.ctx is None else lifted(c.data, self.ctx.local)

    def defn(self, op: Op) -> OpDef:
        """The op's definition, in its replicated form when there are replicas."""
        found = self._defns.get(op)
        if found is None:
            ins, outs = [t.spec for t in op.inputs], [t.spec for t in op.outputs]
            found = half_form(op.defn, ins, outs)
            if self.ctx is not None:
                found = replica_defn(found, [True] * len(ins), [True] * len(outs), ins, outs,
                                     self.ctx)
            self._defns[op] = found
        return found

    def graph(self, graph: Graph, env: dict[Tensor, Any], io: _HostIO) -> Nested[None]:
        """Run ``graph``'s ops; a call, repeat or conditional runs its graphs as nested
        generators (``xlgraph.core.trampoline``), so nesting is bounded by memory only."""
        for c in graph.constants:
            env[c] = self.constant(c)
        for op in graph.ops:
            self.current_op = op
            args = [env[t] for t in op.inputs]
            kind = op.defn.kind
            if kind == "call":
                outs = yield self.call(op, args, io)
            elif kind == "repeat":
                outs = yield self.repeat(op, args, io)
            elif kind == "conditional":
                outs = yield self.conditional(op, args, io)
            else:
                outs = self.op(op, args, io)
            env.update(zip(op.outputs, outs))

    def op(self, op: Op, args: list[Any], io: _HostIO) -> list[Any]:
        """Run one op that calls no graph."""
        kind = op.defn.kind
        if kind == "host_load":
            return [io.load(op.attrs["stream"])]
        if kind == "host_store":
            io.store(op.attrs["stream"], args[0])
            return []
        return self.results(op, self.defn(op).kernel(*args, **op.attrs))

    def results(self, op: Op, result: Any) -> list[Any]:
        """A kernel's return value as the list of output values."""
        outs = list(result) if isinstance(result, tuple) else [result]
        if op.defn.view and op.defn.inplace_of is None:
            return [np.array(o, copy=True) for o in outs]
        return [np.asarray(o) for o in outs]  # numpy scalars (0-d ufunc results) become arrays

    def _enter(self, op: Op, args: list[Any]) -> dict[Tensor, Any]:
        return _bind(op.attrs["graph"], args, op.attrs["modified"])

    def call(self, op: Op, args: list[Any], io: _HostIO) -> Nested[list[Any]]:
        graph: Graph = op.attrs["graph"]
        env = self._enter(op, args)
        yield self.graph(graph, env, io)
        self.current_op = op
        return [env[t] for t in graph.outputs[: len(op.outputs)]]

    def repeat(self, op: Op, args: list[Any], io: _HostIO) -> Nested[list[Any]]:
        graph: Graph = op.attrs["graph"]
        env = self._enter(op, args)
        for _ in range(op.attrs["count"]):
            yield self.graph(graph, env, io)
            carried = [env[t] for t in graph.outputs]
            env.update(zip(graph.inputs, carried))
        self.current_op = op
        return [env[t] for t in graph.outputs[: len(op.outputs)]]

    def condition(self, op: Op, value: Any) -> bool:
        return bool(np.asarray(value if self.ctx is None else agree(op, value)).item())

    def conditional(self, op: Op, args: list[Any], io: _HostIO) -> Nested[list[Any]]:
        graph, feeds, modified = branch_of(op, self.condition(op, args[0]))
        env = _bind(graph, args[feeds], modified)
        yield self.graph(graph, env, io)
        self.current_op = op
        return [np.array(env[t], copy=True) for t in graph.outputs[: len(op.outputs)]]


def _bind(graph: Graph, args: list[Any], modified: set[int]) -> dict[Tensor, Any]:
    """Values for ``graph``'s inputs: shared when by reference or modified, else copies."""
    env = {}
    for i, (t, value) in enumerate(zip(graph.inputs, args)):
        by_ref = t.by_ref or i in modified
        env[t] = value if by_ref else np.array(value, copy=True)
    return env
