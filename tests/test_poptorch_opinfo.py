"""torch's own OpInfo samples for the converted ops that torch ships them for.

Each sample (``torch.testing._internal.common_methods_invocations``: shapes, broadcasting,
keyword forms, scalars) runs through the same check as the op sweep: capture, conversion and
xlgraph against torch eager, forward and gradient. The first four non-empty samples per op;
``cat`` and ``stack`` (whose input is a list) are left to the sweep's own samples.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's test helpers need it

from tests.test_poptorch_sweep import check_case  # noqa: E402

OPINFO_OPS = """
abs acos acosh add addcdiv addmm all amax amin any argmax argmin argsort asin asinh atan atanh
bitwise_and bitwise_not bitwise_or bitwise_xor bmm bucketize cartesian_prod cdist ceil chunk
clamp clamp_max clamp_min cos cosh count_nonzero cross cumprod cumsum eq exp expm1 floor
floor_divide fmod frac full_like gather ge gt index_select isnan le log log10 log1p log2
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


@pytest.mark.parametrize("name", OPINFO_OPS)
def test_opinfo_samples_match_torch(name: str) -> None:
    info = _opinfos()[name]
    samples = _samples(info)
    assert samples, f"no usable OpInfo sample for {name}"
    for s in samples:
        tensors = [s.input] + [a for a in s.args if isinstance(a, torch.Tensor)]

        def fn(*ts, s=s):
            rest = iter(ts[1:])
            args = [next(rest) if isinstance(a, torch.Tensor) else a for a in s.args]
            return info.op(ts[0], *args, **s.kwargs)

        check_case(fn, lambda dtype, ts=tensors: [t.clone() for t in ts], torch.float32)
