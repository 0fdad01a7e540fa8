"""torch's own OpInfo samples for the converted ops that torch ships them for.

Each sample (``torch.testing._internal.common_methods_invocations``: shapes, broadcasting,
keyword forms, scalars) runs through the same check as the op sweep: capture, conversion and
xlgraph against torch eager, forward and gradient. The first four non-empty samples per op;
``cat`` and ``stack`` (whose input is a list) are left to the sweep's own samples. Advanced
indexing (``__getitem__``, ``index_put``) runs every sample, in float32 and float16, its index
tensors (nested in lists) as inputs.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's test helpers need it
import torch.utils._pytree as pytree  # noqa: E402

from tests.test_poptorch_sweep import check_case  # noqa: E402
from xlgraph.poptorch.capture import DataDependentError  # noqa: E402

OPINFO_OPS = """
abs acos acosh add addbmm addcdiv addmm addmv all amax amin any argmax argmin argsort asin asinh
atan atanh baddbmm bitwise_and bitwise_not bitwise_or bitwise_xor bmm bucketize cartesian_prod
cdist ceil chunk clamp clamp_max clamp_min cos cosh count_nonzero cross cumprod cumsum eq exp expm1
floor floor_divide fmod frac full_like gather ge gt index_select isnan le log log10 log1p log2
logical_and logical_or logsumexp lt matmul mean median mul ne neg norm ones_like pow prod
reciprocal remainder reshape roll round rsqrt scatter scatter_add sigmoid sign sin sinh sort
split sqrt square squeeze std std_mean sub sum t take_along_dim tan tanh tensordot topk
transpose true_divide trunc unbind unsqueeze var var_mean where zeros_like
""".split()


@functools.cache
def _opinfos() -> dict[str, object]:
    from torch.testing._internal.common_methods_invocations import op_db

    return {i.name: i for i in op_db if not i.variant_test_name}


def _samples(info: object) -> list[object]:
    dtype = torch.float32 if torch.float32 in info.dtypes else torch.int64
    out = []
    for s in info.sample_inputs("cpu", dtype):
        tensors = [s.input, *s.args] if isinstance(s.input, torch.Tensor) else []
        if tensors and all(t.numel() for t in tensors if isinstance(t, torch.Tensor)):
            out.append(s)
        if len(out) == 4:
            break
    return out


def _case(info: object, s: object) -> tuple[object, list[torch.Tensor]]:
    """The sample as a function of its tensors (those nested in lists included)."""
    leaves, spec = pytree.tree_flatten(list(s.args))
    tensors = [s.input] + [a for a in leaves if isinstance(a, torch.Tensor)]

    def fn(*ts):
        rest = iter(ts[1:])
        args = [next(rest) if isinstance(a, torch.Tensor) else a for a in leaves]
        return info.op(ts[0], *pytree.tree_unflatten(args, spec), **s.kwargs)

    return fn, tensors


def _check(info: object, s: object, dtype: torch.dtype) -> None:
    fn, tensors = _case(info, s)
    check_case(fn, lambda _, ts=tensors: [t.to(dtype) if t.is_floating_point() else t.clone()
                                          for t in ts], dtype)


@pytest.mark.parametrize("name", OPINFO_OPS)
def test_opinfo_samples_match_torch(name: str) -> None:
    info = _opinfos()[name]
    samples = _samples(info)
    assert samples, f"no usable OpInfo sample for {name}"
    for s in samples:
        _check(info, s, torch.float32)


def _reads_through_mask(s: object) -> bool:
    leaves = pytree.tree_leaves(list(s.args))
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in leaves)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", ["__getitem__", "index_put"])
def test_indexing_opinfo_samples_match_torch(name: str, dtype: torch.dtype) -> None:
    """Every sample: several index tensors, slices and Ellipsis between them, broadcasting,
    boolean masks, accumulate. Reading through a boolean mask (``x[mask]`` returned) has a
    data-dependent shape, as on the IPU: it is refused with the forms to use instead."""
    info = _opinfos()[name]
    samples = list(info.sample_inputs("cpu", torch.float32))
    assert len(samples) >= 4
    for s in samples:
        if name == "__getitem__" and _reads_through_mask(s):
            fn, tensors = _case(info, s)
            with pytest.raises(DataDependentError, match="boolean-mask selection"):
                check_case(fn, lambda _, ts=tensors: ts, dtype)
            continue
        _check(info, s, dtype)
