"""All-reduces between instances in buckets, begun as soon as their inputs are ready.

In an ``xlgraph-run`` job every all-reduce swaps its data with the other instances. Left as they
are, a training step's gradient all-reduces are one blocking exchange each, after the whole
backward pass. ``bucket_all_reduces`` rewrites each straight-line body of the plan:

- the all-reduces of values that vary between replicas are ordered by the step that makes
  their input (the last step writing its storage), and packed in that order into buckets that
  close once they hold ``cap`` bytes (``XLGRAPH_BUCKET_MB``, 25 MiB by default; the first
  bucket 1 MiB, so the first exchange starts early), as PyTorch's DistributedDataParallel does,
  and before the inputs of the last step that makes any (the end of a backward pass, such as a
  tied embedding's gradient), which travel in a bucket of their own;
- after the step that completes a bucket, a ``all_reduce_bucket`` step copies the bucket's
  inputs into this instance's row of one buffer and begins one exchange of it, in place
  (``MpiExchange.start``); the first bucket of a body first checks that every instance runs
  the same all-reduces, with one header naming them all (one header per run instead of one
  per all-reduce), without blocking where the exchange has its progress thread;
- each all-reduce waits for its bucket where it was, except those of the last bucket: they,
  and the steps after them that depend on them, move after the steps that do not (the
  updates of the gradients exchanged earlier run while the last bucket travels); each then
  reduces every instance's part with the same code as before, on the same values: the
  results are the unbucketed all-reduce's, bit for bit. With the numba backend a float sum
  or mean is one compiled pass over the buffer instead (``ops.loops.replica_sum``): the
  same bits, except which NaN a sum of two different NaNs gives, which IEEE leaves open
  (numpy's own loops choose by the element's position).

The exchange proceeds (a progress thread of ``xlgraph.dist``) while the steps in between run;
where the instances share a host, a bucket's buffer is memory they all map and nothing travels
(``MpiExchange.shared_rows``: two buffers used in turn, ``Bucket.turns``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from xlgraph.cost import nbytes
from xlgraph.lower.program import AliasSets, Program, Step, walk
from xlgraph.lower.replica_forms import one_replica_defn, replica_defn
from xlgraph.op import OpDef
from xlgraph.ops import loops
from xlgraph.ops.replicas import ReplicaContext
from xlgraph.tensor import TensorSpec

__all__ = ["BUCKET_MB", "FIRST_BUCKET_BYTES", "bucket_bytes", "bucketer", "Bucket"]

BUCKET_MB = "XLGRAPH_BUCKET_MB"  # the bucket size in MiB; 0 turns bucketing off
DEFAULT_MB = 25
FIRST_BUCKET_BYTES = 1 << 20
_LOOP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # summed by a compiled loop
_ALIGN = 64  # each input starts at a multiple of this many bytes in the bucket


class Bucket:
    """The buffer and the exchange in flight of one bucket: ``start`` packs the inputs into
    this instance's row of the buffer (instance ``index``) and begins the exchange;
    ``gathered(i)`` waits for it and returns every instance's part of input ``i``,
    ``(replicas, ...)``, as ``ReplicaContext.gather`` would."""

    def __init__(self, exchange: Any, instances: int, index: int, inputs: list[TensorSpec],
                 what: str, agree: str | None) -> None:
        self.exchange, self.what, self.agree = exchange, what, agree
        self.specs, self.index = inputs, index
        ends = np.cumsum([0, *(-(-nbytes(s) // _ALIGN) * _ALIGN for s in inputs)])
        self.starts = [int(at) for at in ends[:-1]]
        self.turns = [self._views(np.zeros((instances, int(ends[-1])), np.uint8))]
        self.recv, self.mine, self.packed, self.parts = self.turns[0]
        self.rows: Any = None  # xlgraph.dist.shared.SharedRows, where the instances share them
        self.started = False
        self.wait: Callable[[], np.ndarray] | None = None

    def _views(self, recv: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray],
                                               list[np.ndarray]]:
        """``recv`` (every instance's row), this instance's row, and the views of each input
        in this instance's row and in every row."""
        mine = recv[self.index]
        return (recv, mine, [self._part(mine, s, at) for s, at in zip(self.specs, self.starts)],
                [self._part(recv, s, at) for s, at in zip(self.specs, self.starts)])

    @staticmethod
    def _part(buffer: np.ndarray, spec: TensorSpec, at: int) -> np.ndarray:
        dtype, size = spec.dtype.as_numpy(), nbytes(spec)
        if not size:
            return np.empty((*buffer.shape[:-1], *spec.shape), dtype)
        return buffer[..., at:at + size].view(dtype).reshape(*buffer.shape[:-1],
                                                                       *spec.shape)

    def start(self, *arrays: np.ndarray) -> None:
        if self.wait is not None:  # an earlier run stopped between start and use
            self.wait()
        agree = self.agree
        if not self.started:  # where the instances share memory, the buffers are shared
            self.started = True
            opener = getattr(self.exchange, "shared_rows", None)
            self.rows = opener and opener(self.recv.shape[1], self.what, agree)
            if self.rows is not None:
                self.turns = [self._views(b) for b in self.rows.buffers]
                agree = None  # swapped by shared_rows
        if self.rows is not None:
            self.recv, self.mine, self.packed, self.parts = self.turns[self.rows.count % 2]
        for part, a in zip(self.packed, arrays):
            np.copyto(part, a)
        if self.rows is not None:
            self.wait = self.exchange.publish(self.rows, self.what, agree)
        else:
            self.wait = self.exchange.start(self.mine, self.recv, self.what, agree)

    def gathered(self, i: int) -> np.ndarray:
        if self.wait is not None:
            self.wait()
            self.wait = None
        part = self.parts[i]
        return part.reshape(part.shape[0] * part.shape[1], *part.shape[2:])

    def sum_into(self, i: int, out: np.ndarray, mean: bool, loop: Callable[..., None]) -> None:
        """Wait, then write the sum (``mean``: the mean) of every replica's part of input
        ``i`` into ``out`` (C-contiguous) with ``loop``, ``ops.loops.replica_sum`` compiled."""
        everyone = self.gathered(i)
        size = out.dtype.itemsize
        loop(self.recv.reshape(-1).view(out.dtype), out.reshape(-1), self.starts[i] // size,
             self.recv.shape[1] // size, self.parts[i].shape[1], len(everyone),
             out.dtype.type(0), out.dtype.type(len(everyone)), mean)


@dataclasses.dataclass
class _Member:
    """The exchange an all-reduce of a bucket sees: its part of the bucket's result."""

    bucket: Bucket
    index: int

    def allgather(self, local: np.ndarray, what: str = "collective") -> np.ndarray:
        return self.bucket.gathered(self.index)


def bucket_bytes() -> int:
    """The bucket size that ``XLGRAPH_BUCKET_MB`` (MiB, fractions allowed) asks for."""
    text = os.environ.get(BUCKET_MB, str(DEFAULT_MB))
    try:
        mib = float(text)
    except ValueError:
        mib = -1.0
    if not mib >= 0 or mib == float("inf"):
        raise ValueError(f"environment variable {BUCKET_MB}={text!r} is not a size in MiB "
                         f"(a number >= 0; 0 turns bucketing off)")
    return int(mib * (1 << 20))


def bucketer(program: Program, ctx: ReplicaContext | None, varying: set[int],
             cap: int | None = None, axis: bool = True, backend: Any = None,
             ) -> Callable[[list[Step]], list[Step]] | None:
    """The rewrite of one body of ``program`` (see the module), or None where nothing is
    bucketed (one instance, or a cap of 0); ``cap`` in bytes (default: ``XLGRAPH_BUCKET_MB``).
    ``axis``: whether the ``varying`` slots carry the replica axis (not in the plan of an
    instance of one replica, ``replicas.one_replica``). Loop and branch bodies inside a body
    are rewritten with it. With the numba ``backend``, a float sum or mean of a bucket's parts
    runs compiled (``ops.loops.replica_sum``: one pass, the same bits)."""
    if ctx is None or ctx.exchange is None or not hasattr(ctx.exchange, "start"):
        return None
    cap = bucket_bytes() if cap is None else cap
    jitted = getattr(backend, "jitted", None)
    return _Rewrite(program, ctx, varying, cap, axis, jitted).body if cap > 0 else None


class _Rewrite:
    def __init__(self, program: Program, ctx: ReplicaContext, varying: set[int],
                 cap: int, axis: bool, jitted: Callable[..., Any] | None) -> None:
        self.ctx, self.varying, self.cap, self.axis = ctx, varying, cap, axis
        self.jitted = jitted
        self.specs = program.specs
        bodies = [program.steps, *(fn.steps for fn in program.functions)]
        self.root = AliasSets(s for body in bodies for s in walk(body)).root

    def one(self, slot: int) -> TensorSpec:
        """One replica's spec of ``slot``."""
        spec = self.specs[slot]
        varies = self.axis and slot in self.varying
        return TensorSpec(spec.shape[1:], spec.dtype) if varies else spec

    def local(self, slot: int) -> TensorSpec:
        """The spec of varying ``slot`` with the replica axis (of length 1 where the plan
        leaves it out)."""
        spec = self.specs[slot]
        return spec if self.axis else TensorSpec((1, *spec.shape), spec.dtype)

    def written(self, s: Step) -> set[int]:
        """The storage roots ``s`` may write (a loop, branch or call: every slot it names)."""
        if s.kind not in ("loop", "cond"):
            return {self.root(x) for x in [*s.outs, *s.writes]}
        return {self.root(x) for inner in walk([s])
                for x in (*inner.ins, *inner.outs, *(y for pair in inner.carried for y in pair))}

    def body(self, steps: list[Step]) -> list[Step]:
        for s in steps:
            if s.body:
                s.body = self.body(s.body)
            if s.orelse:
                s.orelse = self.body(s.orelse)
        last: dict[int, int] = {}  # storage root -> index of the last step writing it
        ready: dict[int, int] = {}  # all-reduce index -> index of the step its input needs
        for j, s in enumerate(steps):
            if (s.kind == "kernel" and s.op is not None and s.op.defn.all_reduce
                    and s.ins[0] in self.varying):
                ready[j] = last.get(self.root(s.ins[0]), -1)
            for r in self.written(s):
                last[r] = j
        if not ready:
            return steps
        sizes = {j: nbytes(self.specs[steps[j].ins[0]]) for j in ready}
        buckets = self.group(ready, sizes)
        texts = [[self.text(steps[j]) for j in b] for b in buckets]
        agree = ", ".join(t for ts in texts for t in ts)
        if len(texts) > 1 or len(texts[0]) > 1:
            bytes_ = ", ".join(str(sum(sizes[j] for j in b)) for b in buckets)
            agree += (f" ({len(ready)} all-reduces in {len(buckets)} buckets of {bytes_} bytes)"
                      if len(buckets) > 1 else f" ({len(ready)} all-reduces in one bucket)")
        starts: dict[int, list[Step]] = {}
        for k, b in enumerate(buckets):  # in the order they begin (inputs ready)
            bucket = Bucket(self.ctx.exchange, self.ctx.total // self.ctx.local,
                            self.ctx.offset // self.ctx.local,
                            [self.local(steps[j].ins[0]) for j in b],
                            f"all-reduce bucket {k + 1} of {len(buckets)}",
                            agree if k == 0 else None)
            for i, j in enumerate(b):
                steps[j].defn = self.finish(steps[j], _Member(bucket, i))
            step = Step("kernel", [steps[j].ins[0] for j in b], [], steps[b[-1]].op,
                        OpDef("all_reduce_bucket", lambda *specs: None, bucket.start,
                              side_effect=True), {})
            starts.setdefault(ready[b[-1]], []).append(step)
        out = starts.get(-1, [])
        for i, s in enumerate(steps):
            out += [s, *starts.get(i, [])]
        return self.last_waits_last(out, {id(steps[j]) for j in buckets[-1]})

    def last_waits_last(self, steps: list[Step], late: set[int]) -> list[Step]:
        """``steps`` with the all-reduces of the last bucket (``late``: their ids), and every
        later step that depends on them, after the later steps that do not: the updates of the
        gradients exchanged earlier run while the last bucket travels. Only plain kernels
        without side effects move ahead, and only past steps whose storage they neither read
        nor write (nor read what those write); everything else keeps its order."""
        ahead: list[Step] = []
        behind: list[Step] = []
        read: set[int] = set()  # storage roots the steps behind read, and write
        wrote: set[int] = set()
        for s in steps:
            ins, outs = {self.root(x) for x in s.ins}, self.written(s)
            if behind and s.kind in ("kernel", "const", "bind", "ref") and not (
                    s.kind == "kernel" and s.defn.side_effect) and id(s) not in late and not (
                    ins & wrote or outs & (read | wrote)):
                ahead.append(s)
                continue
            if behind or id(s) in late:
                behind.append(s)
                read |= ins | (outs if s.kind in ("loop", "cond") else set())
                wrote |= outs
            else:
                ahead.append(s)
        return ahead + behind

    def group(self, ready: dict[int, int], sizes: dict[int, int]) -> list[list[int]]:
        """The all-reduces (step indices) of each bucket, in the order their inputs are
        ready; a bucket closes once it holds its cap or more (as DDP's), before an input
        whose exchange would begin after one of the bucket's all-reduces, and before the
        inputs of the step that makes the last ones (the end of a backward pass): those
        travel alone, while the updates of the others run (``last_waits_last``)."""
        buckets: list[list[int]] = []
        current: list[int] = []
        size = 0
        final = max(ready.values())
        for j in sorted(ready, key=lambda j: (ready[j], j)):
            if current and (ready[j] >= min(current)
                            or ready[j] == final > ready[current[-1]]):
                buckets.append(current)
                current, size = [], 0
            current.append(j)
            size += sizes[j]
            if size >= (min(self.cap, FIRST_BUCKET_BYTES) if not buckets else self.cap):
                buckets.append(current)
                current, size = [], 0
        return [*buckets, current] if current else buckets

    def text(self, s: Step) -> str:
        one = self.one(s.ins[0])
        return f"all-reduce {s.attrs['op']} of {one.dtype.as_numpy()}{list(one.shape)}"

    def finish(self, s: Step, member: _Member) -> OpDef:
        """The all-reduce ``s`` reading its part of the bucket. A sum or mean over every
        replica of floats also writes into a given buffer (``kernel_out``), so the optimiser
        steps that read it can run compiled and fused as in a one-process plan."""
        one, varies = self.one(s.ins[0]), s.outs[0] in self.varying
        ctx = dataclasses.replace(self.ctx, exchange=member)
        defn = replica_defn(s.op.defn, [True], [varies or not self.axis], [one],
                            [self.one(s.outs[0])], ctx)
        if not self.axis:
            defn = one_replica_defn(s.op.defn, defn)
        if (s.op.defn.inplace_of is not None or varies
                or s.attrs["op"] not in ("add", "mean") or one.dtype.as_numpy().kind != "f"):
            return defn
        return defn.derived(kernel_out=_sum_into(member, self.jitted))


def _sum_into(member: _Member, jitted: Callable[..., Any] | None = None,
              ) -> Callable[..., np.ndarray]:
    """``kernel_out`` of a sum or mean all-reduce of every replica: what ``ops.collectives``
    computes (``np.add.reduce`` over the replicas, then the division by their number) into
    ``out``, the same bits: numpy's reduction over a leading axis adds each replica's value in
    turn to a zero (so -0.0 + -0.0 gives 0.0), as these whole-array additions do, and they are
    faster than the reduction over strided parts of a bucket. With ``jitted`` (the numba
    backend's compiler) float32 and float64 parts are added in one compiled pass
    (``ops.loops.replica_sum``, the same bits but which of two different NaNs a sum gives)
    instead of one pass per replica and one for the division. A
    part of one element is the exception: the replicas are then numpy's inner loop, which it
    sums pairwise (from 8 on), so that reduction itself writes ``out``."""

    def kernel_out(x: np.ndarray, out: np.ndarray, op: str, group: Any) -> np.ndarray:
        if (jitted is not None and out.size > 1 and out.dtype in _LOOP_DTYPES
                and out.flags.c_contiguous):
            member.bucket.sum_into(member.index, out, op == "mean", jitted(loops.replica_sum))
            return out
        everyone = member.bucket.gathered(member.index)
        if everyone[0].size == 1:
            np.add.reduce(everyone, 0, out=out)
        else:
            np.add(everyone[0], everyone.dtype.type(0), out=out)
            for part in everyone[1:]:
                np.add(out, part, out=out)
        if op == "mean":
            np.divide(out, np.asarray(len(everyone), everyone.dtype), out=out)
        return out

    return kernel_out
