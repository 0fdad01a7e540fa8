"""Sliding-window geometry shared by convolution and pooling.

Spatial attributes follow ONNX/PopXL: ``pads`` is ``(begin_0, ..., begin_n, end_0, ..., end_n)``,
windows have ``kernel`` taps spaced by ``dilation`` and move by ``stride``. Kernels loop over the
few kernel *taps* (each step a strided slice over every pixel at once), never over pixels.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from xlgraph.errors import ShapeError, XlgraphError, user_source_line
from xlgraph.tensor import Tensor

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

PAD_TYPES = ("not_set", "same_upper", "same_lower", "valid")

Ints = tuple[int, ...]

CHUNK_BYTES = 1 << 19  # per batch chunk: it and BLAS's own blocks fit a core's L2 cache


def spatial(value: Any, n: int, name: str, fill: int) -> Ints:
    """``value`` as ``n`` ints. None, an int, or an all-``fill`` default of another length
    (PopXL's 2-D defaults used with 1-D or 3-D data) broadcast to ``n`` values."""
    if value is None:
        return (fill,) * n
    if isinstance(value, int | np.integer):
        return (int(value),) * n
    values = tuple(int(v) for v in value)
    if len(values) == n:
        return values
    if values and all(v == fill for v in values):
        return (fill,) * n
    raise ShapeError(f"{name} needs {n} values here, got {tuple(value)}")


def resolve_pads(in_sp: Ints, kernel: Ints, stride: Ints, dilation: Ints, padding: Any,
                 pad_type: str) -> Ints:
    """Explicit ``begins + ends`` padding for ``pad_type`` ('not_set' uses ``padding``)."""
    n = len(in_sp)
    if pad_type not in PAD_TYPES:
        raise ValueError(f"pad type must be one of {PAD_TYPES}, got {pad_type!r}")
    if pad_type == "valid":
        return (0,) * (2 * n)
    if pad_type == "not_set":
        pads = spatial(padding, 2 * n, "padding", 0)
        if min(pads) < 0:
            raise ShapeError(f"padding must be non-negative, got {pads}")
        return pads
    begins, ends = [], []
    for size, k, s, d in zip(in_sp, kernel, stride, dilation):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if pad_type == "same_upper" else big)
        ends.append(big if pad_type == "same_upper" else small)
    return tuple(begins + ends)


def check_positive(**attrs: Ints) -> None:
    """ShapeError unless every value of every named attribute is >= 1."""
    for name, values in attrs.items():
        if min(values, default=1) < 1:
            raise ShapeError(f"{name} must be >= 1, got {values}")


def out_shape(in_sp: Ints, kernel: Ints, stride: Ints, pads: Ints, dilation: Ints,
              ceil_mode: bool = False) -> Ints:
    """Number of window positions per spatial dim (torch's rule for ``ceil_mode``: a window
    may not start inside the end padding)."""
    n = len(in_sp)
    out = []
    for i, (size, k, s, d) in enumerate(zip(in_sp, kernel, stride, dilation)):
        span = size + pads[i] + pads[n + i] - (k - 1) * d - 1
        if span < 0:
            raise ShapeError(
                f"window of {k} taps with dilation {d} does not fit spatial dim {i} of size "
                f"{size} padded by ({pads[i]}, {pads[n + i]})"
            )
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= size + pads[i]:
            o -= 1
        out.append(o)
    return tuple(out)


