"""Loop forms of the log-softmax and negative log-likelihood ops (PopTorch's classification
losses: ``log_softmax`` then ``nll_loss(log_prob=True)``, and their gradients).

Rows run along the last axis. As in ``xlgraph.ops.loops``: ``exp``/``log`` come from the
compiler's math library and sums accumulate left to right (numpy sums pairwise), so the results
agree with the numpy kernels to the backend's tolerance, not bit for bit. The losses check the
labels as the numpy kernel does and raise its ``IndexError`` (in its words) for one that is out
of range; ``xlgraph.ops.loops.RAISING`` lists them.
"""

from __future__ import annotations

import numpy as np


def log_softmax_rows(x, out):  # noqa: ANN001, ANN201 - numba infers the types
    """``(x - max) - log(sum(exp(x - max)))`` per row."""
    n = x.shape[-1]
    xs, outs = x.reshape(-1), out.reshape(-1)
    for base in range(0, xs.size, n):
        top = xs[base]
        for j in range(base + 1, base + n):
            top = max(top, xs[j])
        total = np.exp(xs[base] - top)
        for j in range(base + 1, base + n):
            total += np.exp(xs[j] - top)
        lse = np.log(total)
        for j in range(base, base + n):
            outs[j] = (xs[j] - top) - lse


def log_softmax_grad_rows(dy, y, out):  # noqa: ANN001, ANN201
    """``dy - exp(y) * sum(dy)`` per row."""
    n = y.shape[-1]
    dys, ys, outs = dy.reshape(-1), y.reshape(-1), out.reshape(-1)
    for base in range(0, ys.size, n):
        total = dys[base]
        for j in range(base + 1, base + n):
            total += dys[j]
        for j in range(base, base + n):
            outs[j] = dys[j] - np.exp(ys[j]) * total


def nll_loss_rows(probs, labels, out, one, ignore, has_ignore, mean, log_prob):  # noqa: ANN001, ANN201
    """``nll_loss`` summed (``mean``: divided by the counted labels) into the 0-d ``out``;
    ``probs`` are log-probabilities if ``log_prob``. Labels equal to ``ignore`` (if
    ``has_ignore``) do not count."""
    classes = probs.shape[-1]
    ps, labs = probs.reshape(-1), labels.reshape(-1)
    total = one - one
    count = one - one
    for r in range(labs.size):
        label = labs[r]
        if has_ignore and label == ignore:
            continue
        if not 0 <= label < classes:  # the numpy kernel's error, in its words
            raise IndexError("label " + str(label) + " is out of range for " + str(classes)
                             + " classes (labels must be in [0, " + str(classes)
                             + ") or equal ignore_index="
                             + (str(ignore) if has_ignore else "None") + ")")
        p = ps[r * classes + label]
        total += -p if log_prob else -np.log(p)
        count += one
    if mean:
        total = total / max(count, one)
    out.reshape(1)[0] = total


def nll_loss_grad_rows(dy, probs, labels, out, one, ignore, has_ignore, mean, log_prob):  # noqa: ANN001, ANN201
    """The gradient of ``nll_loss_rows`` for the loss gradient ``dy`` (0-d): ``-scale`` (or
    ``-scale / p``) at each counted label, zero elsewhere."""
    classes = probs.shape[-1]
    ps, labs, outs = probs.reshape(-1), labels.reshape(-1), out.reshape(-1)
    count = one - one
    for r in range(labs.size):
        label = labs[r]
        if has_ignore and label == ignore:
            continue
        if not 0 <= label < classes:  # as in nll_loss_rows
            raise IndexError("label " + str(label) + " is out of range for " + str(classes)
                             + " classes (labels must be in [0, " + str(classes)
                             + ") or equal ignore_index="
                             + (str(ignore) if has_ignore else "None") + ")")
        count += one
    scale = dy.reshape(1)[0]
    if mean:
        scale = scale / max(count, one)
    for i in range(outs.size):
        outs[i] = one - one
    for r in range(labs.size):
        label = labs[r]
        if has_ignore and label == ignore:
            continue
        k = r * classes + label
        outs[k] = -scale if log_prob else -scale / ps[k]
