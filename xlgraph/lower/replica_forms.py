"""Ops over the replica axis: how one op runs on values that carry a leading axis of local
replicas (``xlgraph.lower.replicas`` decides which values carry it), shared by the generated
step and the reference interpreter.

- ``OpDef.replica == "local"`` ops compute each replica on its own. Elementwise ops broadcast
  (their ``kernel_out`` and compiled loop forms stay where the shapes allow it); ops with an
  ``OpDef.replicated`` form get every input with the axis (values held once are broadcast
  views, stride 0 on the axis); the rest loop their kernel over the replicas.
- ``"collective"`` ops (all-reduce, all-gather) combine the replicas of each group through the
  ``ReplicaContext``; over every replica their result is held once.
- ``"per_replica"`` ops (slices by position, sharding, remote memory) always run their
  replicated form: their results differ per replica even from identical inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph.errors import ExecutionError
from xlgraph.layout import same_layout
from xlgraph.op import Op, OpDef
from xlgraph.ops.replicas import ReplicaContext, aligned
from xlgraph.tensor import TensorSpec

__all__ = ["agree", "agree_defn", "folded_batch", "is_global", "lift_defn", "lifted",
           "lifting_defn", "one_replica_defn", "replica_defn"]


def agree(op: Op, value: Any) -> np.ndarray:
    """The condition every replica of a conditional agrees on; raises when they differ."""
    flags = np.asarray(value).reshape(len(value), -1)[:, 0]
    if not (flags == flags[0]).all():
        raise ExecutionError(
            f"{op.describe()}: the replicas disagree on the condition ({flags.tolist()}); "
            f"a conditional must take one branch on every replica"
        )
    return np.asarray(flags[0])


def agree_defn(op: Op) -> OpDef:
    return OpDef("replicas_agree", lambda *specs: specs[0], lambda value: agree(op, value),
                 side_effect=True)  # checked even where the conditional is dead code


def lifted(value: np.ndarray, local: int) -> np.ndarray:
    """A value held once, as a fresh array with one copy per local replica."""
    return np.repeat(np.asarray(value)[None], local, axis=0)


def lift_defn(local: int) -> OpDef:
    return OpDef("replicas_lift", lambda spec: spec, lambda value: lifted(value, local))


def is_global(attrs: dict[str, Any], total: int) -> bool:
    group = attrs.get("group")
    return group is None or group.group_size == total


def _results(result: Any) -> list[Any]:
    return list(result) if isinstance(result, tuple) else [result]


def _writable(x: Any) -> Any:
    """``x``, or a copy when it is a read-only (broadcast) view."""
    return x if not isinstance(x, np.ndarray) or x.flags.writeable else np.array(x)


def _loop(defn: OpDef, arrays: tuple[np.ndarray, ...], vary: list[bool], local: int,
          attrs: dict[str, Any]) -> Any:
    """The plain kernel once per replica; in-place ops write through to the batched input."""
    if defn.inplace_of is not None and defn.view:
        raise ExecutionError("this aliasing op has no replicated form")
    per = [_results(defn.kernel(*(a[r, ...] if v else a for a, v in zip(arrays, vary)),
                                **attrs))
           for r in range(local)]
    outs = [_joined(values, arrays) for values in zip(*per)]
    if defn.inplace_of is not None:
        outs[0] = arrays[defn.inplace_of]
    return tuple(outs) if len(outs) != 1 or isinstance(per[0], tuple) else outs[0]


def _joined(values: tuple[Any, ...], arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    """The replicas' results stacked on a new leading axis. One replica's result (an instance
    of one replica in an ``xlgraph-run`` job) gets the axis as a view instead of a copy when
    it is a fresh writable array of its own, not an input or a view of one (or of a cached
    constant)."""
    if len(values) == 1:
        x = np.asarray(values[0])
        if (x.flags.owndata and x.flags.writeable
                and not any(isinstance(a, np.ndarray) and np.may_share_memory(x, a)
                            for a in arrays)):
            return x[None]
    return np.stack([np.asarray(x) for x in values])


def folded_batch(defn: OpDef, vary: list[bool], ins: list[TensorSpec]) -> tuple[int, ...] | None:
    """The inputs whose replica axis ``defn``'s replicated form folds into their batch axis
    (``OpDef.replicated.batch``), where that form runs: a local op, not shifting every input,
    whose batched inputs all vary and no other does; else None."""
    if defn.replica != "local" or (getattr(defn.replicated, "shift", None) is not None
                                   and all(vary)):
        return None
    batch = getattr(defn.replicated, "batch", None)
    batch = None if batch is None else batch(ins)
    if batch is None or not all(v == (i in batch) for i, v in enumerate(vary)):
        return None
    return batch


def replica_defn(defn: OpDef, vary: list[bool], out_vary: list[bool], ins: list[TensorSpec],
                 outs: list[TensorSpec], ctx: ReplicaContext) -> OpDef:
    """``defn`` as it runs on values of which ``vary`` (per input) carry the replica axis,
    giving outputs of which ``out_vary`` carry it; ``ins``/``outs`` are one replica's specs."""
    local = ctx.local
    if defn.replica == "local" and defn.elementwise:
        rank = len(outs[0].shape)
        full = all(len(s.shape) == rank for s, v in zip(ins, vary) if v)
        if all(v and s.shape == outs[0].shape for s, v in zip(ins, vary)):
            return defn.derived(replicated=None)  # as it is, on longer arrays
        ufuncs = isinstance(defn.kernel, np.ufunc) and defn.kernel_out in (None, defn.kernel)
        if full and ufuncs:  # numpy broadcasts the values held once
            return defn.derived(loop=None, replicated=None)
        shape = (local, *outs[0].shape)

        def broadcast(*arrays: np.ndarray, **attrs: Any) -> Any:
            lined = [a if i == defn.inplace_of else np.broadcast_to(
                aligned((a,), rank)[0] if v else a, shape)
                for i, (a, v) in enumerate(zip(arrays, vary))]
            result = defn.kernel(*lined, **attrs)
            return arrays[defn.inplace_of] if defn.inplace_of is not None else result

        return defn.derived(kernel=broadcast, kernel_out=None, loop=None, layout=None,
                            replicated=None)

    shift = getattr(defn.replicated, "shift", None)
    if defn.replica == "local" and shift is not None and all(vary):
        return _shifted_defn(defn, shift, len(ins[0].shape) + 1)
    batch = folded_batch(defn, vary, ins)
    if batch is not None:
        return _folded_defn(defn, batch)
    contiguous = not defn.view and defn.inplace_of is None
    # A value held once reaches a local form with a replica axis of length 1 (numpy broadcasts
    # it; ``ops.replicas.held_once`` tells), a collective's as a broadcast of every replica.
    exchanged = defn.replica != "local"

    def expand(a: np.ndarray) -> np.ndarray:
        return np.broadcast_to(a, (local, *np.shape(a))) if exchanged else np.asarray(a)[None]

    def finish(r: Any, varies: bool) -> Any:
        r = _writable(r) if varies else np.array(r[0])
        return np.ascontiguousarray(r) if contiguous and isinstance(r, np.ndarray) else r

    every = all(vary)

    def run(*arrays: np.ndarray, **attrs: Any) -> Any:
        result = None
        if defn.replicated is not None:
            full = arrays if every else [a if v else expand(a) for a, v in zip(arrays, vary)]
            result = defn.replicated(ctx, *full, **attrs)
        if result is None:
            if exchanged:
                raise ExecutionError(f"{defn.name} has no replicated form")
            return _loop(defn, arrays, vary, local, attrs)
        if not isinstance(result, tuple):
            return finish(result, out_vary[0])
        return tuple(map(finish, result, out_vary))

    run.loops = defn.replicated is None  # type: ignore[attr-defined]
    kernel_out = None
    sliced = [s for s, v in zip(ins, vary) if v] + outs  # what a loop gets one replica of
    if (defn.replica == "local" and defn.loop is not None and contiguous and all(out_vary)
            and all(s.shape for s in sliced)):
        # a compiling backend may run the op's loop form once per replica in a segment
        # (``codegen_statements``; ``a[r]`` of a 0-d value would be a scalar, not an array):
        # the results then go to pool buffers
        run.per_replica = (defn, vary, ins, outs)  # type: ignore[attr-defined]
        kernel_out = _copied_out(run)
    return defn.derived(kernel=run, kernel_out=kernel_out, loop=None,
                        layout=_view_layout(defn, ins[0]) if defn.view else None,
                        replicated=None, scratch=0,  # ``run`` takes no scratch arrays
                        c_contiguous=contiguous)  # ``finish`` makes its results so


