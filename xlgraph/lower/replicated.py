"""Running several replicas at once: every value carries a leading replica axis (DESIGN §7).

The replicated executable walks the op lists like the reference interpreter, but each array
holds the values of all of this instance's replicas, and each op runs once for all of them: its
``OpDef.replicated`` form when it has one, numpy broadcasting for elementwise ops, else its
kernel looped over the replica axis. Collectives exchange data through the ``ReplicaContext``
(with other processes through ``xlgraph.dist``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlgraph.errors import ExecutionError
from xlgraph.ir import Ir
from xlgraph.lower.executable import InterpretedExecutable
from xlgraph.lower.interpreter import Interpreter
from xlgraph.op import Op
from xlgraph.ops.replicas import Exchange, ReplicaContext, aligned
from xlgraph.tensor import Tensor


class ReplicatedInterpreter(Interpreter):
    """The interpreter over values with a leading axis of ``ctx.local`` replicas."""

    def __init__(self, ir: Ir, ctx: ReplicaContext) -> None:
        super().__init__(ir)
        self.ctx = ctx
        self.single_replica = ctx.local == 1

    def _enter(self, op: Op, args: list[Any]) -> dict[Tensor, Any]:
        """Call inputs bound without copies when the callee modifies nothing in place (the
        copies cost a replica axis of every weight per call)."""
        graph = op.attrs["graph"]
        passes_through = any(t in graph.inputs for t in graph.outputs)
        if op.defn.kind == "call" and not passes_through and not _modifies_inputs(graph, set()):
            return dict(zip(graph.inputs, args))
        return super()._enter(op, args)

    def constant(self, c: Tensor) -> np.ndarray:
        return np.repeat(c.data[None], self.ctx.local, axis=0)

    def condition(self, op: Op, value: Any) -> bool:
        flags = np.asarray(value).reshape(len(value), -1)[:, 0]
        if not (flags == flags[0]).all():
            raise ExecutionError(
                f"{op.describe()}: the replicas disagree on the condition ({flags.tolist()}); "
                f"a conditional must take one branch on every replica"
            )
        return bool(flags[0])

    def op(self, op: Op, args: list[Any], io: Any) -> list[Any]:
        defn = op.defn
        if defn.kind != "kernel":
            return super().op(op, args, io)
        if defn.replicated is not None:
            result = defn.replicated(self.ctx, *args, **op.attrs)
            if result is not None:
                return self.results(op, result)
        if defn.elementwise:
            return self.results(op, defn.kernel(*aligned(args, op.outputs[0].rank), **op.attrs))
        return self.loop(op, args)

    def loop(self, op: Op, args: list[Any]) -> list[Any]:
        """The plain kernel once per replica; in-place ops write through to the batched input."""
        defn = op.defn
        if defn.inplace_of is not None and defn.view:
            raise ExecutionError(f"{op.describe()}: this aliasing op has no replicated form")
        per_replica = [self.results(op, defn.kernel(*(a[r] for a in args), **op.attrs))
                       for r in range(self.ctx.local)]
        outs = [np.stack(values) for values in zip(*per_replica)]
        if defn.inplace_of is not None:
            outs[0] = args[defn.inplace_of]
        return outs


def _modifies_inputs(graph: Any, seen: set[int]) -> bool:
    """Whether any op of ``graph`` or of the graphs it calls works in place."""
    if id(graph) in seen:
        return False
    seen.add(id(graph))
    return any(op.defn.inplace_of is not None or op.attrs.get("modified")
               or any(_modifies_inputs(g, seen) for g in op.called_graphs) for op in graph.ops)


class ReplicatedExecutable(InterpretedExecutable):
    """The executable of an Ir with several replicas (or instances); variables hold one value
    per local replica, ``(local replicas,) + shape``."""

    def __init__(self, ir: Ir, exchange: Exchange | None = None) -> None:
        super().__init__(ir)
        local = ir.instance_replication_factor
        self.ctx = ReplicaContext(local, ir.replication_factor, ir.replica_offset, exchange)
        self.arrays = [np.zeros((local, *v.shape), v.dtype.as_numpy()) for v in self.variables]
        self.interpreter = ReplicatedInterpreter(ir, self.ctx)
        self.source = (f"# {ir.replication_factor} replicas ({local} in this instance): the "
                       f"graph is interpreted op by op over a leading replica axis\n")
