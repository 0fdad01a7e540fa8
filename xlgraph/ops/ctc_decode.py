"""Connectionist temporal classification decoding: ``ctc_beam_search_decoder`` (prefix beam
search, as PopART's ``CtcBeamSearchDecoder`` and popnn's ``ctc_infer``).

Each beam is a label prefix (a decoded sequence, repeats merged and blanks dropped) with two
log-probabilities: of the alignments so far ending in a blank, and ending in its last label.
At each step every beam stays (a blank, or its last label repeated) or grows by one label
(after a blank, the same label again starts a new one); candidates reaching the same prefix
add up, and the ``beam_width`` most probable survive. With a beam wide enough to keep every
prefix, a path's probability is exactly the sum over all its alignments.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from xlgraph import dtypes
from xlgraph.cost import traffic
from xlgraph.errors import DTypeError, ShapeError
from xlgraph.op import OpDef, Sample, apply, register
from xlgraph.ops.indexing import check_int_indices
from xlgraph.tensor import Tensor, TensorSpec

__all__ = ["ctc_beam_search_decoder"]


def _infer(probs: TensorSpec, lengths: TensorSpec, blank: int, beam_width: int,
           top_paths: int) -> tuple[TensorSpec, TensorSpec, TensorSpec]:
    if not probs.dtype.is_floating_point:
        raise DTypeError(f"log_probs must be floating point, got {probs}")
    check_int_indices(lengths, "lengths")
    if len(probs.shape) != 3 or lengths.shape != (probs.shape[1],):
        raise ShapeError(f"ctc_beam_search_decoder needs log_probs (T, B, C) and lengths (B,); "
                         f"got {probs}, {lengths}")
    steps, batch, classes = probs.shape
    if not 0 <= blank < classes:
        raise ShapeError(f"blank must be a class in [0, {classes}), got {blank}")
    if beam_width < 1 or not 1 <= top_paths <= beam_width:
        raise ShapeError(f"need beam_width >= 1 and 1 <= top_paths <= beam_width, got "
                         f"beam_width={beam_width}, top_paths={top_paths}")
    return (TensorSpec((batch, top_paths), probs.dtype),
            TensorSpec((batch, top_paths), dtypes.int32),
            TensorSpec((batch, top_paths, steps), dtypes.int32))


def _logadd(a: np.ndarray | float, b: np.ndarray | float) -> Any:
    return np.logaddexp(a, b)


def _best(scores: np.ndarray, width: int) -> np.ndarray:
    """Indices of the ``width`` highest ``scores``, highest first (ties: lower index)."""
    if len(scores) > width:
        part = np.argpartition(-scores, width - 1)[:width]
        cut = scores[part].min()  # all of a tie at the cut compete by index
        part = np.flatnonzero(scores >= cut)
    else:
        part = np.arange(len(scores))
    return part[np.lexsort((part, -scores[part]))][:width]


def _search(lp: np.ndarray, blank: int, width: int) -> list[tuple[float, tuple[int, ...]]]:
    """The beams after the steps of ``lp`` (T, C), most probable first: ``(log p, prefix)``."""
    prefixes: list[tuple[int, ...]] = [()]
    ends_blank, ends_label = np.zeros(1), np.full(1, -np.inf)
    classes = lp.shape[1]
    labels = np.array([c for c in range(classes) if c != blank], np.int64)
    for step in lp:
        total = _logadd(ends_blank, ends_label)
        last = np.array([p[-1] if p else -1 for p in prefixes])
        # stay: a blank after anything, or the last label repeated without a blank between
        stay_blank = total + step[blank]
        stay_label = np.where(last >= 0, ends_label + step[np.maximum(last, 0)], -np.inf)
        # grow by label c: after a blank only when c repeats the last label
        grow = np.where(labels[None, :] == last[:, None], ends_blank[:, None],
                        total[:, None]) + step[labels][None, :]
        index = {p: i for i, p in enumerate(prefixes)}
        for j, p in enumerate(prefixes):  # a grown beam that is already a beam joins it
            parent = index.get(p[:-1]) if p else None
            if parent is not None:
                k = int(np.searchsorted(labels, p[-1]))
                stay_label[j] = _logadd(stay_label[j], grow[parent, k])
                grow[parent, k] = -np.inf
        new_blank = np.concatenate([stay_blank, np.full(grow.size, -np.inf)])
        new_label = np.concatenate([stay_label, grow.ravel()])
        keep = _best(_logadd(new_blank, new_label), width)
        beams, grown = len(prefixes), len(labels)
        # a grown candidate merged above (or impossible) is no beam
        keep = keep[np.isfinite(new_label[keep]) | (keep < beams)]
        prefixes = [prefixes[i] if i < beams else
                    prefixes[(i - beams) // grown] + (int(labels[(i - beams) % grown]),)
                    for i in keep]
        ends_blank, ends_label = new_blank[keep], new_label[keep]
    scores = _logadd(ends_blank, ends_label)
    order = np.argsort(-scores, kind="stable")
    return [(float(scores[i]), prefixes[i]) for i in order]


def _decode(probs: np.ndarray, lengths: np.ndarray, blank: int, beam_width: int,
            top_paths: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps, batch, _ = probs.shape
    if np.any(lengths < 0) or np.any(lengths > steps):
        raise ValueError(f"ctc_beam_search_decoder: lengths must be in [0, {steps}] (the "
                         f"time steps of log_probs), got {lengths.tolist()}")
    path_probs = np.full((batch, top_paths), -np.inf)
    path_lengths = np.zeros((batch, top_paths), np.int32)
    paths = np.zeros((batch, top_paths, steps), np.int32)
    for b in range(batch):
        found = _search(probs[: int(lengths[b]), b].astype(np.float64), blank, beam_width)
        for k, (score, prefix) in enumerate(found[:top_paths]):
            path_probs[b, k], path_lengths[b, k] = score, len(prefix)
            paths[b, k, : len(prefix)] = prefix
    return path_probs.astype(probs.dtype), path_lengths, paths


def _decode_ref(probs: np.ndarray, lengths: np.ndarray, blank: int, beam_width: int,
                top_paths: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every alignment enumerated and summed per decoded sequence (tiny sizes, and a beam
    wide enough to keep every prefix); ties ordered by the sequence."""
    steps, batch, classes = probs.shape
    path_probs = np.full((batch, top_paths), -np.inf)
    path_lengths = np.zeros((batch, top_paths), np.int32)
    paths = np.zeros((batch, top_paths, steps), np.int32)
    for b in range(batch):
        lp = probs[: int(lengths[b]), b].astype(np.float64)
        totals: dict[tuple[int, ...], float] = {}
        for path in itertools.product(range(classes), repeat=len(lp)):
            merged = [k for i, k in enumerate(path) if i == 0 or k != path[i - 1]]
            label = tuple(k for k in merged if k != blank)
            score = sum(lp[t, k] for t, k in enumerate(path))
            totals[label] = np.logaddexp(totals.get(label, -np.inf), score)
        best = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:top_paths]
        for k, (label, score) in enumerate(best):
            path_probs[b, k], path_lengths[b, k] = score, len(label)
            paths[b, k, : len(label)] = label
    return path_probs.astype(probs.dtype), path_lengths, paths