def one_replica_defn(defn: OpDef, form: OpDef) -> OpDef:
    """``form`` (``defn``'s ``replica_defn`` for one local replica, every input and output
    varying) on values without the replica axis, as an instance of one replica holds them:
    each call gives the inputs an axis of length 1 and takes it off the results (an in-place
    result is its input itself). ``form.kernel_out``, if any, is taken as it is."""
    kernel = form.kernel

    def run(*arrays: np.ndarray, **attrs: Any) -> Any:
        result = kernel(*(np.asarray(a)[None] for a in arrays), **attrs)
        outs = [r[0, ...] for r in _results(result)]
        if defn.inplace_of is not None:
            outs[0] = arrays[defn.inplace_of]
        return tuple(outs) if isinstance(result, tuple) else outs[0]

    return form.derived(kernel=run, layout=defn.layout if defn.view else None,
                        c_contiguous=form.c_contiguous)


def _copied_out(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """A ``kernel_out`` that copies ``kernel``'s results into ``out``."""

    def kernel_out(*arrays: np.ndarray, out: Any, **attrs: Any) -> Any:
        result = kernel(*arrays, **attrs)
        for o, r in zip(_results(out), _results(result)):
            np.copyto(o, r)
        return out

    return kernel_out


def _view_layout(defn: OpDef, one: TensorSpec) -> Callable[..., str] | None:
    """The layout of a view over the replica axis of a C-contiguous input, from the op's own
    declaration for one replica: a reshape stays C-ordered, a view dense in another axis
    order (a transpose) stays dense, since the replica axis stays outermost; other views (a
    slice leaves gaps between replicas) may be anything."""
    if defn.layout is None:
        return None

    def layout(spec: TensorSpec, **attrs: Any) -> str:
        if defn.layout is same_layout:
            return "C"
        return "D" if defn.layout(one, **attrs) == "D" else "?"

    return layout


def lifting_defn(defn: OpDef, out_vary: list[bool], local: int) -> OpDef:
    """``defn`` on values held once, with the outputs of ``out_vary`` copied onto the replica
    axis (values a later in-place op makes differ between replicas, such as an ``init``)."""

    def kernel(*arrays: np.ndarray, **attrs: Any) -> Any:
        result = defn.kernel(*arrays, **attrs)
        outs = [lifted(r, local) if v else r for r, v in zip(_results(result), out_vary)]
        return tuple(outs) if isinstance(result, tuple) else outs[0]

    return defn.derived(kernel=kernel, kernel_out=None, loop=None, layout=None,
                        replicated=None)


def _shifted_defn(defn: OpDef, shift: Callable[..., dict[str, Any]], rank: int) -> OpDef:
    """``defn`` with its axis attributes moved past the replica axis, in every form it has
    (``kernel_out`` and the loop form too: reductions and softmax keep their pool buffers and
    compiled loops)."""

    def kernel(*arrays: np.ndarray, **attrs: Any) -> Any:
        return defn.kernel(*arrays, **shift(attrs, rank))

    def kernel_out(*arrays: np.ndarray, **attrs: Any) -> Any:
        return defn.kernel_out(*arrays, **shift(attrs, rank))

    def loop(specs: list[TensorSpec], **attrs: Any) -> Any:
        return defn.loop(specs, **shift(attrs, rank))

    return defn.derived(
        kernel=kernel, kernel_out=None if defn.kernel_out is None else kernel_out,
        loop=None if defn.loop is None else loop, layout=None, replicated=None)


def _fold(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _folded_defn(defn: OpDef, batch: tuple[int, ...]) -> OpDef:
    """``defn`` with the replica axis folded into the batch axis of its inputs at ``batch``
    (the others are held once) and of its outputs, ``kernel_out`` included."""

    def args(arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        return [_fold(a) if i in batch else a for i, a in enumerate(arrays)]

    def kernel(*arrays: np.ndarray, **attrs: Any) -> Any:
        lead = arrays[batch[0]].shape[:2]
        result = defn.kernel(*args(arrays), **attrs)
        outs = [r.reshape(*lead, *r.shape[1:]) for r in _results(result)]
        return tuple(outs) if isinstance(result, tuple) else outs[0]

    def kernel_out(*arrays: np.ndarray, out: Any, **attrs: Any) -> Any:
        folded = tuple(map(_fold, out)) if isinstance(out, tuple) else _fold(out)
        if attrs.get("scratch"):
            attrs["scratch"] = tuple(map(_fold, attrs["scratch"]))
        defn.kernel_out(*args(arrays), out=folded, **attrs)
        return out

    return defn.derived(
        kernel=kernel, kernel_out=None if defn.kernel_out is None else kernel_out,
        loop=None, layout=None, replicated=None)
