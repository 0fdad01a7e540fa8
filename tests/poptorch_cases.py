"""Samples for the op sweep: for each PopTorch operation name, torch functions and inputs.

Each case is ``(fn, inputs)``: ``fn`` takes tensors, ``inputs(dtype)`` makes them (floating ones
in ``dtype``, integer and bool ones as they are). Modules are called through
``torch.func.functional_call`` so their parameters are inputs too, and get gradient checks.
Where torch ships OpInfo samples for an op, ``opinfo_cases`` adds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

Case = tuple[Callable[..., Any], Callable[[torch.dtype], list[torch.Tensor]]]
_GEN = torch.Generator().manual_seed(0)


def R(*shape: int, lo: float = -2.0, hi: float = 2.0) -> Callable[[torch.dtype], torch.Tensor]:  # noqa: N802
    return lambda dtype: (torch.rand(shape, generator=_GEN) * (hi - lo) + lo).to(dtype)


def P(*shape: int) -> Callable[[torch.dtype], torch.Tensor]:  # noqa: N802
    return R(*shape, lo=0.3, hi=2.0)


def I(*shape: int, hi: int = 4) -> Callable[[torch.dtype], torch.Tensor]:  # noqa: N802, E743
    return lambda dtype: torch.randint(0, hi, shape, generator=_GEN)


def B(*shape: int) -> Callable[[torch.dtype], torch.Tensor]:  # noqa: N802
    return lambda dtype: torch.rand(shape, generator=_GEN) > 0.5


def inputs(*makers: Callable[[torch.dtype], torch.Tensor]) -> Callable[[torch.dtype], list]:
    return lambda dtype: [m(dtype) for m in makers]


def unary(fn: Callable[..., Any], maker: Any = None) -> list[Case]:
    return [(fn, inputs(maker or R(3, 4))), (fn, inputs(maker or R(2, 1, 5)))]


def binary(fn: Callable[..., Any], a: Any = None, b: Any = None) -> list[Case]:
    return [(fn, inputs(a or R(3, 4), b or R(3, 4))), (fn, inputs(a or R(2, 3, 4), b or R(4))),
            (lambda x: fn(x, 0.75), inputs(a or R(3, 4)))]


def _bags(mode: str, padding_idx: int | None, last: bool) -> Callable[..., torch.Tensor]:
    """``F.embedding_bag`` of (indices, offsets, weight) with these settings."""
    def bags(i: torch.Tensor, o: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx,
                               include_last_offset=last)
    return bags


def module(make: Callable[[], nn.Module], *makers: Any, data_grad: int | None = None
           ) -> list[Case]:
    """``make()`` called with its parameters and buffers as inputs (after the data); buffers,
    and the data inputs after the first ``data_grad`` (loss targets), get no gradient."""
    torch.manual_seed(0)
    m = make()
    names = [k for k, _ in m.named_parameters()] + [k for k, _ in m.named_buffers()]
    values = [t for _, t in m.named_parameters()] + [t for _, t in m.named_buffers()]
    n = len(makers)

    def fn(*args: torch.Tensor) -> Any:
        return torch.func.functional_call(m, dict(zip(names, args[n:])), args[:n])

    buffers = range(n + len(list(m.parameters())), n + len(values))
    fn.no_grad = set(buffers) | set(range(n if data_grad is None else data_grad, n))

    def make_inputs(dtype: torch.dtype) -> list[torch.Tensor]:
        params = [v.detach().clone().to(dtype) if v.is_floating_point() else v.clone()
                  for v in values]
        return [mk(dtype) for mk in makers] + params

    return [(fn, make_inputs)]


def loss(make: Callable[[], nn.Module], *makers: Any) -> list[Case]:
    return module(make, *makers, data_grad=1)


def _scatter_reduce(reduce: str) -> Callable[..., Any]:
    return lambda x, i, s: torch.scatter_reduce(x, 1, i, s, reduce, include_self=reduce != "sum")


IMG1, IMG2, IMG3 = R(2, 3, 8), R(2, 3, 6, 6), R(1, 2, 4, 4, 4)

CASES: dict[str, list[Case]] = {
    # -- creation ---------------------------------------------------------------------------
    "torch.arange": [(lambda x: x + torch.arange(4), inputs(R(3, 4))),
                     (lambda x: x * torch.arange(1, 7, 2), inputs(R(3)))],
    "tensor.fill": [(lambda x: x * 2 + torch.empty(3, 4).fill_(1.5), inputs(R(3, 4)))],
    "torch.full": [(lambda x: x + torch.full((3, 4), 2.5), inputs(R(3, 4)))],
    "torch.full_like": [(lambda x: x * torch.full_like(x, 3.0), inputs(R(3, 4)))],
    "torch.Tensor.new_ones": [(lambda x: x + x.new_ones(4), inputs(R(3, 4)))],
    "torch.Tensor.new_zeros": [(lambda x: x + x.new_zeros((3, 4)), inputs(R(3, 4)))],
    "torch.ones": [(lambda x: x + torch.ones(4), inputs(R(3, 4)))],
    "torch.ones_like": [(lambda x: x - torch.ones_like(x), inputs(R(3, 4)))],
    "torch.zeros": [(lambda x: x + torch.zeros(3, 4), inputs(R(3, 4)))],
    "torch.zeros_like": [(lambda x: x * 2 + torch.zeros_like(x), inputs(R(3, 4)))],
    # -- indexing, slicing, joining, mutating -----------------------------------------------
    "torch.bincount": [(lambda i: torch.bincount(i, minlength=5), inputs(I(7, hi=5))),
                       (lambda i, w: i.bincount(w, minlength=6), inputs(I(7, hi=5), R(7)))],
    "torch.bucketize": [(lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5])),
                         inputs(R(3, 4))),
                        (lambda x, b: torch.bucketize(x, b, right=True), inputs(R(3, 4), R(6))),
                        (lambda x, b: torch.bucketize(x, b, out_int32=True),
                         inputs(R(2, 5), R(7)))],
    "torch.cat": [(lambda a, b: torch.cat([a, b], 1), inputs(R(3, 4), R(3, 2))),
                  (lambda a, b: torch.cat([a, b]), inputs(R(3, 4), R(1, 4)))],
    "torch.chunk": [(lambda x: torch.chunk(x, 2, 1), inputs(R(3, 4)))],
    "torch.gather": [(lambda x, i: torch.gather(x, 1, i), inputs(R(3, 4), I(3, 2))),
                     (lambda x, i: torch.gather(x, 0, i), inputs(R(3, 4), I(2, 4, hi=3)))],
    "torch.index_select": [(lambda x, i: torch.index_select(x, 1, i), inputs(R(3, 4), I(5)))],
    "torch.index_reduce": [(lambda x, i, s: x.index_reduce(0, i, s, "amax"),
                            inputs(R(4, 3), I(5), R(5, 3)))],
    "torch.reshape": [(lambda x: torch.reshape(x, (2, -1)), inputs(R(3, 4)))],
    "torch.roll": [(lambda x: torch.roll(x, 1, 1), inputs(R(3, 4))),
                   (lambda x: torch.roll(x, (2, -1), (0, 1)), inputs(R(3, 4)))],
    "torch.scatter": [(lambda x, s: torch.scatter(x, 1, torch.tensor([[0, 2], [1, 3], [3, 0]]),
                                                  s), inputs(R(3, 4), R(3, 2))),
                      (lambda x: torch.scatter(x, 0, torch.tensor([[2, 0, 1, 2]]), 5.0),
                       inputs(R(3, 4)))],
    "torch.scatter_add": [(lambda x, i, s: torch.scatter_add(x, 1, i, s),
                           inputs(R(3, 4), I(3, 5), R(3, 5)))],
    "torch.scatter_reduce": [(_scatter_reduce(r), inputs(R(3, 4), I(3, 5), R(3, 5)))
                             for r in ("sum", "amax", "amin", "mean", "prod")],
    "torch.stack": [(lambda a, b: torch.stack([a, b], 1), inputs(R(3, 4), R(3, 4)))],
    "torch.split": [(lambda x: torch.split(x, [1, 3], 1), inputs(R(3, 4))),
                    (lambda x: torch.split(x, 2), inputs(R(5, 2)))],
    "torch.squeeze": [(lambda x: torch.squeeze(x), inputs(R(3, 1, 4))),
                      (lambda x: torch.squeeze(x, 1), inputs(R(3, 1, 4)))],
    "torch.t": [(torch.t, inputs(R(3, 4)))],
    "torch.take_along_dim": [(lambda x, i: torch.take_along_dim(x, i, 1),
                              inputs(R(3, 4), I(3, 2)))],
    "torch.transpose": [(lambda x: torch.transpose(x, 0, 2), inputs(R(2, 3, 4)))],
    "torch.unbind": [(lambda x: torch.unbind(x, 1), inputs(R(3, 4)))],
    "torch.unsqueeze": [(lambda x: torch.unsqueeze(x, -1), inputs(R(3, 4)))],
    "torch.where": [(torch.where, inputs(B(3, 4), R(3, 4), R(4))),
                    (lambda c, x: torch.where(c, x, 0.5), inputs(B(3, 4), R(3, 4)))],
    "tensor.expand": [(lambda x: x.expand(2, 3, 4), inputs(R(3, 1)))],
    "tensor.expand_as": [(lambda x, y: x.expand_as(y), inputs(R(1, 4), R(3, 4)))],
    "tensor.masked_fill": [(lambda x, m: x.masked_fill(m, -1.0), inputs(R(3, 4), B(3, 4)))],
    "tensor.index_fill_": [(lambda x: x.clone().index_fill_(1, torch.tensor([0, 2]), -1.0),
                            inputs(R(3, 4)))],
    # -- pointwise ---------------------------------------------------------------------------
    "torch.abs": unary(torch.abs),
    "torch.acos": unary(torch.acos, R(3, 4, lo=-0.9, hi=0.9)),
    "torch.acosh": unary(torch.acosh, R(3, 4, lo=1.2, hi=3.0)),
    "torch.add": binary(torch.add) + [(lambda a, b: torch.add(a, b, alpha=0.5),
                                       inputs(R(3, 4), R(3, 4))),
                                      (lambda a, i: a + i, inputs(R(3, 4), I(3, 4)))],
    "torch.addcdiv": [(lambda a, b, c: torch.addcdiv(a, b, c, value=0.5),
                       inputs(R(3, 4), R(3, 4), P(3, 4)))],
    "torch.amax": [(lambda x: torch.amax(x, 1), inputs(R(3, 4))),
                   (lambda x: torch.amax(x, (0, 2), keepdim=True), inputs(R(2, 3, 4)))],
    "torch.amin": [(lambda x: torch.amin(x, -1), inputs(R(3, 4)))],
    "torch.asin": unary(torch.asin, R(3, 4, lo=-0.9, hi=0.9)),
    "torch.asinh": unary(torch.asinh),
    "torch.atan": unary(torch.atan),
    "torch.atanh": unary(torch.atanh, R(3, 4, lo=-0.8, hi=0.8)),
    "torch.bitwise_and": [(torch.bitwise_and, inputs(I(3, 4, hi=8), I(3, 4, hi=8)))],
    "torch.bitwise_not": [(torch.bitwise_not, inputs(I(3, 4, hi=8)))],
    "torch.bitwise_or": [(torch.bitwise_or, inputs(I(3, 4, hi=8), I(4, hi=8)))],
    "torch.bitwise_xor": [(torch.bitwise_xor, inputs(B(3, 4), B(3, 4)))],
    "torch.cdist": [(lambda a, b: torch.cdist(a, b), inputs(R(2, 3, 4), R(2, 5, 4)))],
    "torch.ceil": unary(torch.ceil),
    "torch.clamp": [(lambda x: torch.clamp(x, -0.5, 0.7), inputs(R(3, 4))),
                    (lambda x, lo: torch.clamp(x, min=lo), inputs(R(3, 4), R(4)))],
    "torch.clamp_max": [(lambda x: torch.clamp_max(x, 0.3), inputs(R(3, 4)))],
    "torch.clamp_min": [(lambda x: torch.clamp_min(x, 0.3), inputs(R(3, 4)))],
    "torch.cos": unary(torch.cos),
    "torch.cosh": unary(torch.cosh),
    "torch.div": binary(torch.div, b=P(3, 4)) + [
        (lambda a, b: torch.div(a, b, rounding_mode="floor"), inputs(R(3, 4), P(3, 4))),
        (lambda a, b: torch.div(a, b, rounding_mode="trunc"), inputs(R(3, 4), P(3, 4))),
        (lambda i: i / 2, inputs(I(3, 4)))],
    "torch.exp": unary(torch.exp),
    "torch.expm1": unary(torch.expm1),
    "torch.floor": unary(torch.floor),
    "torch.floor_divide": [(torch.floor_divide, inputs(R(3, 4), P(3, 4))),
                           (lambda i: torch.floor_divide(i, 3), inputs(I(3, 4, hi=9)))],
    "torch.fmod": [(torch.fmod, inputs(R(3, 4), P(3, 4)))],
    "torch.frac": unary(torch.frac),
    "torch.log": unary(torch.log, P(3, 4)),
    "torch.log10": unary(torch.log10, P(3, 4)),
    "torch.log1p": unary(torch.log1p, P(3, 4)),
    "torch.log2": unary(torch.log2, P(3, 4)),
    "torch.logical_and": [(torch.logical_and, inputs(B(3, 4), B(3, 4))),
                          (torch.logical_and, inputs(R(3, 4), I(3, 4)))],
    "torch.logical_or": [(torch.logical_or, inputs(B(3, 4), B(4)))],
    "torch.mul": binary(torch.mul),
    "torch.norm": [(lambda x: torch.norm(x), inputs(R(3, 4))),
                   (lambda x: torch.norm(x, 1, dim=1), inputs(R(3, 4)))],
    "torch.neg": unary(torch.neg),
    "torch.pow": [(lambda x: torch.pow(x, 3), inputs(R(3, 4))),
                  (lambda x, y: torch.pow(x, y), inputs(P(3, 4), R(3, 4))),
                  (lambda y: torch.pow(2.0, y), inputs(R(3, 4)))],
    "torch.reciprocal": unary(torch.reciprocal, P(3, 4)),
    "torch.remainder": [(torch.remainder, inputs(R(3, 4), P(3, 4))),
                        (lambda x: torch.remainder(x, -1.5), inputs(R(3, 4)))],
    "torch.round": unary(torch.round),
    "torch.rsqrt": unary(torch.rsqrt, P(3, 4)),
    "torch.sigmoid": unary(torch.sigmoid),
    "torch.sign": unary(torch.sign),
    "torch.sin": unary(torch.sin),
    "torch.sinh": unary(torch.sinh),
    "torch.sqrt": unary(torch.sqrt, P(3, 4)),
    "torch.square": unary(torch.square),
    "torch.sub": binary(torch.sub),
    "torch.tan": unary(torch.tan, R(3, 4, lo=-1.2, hi=1.2)),
    "torch.tanh": unary(torch.tanh),
    "torch.true_divide": [(torch.true_divide, inputs(R(3, 4), P(3, 4)))],
    "torch.trunc": unary(torch.trunc),
    # -- reductions --------------------------------------------------------------------------
    "torch.all": [(lambda b: torch.all(b), inputs(B(3, 4))),
                  (lambda x: torch.all(x > -1.5, 1), inputs(R(3, 4)))],
    "torch.any": [(lambda b: torch.any(b, 0), inputs(B(3, 4)))],
    "torch.argmax": [(lambda x: torch.argmax(x), inputs(R(3, 4))),
                     (lambda x: torch.argmax(x, 1, keepdim=True), inputs(R(3, 4)))],
    "torch.argmin": [(lambda x: torch.argmin(x, 0), inputs(R(3, 4)))],
    "torch.count_nonzero": [(lambda i: torch.count_nonzero(i, 1), inputs(I(3, 4, hi=2)))],
    "torch.mean": [(torch.mean, inputs(R(3, 4))), (lambda x: x.mean((0, 2)), inputs(R(2, 3, 4)))],
    "torch.median": [(lambda x: torch.median(x, 1).values, inputs(R(3, 5))),
                     (lambda x: torch.median(x), inputs(R(3, 5)))],
    "torch.prod": [(lambda x: torch.prod(x, 1), inputs(R(3, 4))), (torch.prod, inputs(R(2, 3)))],
    "torch.logsumexp": [(lambda x: torch.logsumexp(x, 1), inputs(R(3, 4)))],
    "torch.std": [(lambda x: torch.std(x, 1), inputs(R(3, 4))), (torch.std, inputs(R(3, 4)))],
    "torch.std_mean": [(lambda x: torch.std_mean(x, 0), inputs(R(3, 4)))],
    "torch.sum": [(torch.sum, inputs(R(3, 4))), (lambda x: x.sum(-1, keepdim=True),
                                                 inputs(R(2, 3, 4))),
                  (lambda b: b.sum(), inputs(B(3, 4)))],
    "torch.var": [(lambda x: torch.var(x, 1, unbiased=False), inputs(R(3, 4)))],
    "torch.var_mean": [(lambda x: torch.var_mean(x, 1), inputs(R(3, 4)))],
    # -- comparisons -------------------------------------------------------------------------
    "torch.eq": binary(torch.eq, I(3, 4), I(3, 4)) + [(torch.eq, inputs(R(3, 4), R(4)))],
    "torch.ge": binary(torch.ge),
    "torch.gt": binary(torch.gt),
    "torch.le": binary(torch.le),
    "torch.lt": binary(torch.lt),
    "torch.max": [(torch.max, inputs(R(3, 4))), (lambda x: torch.max(x, 1), inputs(R(3, 4))),
                  (torch.max, inputs(R(3, 4), R(3, 4)))],
    "torch.min": [(torch.min, inputs(R(3, 4))), (lambda x: torch.min(x, 0), inputs(R(3, 4))),
                  (torch.min, inputs(R(3, 4), R(4)))],
    "torch.ne": binary(torch.ne, I(3, 4), I(3, 4)),
    "torch.isnan": [(lambda x: torch.isnan(torch.log(x)), inputs(R(3, 4)))],
    "torch.topk": [(lambda x: torch.topk(x, 2), inputs(R(3, 5))),
                   (lambda x: torch.topk(x, 2, 0, largest=False), inputs(R(3, 5)))],
    "torch.argsort": [(lambda x: torch.argsort(x, 1), inputs(R(3, 5)))],
    "torch.sort": [(lambda x: torch.sort(x, 1), inputs(R(3, 5))),
                   (lambda x: torch.sort(x, 0, descending=True), inputs(R(3, 5)))],
    # -- linalg, other, BLAS -----------------------------------------------------------------
    "torch.linalg.norm": [(torch.linalg.norm, inputs(R(3, 4))),
                          (lambda x: torch.linalg.norm(x, dim=1), inputs(R(3, 4)))],
    "torch.linalg.matrix_norm": [(torch.linalg.matrix_norm, inputs(R(2, 3, 4)))],
    "torch.linalg.vector_norm": [(lambda x: torch.linalg.vector_norm(x, 3, 1), inputs(R(3, 4))),
                                 (lambda x: torch.linalg.vector_norm(x, float("inf")),
                                  inputs(R(3, 4)))],
    "torch.cumsum": [(lambda x: torch.cumsum(x, 1), inputs(R(3, 4)))],
    "torch.cumprod": [(lambda x: torch.cumprod(x, 1), inputs(R(3, 4)))],
    "torch.cross": [(lambda a, b: torch.cross(a, b, dim=1), inputs(R(2, 3), R(2, 3)))],
    "torch.meshgrid": [(lambda a, b: torch.meshgrid(a, b, indexing="ij"), inputs(R(3), R(4)))],
    "torch.cartesian_prod": [(torch.cartesian_prod, inputs(R(3), R(2)))],
    "torch.tensordot": [(lambda a, b: torch.tensordot(a, b, 2), inputs(R(2, 3, 4), R(3, 4, 5)))],
    "torch.addmm": [(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
                     inputs(R(3, 5), R(3, 4), R(4, 5))),
                    (lambda c, a, b: torch.addmm(c, a, b, beta=0.0),
                     inputs(R(5), R(3, 4), R(4, 5))),
                    (lambda c, a, b: torch.addmv(c, a, b, beta=2.0, alpha=-0.5),
                     inputs(R(3), R(3, 4), R(4))),
                    (lambda c, a, b: torch.addbmm(c, a, b, beta=0.5, alpha=2.0),
                     inputs(R(3, 5), R(2, 3, 4), R(2, 4, 5))),
                    (lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
                     inputs(R(1, 3, 5), R(2, 3, 4), R(2, 4, 5)))],
    "torch.matmul": [(torch.matmul, inputs(R(3, 4), R(4, 5))),
                     (torch.matmul, inputs(R(2, 3, 4), R(4))),
                     (torch.matmul, inputs(R(2, 1, 3, 4), R(3, 4, 2)))],
    "torch.bmm": [(torch.bmm, inputs(R(2, 3, 4), R(2, 4, 5)))],
    # -- torch.nn layers ---------------------------------------------------------------------
    "torch.nn.Conv1d": module(lambda: nn.Conv1d(3, 4, 3, padding="same"), IMG1),
    "torch.nn.Conv2d": module(lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), IMG2)
    + module(lambda: nn.Conv2d(3, 6, 3, groups=3, padding="same", dilation=2), IMG2),
    "torch.nn.Conv3d": module(lambda: nn.Conv3d(2, 3, 2), IMG3),
    "torch.nn.ConvTranspose1d": module(lambda: nn.ConvTranspose1d(3, 2, 3, stride=2), IMG1),
    "torch.nn.ConvTranspose2d": module(lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1,
                                                                  output_padding=1), IMG2),
    "torch.nn.ConvTranspose3d": module(lambda: nn.ConvTranspose3d(2, 2, 2), IMG3),
    "torch.nn.MaxPool1d": module(lambda: nn.MaxPool1d(2), IMG1),
    "torch.nn.MaxPool2d": module(lambda: nn.MaxPool2d(3, 2, padding=1), IMG2)
    + module(lambda: nn.MaxPool2d(2, ceil_mode=True), R(2, 3, 5, 5)),
    "torch.nn.MaxPool3d": module(lambda: nn.MaxPool3d(2), IMG3),
    "torch.nn.AvgPool1d": module(lambda: nn.AvgPool1d(3, 2, padding=1), IMG1),
    "torch.nn.AvgPool2d": module(lambda: nn.AvgPool2d(3, 2, padding=1), IMG2)
    + module(lambda: nn.AvgPool2d(3, 2, padding=1, count_include_pad=False), IMG2),
    "torch.nn.AvgPool3d": module(lambda: nn.AvgPool3d(2), IMG3),
    "torch.nn.AdaptiveAvgPool1d": module(lambda: nn.AdaptiveAvgPool1d(3), IMG1),
    "torch.nn.AdaptiveAvgPool2d": module(lambda: nn.AdaptiveAvgPool2d((4, 3)), IMG2)
    + module(lambda: nn.AdaptiveAvgPool2d(1), IMG2),
    "torch.nn.AdaptiveAvgPool3d": module(lambda: nn.AdaptiveAvgPool3d(2), IMG3),
    "torch.nn.ReflectionPad1d": module(lambda: nn.ReflectionPad1d(2), IMG1),
    "torch.nn.ReflectionPad2d": module(lambda: nn.ReflectionPad2d((1, 2, 0, 1)), IMG2),
    "torch.nn.ReplicationPad1d": module(lambda: nn.ReplicationPad1d(2), IMG1),
    "torch.nn.ReplicationPad2d": module(lambda: nn.ReplicationPad2d(1), IMG2),
    "torch.nn.ReplicationPad3d": module(lambda: nn.ReplicationPad3d(1), IMG3),
    "torch.nn.ZeroPad2d": module(lambda: nn.ZeroPad2d((1, 0, 2, 1)), IMG2),
    "torch.nn.ConstantPad1d": module(lambda: nn.ConstantPad1d(2, 0.5), IMG1),
    "torch.nn.ConstantPad2d": module(lambda: nn.ConstantPad2d(1, -1.0), IMG2),
    "torch.nn.ConstantPad3d": module(lambda: nn.ConstantPad3d(1, 2.0), IMG3),
    "torch.nn.ELU": module(lambda: nn.ELU(0.7), R(3, 4)),
    "torch.nn.CELU": module(lambda: nn.CELU(0.8), R(3, 4)),
    "torch.nn.GELU": module(nn.GELU, R(3, 4)) + module(lambda: nn.GELU("tanh"), R(3, 4)),
    "torch.nn.Hardshrink": module(nn.Hardshrink, R(3, 4)),
    "torch.nn.LeakyReLU": module(lambda: nn.LeakyReLU(0.2), R(3, 4)),
    "torch.nn.LogSoftmax": module(lambda: nn.LogSoftmax(1), R(3, 4)),
    "torch.nn.Mish": module(nn.Mish, R(3, 4)),
    "torch.nn.ReLU": module(nn.ReLU, R(3, 4)),
    "torch.nn.SELU": module(nn.SELU, R(3, 4)),
    "torch.nn.SiLU": module(nn.SiLU, R(3, 4)),
    "torch.nn.Sigmoid": module(nn.Sigmoid, R(3, 4)),
    "torch.nn.Softmax": module(lambda: nn.Softmax(0), R(3, 4)),
    "torch.nn.Softplus": module(lambda: nn.Softplus(2.0, 1.0), R(3, 4)),
    "torch.nn.Softsign": module(nn.Softsign, R(3, 4)),
    "torch.nn.Softshrink": module(nn.Softshrink, R(3, 4)),
    "torch.nn.Tanh": module(nn.Tanh, R(3, 4)),
    "torch.nn.PReLU": module(lambda: nn.PReLU(3), IMG2),
    "torch.nn.RReLU": module(lambda: nn.RReLU().eval(), R(3, 4)),
    "torch.nn.Hardtanh": module(lambda: nn.Hardtanh(-0.5, 0.8), R(3, 4)),
    "torch.nn.functional.glu": [(lambda x: F.glu(x, 1), inputs(R(3, 4)))],
    "torch.nn.Threshold": module(lambda: nn.Threshold(0.1, 20.0), R(3, 4)),
    "torch.nn.BatchNorm1d": module(lambda: nn.BatchNorm1d(4), R(3, 4))
    + module(lambda: nn.BatchNorm1d(4, momentum=None), R(3, 4))
    + module(lambda: nn.BatchNorm1d(3).eval(), R(2, 3, 5)),
    "torch.nn.BatchNorm2d": module(lambda: nn.BatchNorm2d(3), IMG2)
    + module(lambda: nn.BatchNorm2d(3, affine=False, track_running_stats=False), IMG2),
    "torch.nn.BatchNorm3d": module(lambda: nn.BatchNorm3d(2), IMG3),
    "torch.nn.LayerNorm": module(lambda: nn.LayerNorm(4), R(3, 4))
    + module(lambda: nn.LayerNorm((3, 4)), R(2, 3, 4)),
    "torch.nn.GroupNorm": module(lambda: nn.GroupNorm(3, 6), R(2, 6, 5)),
    "torch.nn.InstanceNorm1d": module(lambda: nn.InstanceNorm1d(3, affine=True), IMG1),
    "torch.nn.InstanceNorm2d": module(lambda: nn.InstanceNorm2d(3), IMG2),
    "torch.nn.InstanceNorm3d": module(lambda: nn.InstanceNorm3d(2), IMG3),
    "torch.nn.utils.weight_norm": module(
        lambda: nn.utils.parametrizations.weight_norm(nn.Linear(4, 3)), R(2, 4)),
    "torch.nn.RNN": module(lambda: nn.RNN(4, 3, batch_first=True), R(2, 5, 4))
    + module(lambda: nn.RNN(4, 3, 2, nonlinearity="relu"), R(5, 2, 4)),
    "torch.nn.GRU": module(lambda: nn.GRU(4, 3), R(5, 2, 4)),
    "torch.nn.LSTM": module(lambda: nn.LSTM(4, 3, batch_first=True), R(2, 5, 4))
    + module(lambda: nn.LSTM(4, 3, 2, bidirectional=True), R(5, 2, 4)),
    "torch.nn.Identity": module(nn.Identity, R(3, 4)),
    "torch.nn.Linear": module(lambda: nn.Linear(4, 3), R(2, 4))
    + module(lambda: nn.Linear(4, 3, bias=False), R(2, 5, 4)),
    "torch.nn.Bilinear": module(lambda: nn.Bilinear(3, 4, 2), R(5, 3), R(5, 4)),
    "torch.nn.dropout": module(lambda: nn.Dropout(0.3).eval(), R(3, 4)),
    "torch.nn.Embedding": module(lambda: nn.Embedding(6, 3), I(2, 4, hi=6))
    + module(lambda: nn.Embedding(6, 3, padding_idx=1), I(2, 4, hi=6)),
    "torch.nn.EmbeddingBag": module(lambda: nn.EmbeddingBag(6, 3), I(2, 4, hi=6))
    + module(lambda: nn.EmbeddingBag(6, 3, mode="sum"), I(2, 4, hi=6))
    + module(lambda: nn.EmbeddingBag(6, 3, mode="max"), I(2, 4, hi=6))
    # ragged bags (1-D input and offsets), an empty bag, padding_idx; with include_last_offset
    # the last offset ends the input (torch's backward scatters the gradient of indices past it
    # from unset memory)
    + [(_bags(mode, pad, last), inputs(I(9, hi=6), lambda d, o=offsets: torch.tensor(o),
                                       R(6, 3)))
       for mode, pad, last, offsets in (("mean", None, False, [0, 2, 2, 7]),
                                        ("sum", 1, False, [0, 2, 2, 7]),
                                        ("max", None, False, [0, 2, 2, 7]),
                                        ("sum", None, True, [0, 2, 2, 9]))],
    "torch.nn.functional.one_hot": [(lambda i: F.one_hot(i, 5), inputs(I(2, 3, hi=5)))],
    # -- losses ------------------------------------------------------------------------------
    "torch.nn.L1Loss": loss(nn.L1Loss, R(3, 4), R(3, 4)),
    "torch.nn.MSELoss": loss(lambda: nn.MSELoss(reduction="sum"), R(3, 4), R(3, 4)),
    "torch.nn.CrossEntropyLoss": loss(nn.CrossEntropyLoss, R(5, 4), I(5))
    + loss(lambda: nn.CrossEntropyLoss(torch.rand(4) + 0.5, label_smoothing=0.1),
           R(5, 4), I(5))
    + loss(lambda: nn.CrossEntropyLoss(reduction="none", ignore_index=2), R(5, 4, 3),
           I(5, 3)),
    "torch.nn.NLLLoss": loss(nn.NLLLoss, R(5, 4), I(5))
    + loss(lambda: nn.NLLLoss(torch.rand(4) + 0.5), R(5, 4), I(5)),
    "torch.nn.BCELoss": loss(nn.BCELoss, R(3, 4, lo=0.05, hi=0.95), R(3, 4, lo=0.0, hi=1.0)),
    "torch.nn.KLDivLoss": loss(lambda: nn.KLDivLoss(reduction="batchmean"), R(3, 4),
                               R(3, 4, lo=0.05, hi=1.0)),
    "torch.nn.PoissonNLLLoss": loss(nn.PoissonNLLLoss, R(3, 4), P(3, 4)),
    "torch.nn.HingeEmbeddingLoss": loss(nn.HingeEmbeddingLoss, R(3, 4),
                                        lambda d: torch.randint(0, 2, (3, 4)).to(d) * 2 - 1),
    "torch.nn.BCEWithLogitsLoss": loss(nn.BCEWithLogitsLoss, R(3, 4), R(3, 4, lo=0.0, hi=1.0))
    + loss(lambda: nn.BCEWithLogitsLoss(pos_weight=torch.rand(4) + 0.5), R(3, 4),
           R(3, 4, lo=0.0, hi=1.0)),
    "torch.nn.SmoothL1Loss": loss(lambda: nn.SmoothL1Loss(beta=0.5), R(3, 4), R(3, 4)),
    "torch.nn.SoftMarginLoss": loss(nn.SoftMarginLoss, R(3, 4), R(3, 4)),
    "torch.nn.CosineEmbeddingLoss": loss(nn.CosineEmbeddingLoss, R(3, 4), R(3, 4),
                                         lambda d: torch.tensor([1, -1, 1])),
    "torch.nn.MarginRankingLoss": loss(lambda: nn.MarginRankingLoss(0.2), R(5), R(5),
                                       lambda d: torch.tensor([1, -1, 1, 1, -1]).to(d)),
    "torch.nn.TripletMarginLoss": loss(nn.TripletMarginLoss, R(3, 4), R(3, 4), R(3, 4)),
    "torch.nn.CTCLoss": [
        case for make in (nn.CTCLoss, lambda: nn.CTCLoss(blank=3, reduction="sum"),
                          lambda: nn.CTCLoss(reduction="none", zero_infinity=True))
        for case in loss(make, lambda d: torch.randn(6, 2, 4).log_softmax(2).to(d),
                         lambda d: torch.tensor([[1, 2, 2], [0, 1, 0]]),
                         lambda d: torch.tensor([6, 5]), lambda d: torch.tensor([3, 2]))],
    "torch.nn.Upsample": module(lambda: nn.Upsample(scale_factor=2), IMG2)
    + module(lambda: nn.Upsample(size=(8, 9), mode="bilinear"), IMG2)
    + module(lambda: nn.Upsample(scale_factor=5.12498), R(1, 2, 3, 4))
    + module(lambda: nn.Upsample(scale_factor=0.435714), R(1, 1, 14, 14)),
    # -- named by PopTorch's behaviour reference, beyond its list ----------------------------
    "torch.erfc": unary(torch.erfc),
    "torch.slice_scatter": [(lambda x, y: torch.slice_scatter(x, y, 1, 1, 3),
                             inputs(R(3, 5), R(3, 2))),
                            (lambda x, y: torch.slice_scatter(x, y, 0, -2),
                             inputs(R(4, 3), R(2, 3)))],
    "torch.Tensor.unfold": [(lambda x: x.unfold(1, 5, 2), inputs(R(3, 11, 4))),
                            (lambda x: x.unfold(0, 2, 3), inputs(R(8, 3))),
                            (lambda x: x.unfold(-1, 3, 1), inputs(R(2, 5)))],
    "torch.addmv": [(lambda c, a, b: torch.addmv(c, a, b, alpha=0.0, beta=1.5),
                     inputs(R(3), R(3, 4), R(4))),
                    (lambda c, a, b: torch.addmv(c, a, b, alpha=0, beta=0),
                     inputs(R(3), R(3, 4), R(4))),
                    (lambda c, a, b: torch.addmv(c, a, b, beta=0.0, alpha=0.5),
                     inputs(R(3), R(3, 4), R(4)))],
}

# Random samplers: (fn, inputs, expected mean, expected standard deviation) of the samples.
_PROB = torch.full((400, 50), 0.3)
RANDOM: dict[str, tuple[Callable[..., Any], list[torch.Tensor], float, float]] = {
    "torch.bernoulli": (torch.bernoulli, [_PROB], 0.3, 0.3 ** 0.5 * 0.7 ** 0.5),
    "torch.distributions.Bernoulli": (
        lambda p: torch.distributions.Bernoulli(p).sample(), [_PROB], 0.3, (0.3 * 0.7) ** 0.5),
    "torch.randn": (lambda x: x + torch.randn(400, 50), [torch.zeros(50)], 0.0, 1.0),
    "torch.normal": (lambda m: torch.normal(m, 2.0), [torch.ones(400, 50)], 1.0, 2.0),
    "torch.distributions.Normal": (
        lambda m: torch.distributions.Normal(m, 0.5).sample(), [torch.ones(400, 50)], 1.0, 0.5),
    "torch.rand": (lambda x: x + torch.rand(400, 50), [torch.zeros(50)], 0.5, 12 ** -0.5),
    "torch.uniform": (lambda x: x.clone().uniform_(-1.0, 3.0), [torch.zeros(400, 50)],
                      1.0, 4 * 12 ** -0.5),
    "torch.distributions.Uniform": (
        lambda lo: torch.distributions.Uniform(lo, lo + 2.0).sample(), [torch.zeros(400, 50)],
        1.0, 2 * 12 ** -0.5),
    "torch.exponential": (lambda x: x.clone().exponential_(2.0), [torch.zeros(400, 50)],
                          0.5, 0.5),
    "torch.distributions.Exponential": (
        lambda r: torch.distributions.Exponential(r).sample(), [torch.full((400, 50), 2.0)],
        0.5, 0.5),
    "torch.randperm": (lambda x: x + torch.randperm(20000).float(), [torch.zeros(20000)],
                       9999.5, 20000 * 12 ** -0.5),
}