def _samples(rng: np.random.Generator) -> list[Sample]:
    logits = rng.normal(size=(4, 2, 3)) * 2.0
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    lengths = np.array([4, 3], np.int32)
    return [Sample((lp, lengths), {"blank": 0, "beam_width": 40, "top_paths": 3}),
            Sample((lp, lengths), {"blank": 2, "beam_width": 40, "top_paths": 2})]


def _cost(ins: list[TensorSpec], outs: list[TensorSpec], *, beam_width: int,
          **_: Any) -> Any:
    steps, batch, classes = ins[0].shape
    return traffic(ins, outs, 4.0 * steps * batch * beam_width * classes)


_DECODE = OpDef("ctc_beam_search_decoder", _infer, _decode, samples=_samples, ref=_decode_ref,
                cost=_cost)


@register(_DECODE)
def ctc_beam_search_decoder(log_probs: Tensor, lengths: Tensor, blank: int = 0,
                            beam_width: int = 100, top_paths: int = 1,
                            ) -> tuple[Tensor, Tensor, Tensor]:
    """The ``top_paths`` most probable label sequences of each batch item, by prefix beam search.

    Args:
        log_probs: (T, B, C) log-probabilities (used as given, not normalised).
        lengths: (B,) int time steps used per item (at most T).
        blank: the blank class.
        beam_width: prefixes kept after each step.
        top_paths: sequences returned per item (at most ``beam_width``).

    Returns:
        ``(path_probs, path_lengths, paths)``: (B, top_paths) log-probabilities (the sum over
        the sequence's alignments the search kept), most probable first; (B, top_paths) int32
        lengths; (B, top_paths, T) int32 labels, 0 past each length. A path the search did not
        reach (fewer sequences than ``top_paths``) has log-probability ``-inf`` and length 0.
        Inference only: no gradient.
    """
    attrs = {"blank": int(blank), "beam_width": int(beam_width), "top_paths": int(top_paths)}
    path_probs, path_lengths, paths = apply(_DECODE, [log_probs, lengths], attrs)
    return path_probs, path_lengths, paths
