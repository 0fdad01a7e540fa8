"""Loop forms of pooling kernels and of the adds of ``conv_transpose`` (col2im), for the
compiled backend (see ``xlgraph.ops.loops``).

numpy pools a window tap at a time over whole arrays (four passes over the data for a 2x2
window, and for the gradient a mask per tap); these loops visit each window once. Same
arguments as ``loops``: ``fn(*inputs, *outputs, *extra)`` over C-contiguous arrays, no
allocation. The loops cover the common geometry, 2x2 windows moving by 2 without padding or
dilation, with the window and the stride fixed in the code: passed as arguments, they cost the
compiled loop 3 to 20 times its speed (an (8, 32, 26, 26) max pool gradient, interleaved, load
about 8: 973 us with all four as arguments, 173 us with the stride only, 51 us with none).
Max is exact, so the results are numpy's bits.
"""

from __future__ import annotations

from xlgraph.tensor import TensorSpec


def max_pool_2x2(x, y):  # noqa: ANN001, ANN201 - numba infers the types
    """``y`` = the maximum of each 2x2 window of ``x`` at stride 2 (NaN wins, as in
    ``np.maximum``; inputs past the last whole window are not read)."""
    n, c = x.shape[0], x.shape[1]
    oh, ow = y.shape[2], y.shape[3]
    for p in range(n):
        for k in range(c):
            for i in range(oh):
                for j in range(ow):
                    m = x[p, k, 2 * i, 2 * j]
                    for a in range(2):
                        for b in range(2):
                            v = x[p, k, 2 * i + a, 2 * j + b]
                            m = v if (v > m or v != v) else m
                    y[p, k, i, j] = m


def max_pool_2x2_grad(dy, x, y, dx):  # noqa: ANN001, ANN201
    """``dx``: each element of ``dy`` at the first element (row-major) of its 2x2 window that
    equals the window's maximum ``y``, ``dy`` times zero elsewhere (windows do not overlap), as
    the numpy kernel multiplies: a NaN ``dy`` stays NaN and a negative one gives -0."""
    n, c, h, w = x.shape
    oh, ow = y.shape[2], y.shape[3]
    for p in range(n):
        for k in range(c):
            for i in range(oh):
                for j in range(ow):
                    t, g, free = y[p, k, i, j], dy[p, k, i, j], True
                    for a in range(2):
                        for b in range(2):
                            hit = free & (x[p, k, 2 * i + a, 2 * j + b] == t)
                            dx[p, k, 2 * i + a, 2 * j + b] = g * hit
                            free ^= hit  # (bit operations: branches would cost 10x)
                for j in range(2 * ow, w):  # columns no window reaches
                    dx[p, k, 2 * i, j] = 0
                    dx[p, k, 2 * i + 1, j] = 0
            for r in range(2 * oh, h):  # rows no window reaches
                for j in range(w):
                    dx[p, k, r, j] = 0


def col2im_2d(cols, buf, oh, ow, kh, kw, sh, sw, dh, dw):  # noqa: ANN001, ANN201
    """Zero ``buf`` (B, groups, H, W, C), then add each tap's contribution ``cols[:, t]``
    (B, taps, groups, oh x ow positions, C) at the tap's windows: for every element, the
    additions of ``conv._col2im`` in its order (tap by tap), so the same bits. With few
    channels and unit column stride, each output row's contribution is one run of ``ow x C``
    elements (Fashion-MNIST's 5-channel conv: 68 against 108 us); with many, the loop over
    channels is the faster inner loop (MNIST's 32 channels: 38 against 117 us)."""
    flat = buf.reshape(-1)
    for k in range(flat.size):
        flat[k] = 0
    nb, groups, h, w, c = buf.shape
    taps = cols.shape[1]
    if sw == 1 and c < 16:
        rows = buf.reshape(nb, groups, h, w * c)
        src = cols.reshape(nb, taps, groups, oh, ow * c)
        for n in range(nb):
            for g in range(groups):
                for a in range(kh):
                    for b in range(kw):
                        t, off = a * kw + b, b * dw * c
                        for i in range(oh):
                            r = i * sh + a * dh
                            for e in range(ow * c):
                                rows[n, g, r, off + e] += src[n, t, g, i, e]
        return
    for n in range(nb):
        for g in range(groups):
            for a in range(kh):
                for b in range(kw):
                    t = a * kw + b
                    for i in range(oh):
                        r = i * sh + a * dh
                        for j in range(ow):
                            q = j * sw + b * dw
                            for k in range(c):
                                buf[n, g, r, q, k] += cols[n, t, g, i * ow + j, k]


def is_2x2(x: TensorSpec, kernel: tuple[int, ...], stride: tuple[int, ...],
           pads: tuple[int, ...], dilation: tuple[int, ...], ceil_mode: bool) -> bool:
    """2x2 windows at stride 2 inside the data: no padding or dilation, and with
    ``ceil_mode`` even sizes (an odd one gets a last window that sticks out)."""
    return (kernel == (2, 2) and stride == (2, 2) and not any(pads) and dilation == (1, 1)
            and len(x.shape) == 4 and not (ceil_mode and (x.shape[2] % 2 or x.shape[3] % 2)))
