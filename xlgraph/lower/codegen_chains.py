"""The generated step's Adam chains (``adam_chains.py``): one compiled loop per Adam update.

With a backend that compiles, the first four loop steps of a chain write no line; the chain's
``scaled_add_`` writes one call of ``adam_loops.adam_step`` on the gradient, the moments, the
weight, the step count and the factors (``j_adam_step(...)``, its comment naming the four
ops), writing the moments and the weight (or their spare arrays) as those steps would. The
step count's ``add_`` keeps its line, before that call. A chain whose loop the backend does
not compile runs as four steps, as any other. An embedding pair (``embedding_pairs.py``) runs
likewise at its ``add``, as one call of ``embedding_loops.gather_grad_add``, a softmax loss
(``softmax_losses.py``) at its loss, as one call of ``softmax_loops.softmax_nll``, a scaled
softmax or its scaled gradient (``scaled_softmax.py``) at its last step, as one call of its
loop, and a loop pair (``loop_pairs.py``) at its second step, as one call of its
``ops.pair_loops`` loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.lower import (
    adam_chains,
    annotate,
    embedding_pairs,
    loop_pairs,
    scaled_softmax,
    softmax_losses,
)
from xlgraph.lower.codegen_statements import Statements
from xlgraph.lower.program import Step
from xlgraph.ops.adam_loops import adam_step_loop
from xlgraph.ops.embedding_loops import gather_grad_add_loop
from xlgraph.ops.half import as_bits
from xlgraph.ops.pair_loops import PAIRS
from xlgraph.ops.softmax_loops import softmax_nll_loop

__all__ = ["Chains"]


class Chains(Statements):
    """``Statements`` plus the Adam chains, embedding pairs, softmax losses, scaled softmaxes
    (folds) and loop pairs of each body."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chains: dict[Step, adam_chains.Chain] = {}
        self.held: dict[Step, list[str]] = {}  # a waiting chain step -> its arguments' names
        self.chain_loops: dict[adam_chains.Chain, tuple[Any, tuple]] = {}  # compiled loops
        self.pairs: dict[Step, embedding_pairs.Pair] = {}
        self.pair_loops: dict[embedding_pairs.Pair, tuple[Any, tuple, list[str]]] = {}
        self.losses: dict[Step, softmax_losses.SoftmaxLoss] = {}
        self.loss_loops: dict[softmax_losses.SoftmaxLoss, tuple[Any, tuple, list[str]]] = {}
        self.folds: dict[Step, scaled_softmax.Fold] = {}
        self.fold_loops: dict[scaled_softmax.Fold, tuple[Any, tuple, list[str]]] = {}
        self.twos: dict[Step, tuple[Step, Step]] = {}  # loop pairs: each step -> the pair
        self.two_loops: dict[Step, tuple[Any, tuple, list[str]]] = {}  # by the pair's second

    def body_chains(self, steps: list[Step]) -> None:
        """Find the chains of ``steps``, a body written with ``self.plan``."""
        if self.backend is not None:
            self.chains.update(adam_chains.find(steps, self.plan, self.loop_ready_here))
            self.pairs.update(embedding_pairs.find(steps, self.plan, self.dense_loop_ready,
                                                   self.program.specs))
            self.losses.update(softmax_losses.find(steps, self.plan, self.dense_loop_ready))
            self.folds.update(scaled_softmax.find(steps, self.plan, self.program.specs,
                                                  self.dense_loop_ready))
            self.twos.update(loop_pairs.find(steps, self.plan, self.dense_loop_ready))

    def dense_loop_ready(self, s: Step) -> bool:
        return (s in self.plan.use_out and getattr(s.defn.kernel, "per_replica", None) is None
                and self.loop_ready(s))

    def loop_ready_here(self, s: Step) -> bool:
        return (s in self.plan.use_out and not self.plan.densify.get(s)
                and getattr(s.defn.kernel, "per_replica", None) is None and self.loop_ready(s))

    def statement(self, s: Step, indent: int) -> None:
        chain, pair = self.chains.get(s), self.pairs.get(s)
        if chain is not None and self.chain_step(s, chain, indent):
            return
        loss, fold = self.losses.get(s), self.folds.get(s)
        if loss is not None and self.loss_step(s, loss, indent):
            return
        if fold is not None and self.fold_step(s, fold, indent):
            return
        two = self.twos.get(s)
        if two is not None and self.two_step(s, two, indent):
            return
        if pair is None or not self.pair_step(s, pair, indent):
            super().statement(s, indent)

    def joined_call(self, prefix: str, found: tuple[Any, tuple], arrays: list[str], s: Step,
                    steps: Sequence[Step], indent: int, loops: int | None = None,
                    raises: bool = False) -> None:
        """Emit, at ``s``, the call of the loop that runs ``steps`` as one (``loops`` of their
        loop forms counted, all of them by default), its comment naming every step."""
        note = " | ".join(annotate.op_comment(x.op) for x in steps)
        self.loops += len(steps) if loops is None else loops
        self.loop_call(prefix, found, arrays, s.op, indent,
                       plain=all(a.isidentifier() for a in arrays), note=note, raises=raises)

    def pair_step(self, s: Step, pair: embedding_pairs.Pair, indent: int) -> bool:
        """At the ``gather_grad``, compile the pair's loop and hold its arguments; at the
        ``add``, write its call. False where the backend does not compile it."""
        specs = self.program.specs
        if s is pair.grad:
            ins = [specs[x] for x in (pair.total.ins[0], *s.ins)]
            outs = [specs[s.outs[0]], specs[pair.total.outs[0]]]
            found = self.backend.kernel(gather_grad_add_loop, ins, outs,
                                        {"zero_oor": s.attrs["zero_OOR"]})
            if found is None:
                del self.pairs[pair.grad], self.pairs[pair.total]
                return False
            rows = f"b{self.plan.buffer_of[s.outs[0]]}"
            self.pair_loops[pair] = (*found, [self.arg(s, 0), self.arg(s, 1), rows])
            self.set_name(s.outs[0], rows, indent)
            return True
        fn, extra, (dy, indices, rows) = self.pair_loops.pop(pair)
        out = f"b{self.plan.buffer_of[s.outs[0]]}"
        arrays = [self.arg(s, 0), dy, indices, rows, out]
        # one loop form counted: the gather_grad's (the add has none for two tables)
        self.joined_call("gather_grad_add", (fn, extra), arrays, s, (pair.grad, s), indent,
                         loops=1)
        self.set_name(s.outs[0], out, indent)
        return True

    def loss_step(self, s: Step, pair: softmax_losses.SoftmaxLoss, indent: int) -> bool:
        """At the softmax, compile the pair's loop; at each step, hold the names the loop
        reads and writes; at the last, write its call. False where the backend does not
        compile it."""
        if s is pair.softmax:
            specs = self.program.specs
            found = self.backend.kernel(
                softmax_nll_loop, [specs[x] for x in (s.ins[0], pair.loss.ins[1])],
                [specs[o] for o in pair.results],
                {**s.attrs, **pair.loss.attrs, "rounded": bool(pair.rounds)})
            if found is None:
                for x in pair.steps:
                    del self.losses[x]
                return False
            self.loss_loops[pair] = (*found, [self.arg(s, 0)])
        held = self.loss_loops[pair][2]
        if s is pair.loss:
            held.append(self.arg(s, 1))
        outs = self.loop_outs(s) if s in pair.writers else [
            f"b{self.plan.buffer_of[o]}" for o in s.outs]  # unread
        held.extend(outs if s in pair.writers else ())
        for o, name in zip(s.outs, outs):
            self.set_name(o, name, indent)
        if s is pair.steps[-1]:
            fn, extra, arrays = self.loss_loops.pop(pair)
            self.joined_call("softmax_nll_half" if pair.rounds else "softmax_nll", (fn, extra),
                             arrays, s, pair.steps, indent, raises=True)
        return True

    def fold_step(self, s: Step, fold: scaled_softmax.Fold, indent: int) -> bool:
        """At a fold's first step, compile its loop; at each step, hold the names of the
        inputs it reads; at the last, write its call. False where the backend does not
        compile it."""
        at = fold.steps.index(s)
        if at == 0:
            specs = self.program.specs
            found = self.backend.kernel(
                fold.loop, [specs[fold.steps[k].ins[i]] for k, i in fold.inputs],
                [specs[fold.steps[-1].outs[0]]], fold.attrs)
            if found is None:
                for x in fold.steps:
                    del self.folds[x]
                return False
            self.fold_loops[fold] = (*found, [])
        self.fold_loops[fold][2].extend(self.arg(s, i) for k, i in fold.inputs if k == at)
        if s is not fold.steps[-1]:
            self.set_name(s.outs[0], f"b{self.plan.buffer_of[s.outs[0]]}", indent)  # unread
            return True
        fn, extra, arrays = self.fold_loops.pop(fold)
        arrays = [*arrays, *self.loop_outs(s)]
        self.joined_call(fold.prefix, (fn, extra), arrays, s, fold.steps, indent)
        self.set_name(s.outs[0], arrays[-1], indent)
        return True

    def two_step(self, s: Step, pair: tuple[Step, Step], indent: int) -> bool:
        """At the pair's first step, compile its loop and hold the first's operands and
        results' names; at the second, write its call. False where the backend does not
        compile it."""
        first, second = pair
        if s is first:
            specs = self.program.specs
            found = self.backend.kernel(PAIRS[first.defn.name, second.defn.name],
                                        [specs[x] for x in s.ins],
                                        [specs[o] for o in (*s.outs, *second.outs)],
                                        second.attrs)
            if found is None:
                del self.twos[first], self.twos[second]
                return False
            outs = self.loop_outs(s)
            self.two_loops[second] = (*found, [*(self.arg(s, i) for i in range(len(s.ins))),
                                               *outs])
            for o, name in zip(s.outs, outs):
                self.set_name(o, name, indent)
            return True
        fn, extra, arrays = self.two_loops.pop(second)
        arrays = [*arrays, *self.loop_outs(s)]
        self.joined_call(fn.__name__.removesuffix("32"), (fn, extra), arrays, s, pair, indent)
        self.set_name(s.outs[0], arrays[-1], indent)
        return True

    def chain_step(self, s: Step, chain: adam_chains.Chain, indent: int) -> bool:
        """Hold ``s``'s arguments until the chain's last step, which writes the chain's call;
        False (and the chain's steps run one by one) where the backend does not compile it."""
        if s is chain.held[0]:
            slots = chain.arguments(*(x.ins for x in chain.loops))
            ins = [as_bits(self.program.specs[x]) for x in slots]
            attrs = {**chain.update.attrs, "decay": chain.decay,
                     "half_grad": chain.rounding is not None, "half_term": chain.rounds_term}
            found = self.backend.kernel(adam_step_loop, ins, ins[1:4], attrs)
            if found is None or not all(self.viewable(self.names.get(x, ""))
                                        for x, spec in zip(slots, ins)
                                        if spec.dtype is dtypes.uint16):
                for x in chain.held:
                    del self.chains[x]
                return False
            self.chain_loops[chain] = found
        args = [self.arg(s, i) for i in range(len(s.ins))]
        if s is not chain.update:
            self.held[s] = args
            outs = (self.loop_outs(s) if s in self.plan.use_out
                    else [f"s{o}" for o in s.outs])  # a cast: its name is never read
            for o, name in zip(s.outs, outs):
                self.set_name(o, name, indent)
            return True
        first, second, term = (self.held.pop(x) for x in (chain.first, chain.second,
                                                             chain.term))
        found = self.chain_loops.pop(chain)
        for x in chain.held:
            self.held.pop(x, None)
        outs = [self.names[chain.first.outs[0]], self.names[chain.second.outs[0]],
                *self.loop_outs(s)]
        arrays = [*chain.arguments(first, second, term, args), *outs]
        slots = [*chain.arguments(*(x.ins for x in chain.loops)),
                 *(x.outs[0] for x in (chain.first, chain.second, s))]
        views = [np.uint16 if self.program.specs[x].dtype is dtypes.float16 else None
                 for x in slots]
        if any(views):  # float16 state: views of its bits (checked viewable above)
            arrays = self.bits_views(arrays, views, indent)
        note = " | ".join(annotate.op_comment(x.op) for x in chain.held)
        self.loops += len(chain.held)
        self.loop_call("adam_step", found, arrays, s.op, indent, note=note)
        self.set_name(s.outs[0], outs[2], indent)
        return True