def extents(out: Ints, kernel: Ints, stride: Ints, dilation: Ints) -> Ints:
    """Padded length each spatial dim needs so that every window fits."""
    return tuple((o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(out, kernel, stride, dilation))


def pad_to(x: np.ndarray, begins: Ints, sizes: Ints, fill: float) -> np.ndarray:
    """``x`` placed at ``begins`` in a ``fill``-ed buffer whose last dims have ``sizes``
    (trailing input no window reaches is dropped). Returns ``x`` itself when nothing changes."""
    n = len(sizes)
    if not any(begins) and x.shape[-n:] == tuple(sizes):
        return x
    buf = np.full(x.shape[:-n] + tuple(sizes), fill, x.dtype)
    keep = [min(size, total - b) for size, b, total in zip(x.shape[-n:], begins, sizes)]
    dst = tuple(slice(b, b + k) for b, k in zip(begins, keep))
    buf[(..., *dst)] = x[(..., *(slice(0, k) for k in keep))]
    return buf


def batch_chunks(n: int, item_bytes: int) -> list[slice]:
    """Slices of a leading (batch) axis of length ``n``, each covering about ``CHUNK_BYTES``
    of a kernel's per-item working set of ``item_bytes``. Kernels make several passes over
    their temporaries; a chunk at a time they stay in the CPU cache instead of main memory."""
    step = max(1, CHUNK_BYTES // max(1, item_bytes))
    return [slice(i, min(n, i + step)) for i in range(0, n, step)]


# The thread pool of the Session whose run is executing in this context (``chunks_on``): the
# Session owns and closes the pool; this only routes kernels to it and holds nothing after a run.
_POOL: ContextVar[ThreadPoolExecutor | None] = ContextVar("xlgraph_chunk_pool", default=None)


@contextlib.contextmanager
def chunks_on(pool: ThreadPoolExecutor | None) -> Iterator[None]:
    """Run the batch chunks of the kernels called inside on ``pool`` (None: in turn)."""
    token = _POOL.set(pool)
    try:
        yield
    finally:
        _POOL.reset(token)


# Fewer chunks than this run in turn: handing two or three small chunks to threads cost more than
# it saved (the MNIST CNN at batch 8: 2-3 chunks per kernel, median 6.9-7.3 ms per step with two
# threads against 5.2-6.7 ms with one, interleaved, load about 3).
MIN_THREADED_CHUNKS = 4


def chunk_threads() -> int:
    """Threads of the chunk pool of the Session whose run is executing here (1 outside one)."""
    pool = _POOL.get()
    return 1 if pool is None else pool._max_workers


def map_chunks(fn: Callable[[slice], Any], n: int, item_bytes: int) -> list[Any]:
    """``fn(chunk)`` for every ``batch_chunks(n, item_bytes)``, results in chunk order. Inside
    ``chunks_on(pool)`` with at least ``MIN_THREADED_CHUNKS`` chunks, they run on the pool's
    threads at once (numpy releases the GIL inside its kernels, so they use several cores); ``fn``
    must then write only its own chunk. The results are the same bits either way."""
    chunks = batch_chunks(n, item_bytes)
    pool = _POOL.get()
    if pool is None or len(chunks) < MIN_THREADED_CHUNKS:
        return [fn(sl) for sl in chunks]
    return [f.result() for f in [pool.submit(fn, sl) for sl in chunks]]


def channels_last(channels: int, groups: int, out: Ints, kernel: Ints, stride: Ints,
                  dilation: Ints) -> bool:
    """Whether im2col goes through channels-last data: with one group, when its copy runs over
    at least twice as many contiguous elements as the channels-first copy (a window row's
    taps x channels, against a row of output positions). CPU time of the copy and the matmul,
    float32, channels-last against channels-first, us, as (batch, C, size, kernel): conv
    (8, 4, 13, 3) 79 / 58, (8, 16, 28, 3) 844 / 638, (8, 1, 28, 3) 321 / 67; (8, 16, 13, 3)
    149 / 163, the MNIST CNN's second conv (8, 32, 13, 3) 411 / 461 and its weight gradient
    417 / 525, the Fashion-MNIST model's second conv (16, 5, 13, 5) 139 / 165 and its weight
    gradient 135 / 197."""
    run_last = channels * (kernel[-1] if dilation[-1] == 1 else 1)
    run_first = out[-1] if stride[-1] == 1 else 1
    return groups == 1 and run_last >= 2 * run_first


def crop(buf: np.ndarray, begins: Ints, sizes: Ints) -> np.ndarray:
    """The ``sizes`` region of ``buf``'s last dims starting at ``begins`` (a view)."""
    return buf[(..., *(slice(b, b + s) for b, s in zip(begins, sizes)))]


def windows(xp: np.ndarray, kernel: Ints, stride: Ints, dilation: Ints, out: Ints) -> np.ndarray:
    """Read-only view ``(*lead, *out, *kernel)`` of every window of the padded ``xp``."""
    n = len(kernel)
    lead, st = xp.shape[:-n], xp.strides
    strides = st[:-n] + tuple(a * s for a, s in zip(st[-n:], stride))
    strides += tuple(a * d for a, d in zip(st[-n:], dilation))
    return as_strided(xp, lead + tuple(out) + tuple(kernel), strides, writeable=False)


@functools.lru_cache(maxsize=512)
def taps(kernel: Ints, stride: Ints, dilation: Ints, out: Ints) -> tuple[tuple, ...]:
    """For each kernel tap in row-major order, the index of the padded input it reads
    (cached: kernels call this every step with the same geometry)."""
    return tuple((Ellipsis, *(slice(t * d, t * d + (o - 1) * s + 1, s)
                              for t, d, o, s in zip(tap, dilation, out, stride)))
                 for tap in itertools.product(*(range(k) for k in kernel)))


def valid_counts(in_sp: Ints, kernel: Ints, stride: Ints, begins: Ints, dilation: Ints,
                 out: Ints) -> np.ndarray:
    """How many taps of each window fall inside the unpadded input, shape ``out``."""
    count = np.ones((), np.int64)
    for size, k, s, b, d, o in zip(in_sp, kernel, stride, begins, dilation, out):
        pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d
        per_dim = ((pos >= b) & (pos < b + size)).sum(axis=1)
        count = np.multiply.outer(count, per_dim)
    return count


def checked(name: str, inputs: Sequence[Tensor], fn: Callable[[], Any]) -> Any:
    """Run a builder's attribute normalisation; errors name the op, inputs and source line."""
    try:
        return fn()
    except XlgraphError as exc:
        specs = ", ".join(f"{t.id} {t.spec}" for t in inputs)
        raise type(exc)(f"{name}: {exc} (inputs: {specs}) [created at {user_source_line()}]") \
            from None
