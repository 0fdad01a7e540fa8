"""The op sweep: every PopTorch operation the frontend claims, against torch eager.

Modelled on torch's OpInfo tests: each operation of ``xlgraph.poptorch.coverage.COVERED`` has
samples (``tests/poptorch_cases.py``, plus torch's own OpInfo samples where torch ships them).
Each sample is captured at the ATen level, converted and run on xlgraph, and compared with
torch: the forward values and dtypes, and the gradient of a random projection of the outputs
with respect to every floating-point input (parameters included), in float32 and in float16
(float16 against torch's float32 result, at float16's precision).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.utils._pytree as pytree  # noqa: E402

from tests.poptorch_cases import CASES, RANDOM  # noqa: E402
from xlgraph.poptorch.aten_program import AtenProgram  # noqa: E402
from xlgraph.poptorch.coverage import COVERED  # noqa: E402

TOLERANCE = {torch.float32: (2e-4, 2e-4), torch.float16: (2e-2, 3e-2)}


def _float(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype) if t.is_floating_point() else t


def _reference(fn, ins, dtype):
    """torch's outputs in float32 (float16 inputs are widened) and its float16 output dtypes."""
    frozen = getattr(fn, "no_grad", ())
    wide = [_float(t, torch.float32).detach().clone().requires_grad_(
        t.is_floating_point() and i not in frozen) for i, t in enumerate(ins)]
    out = pytree.tree_leaves(fn(*wide))
    try:
        dtypes_ = [o.dtype for o in pytree.tree_leaves(fn(*[t.clone() for t in ins]))]
    except RuntimeError:  # torch has no float16 kernel for it on the CPU
        dtypes_ = [dtype if o.is_floating_point() else o.dtype for o in out]
    return wide, out, dtypes_


def check_case(fn, make, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    ins = make(dtype)
    wide, expected, expected_dtypes = _reference(fn, ins, dtype)
    program = AtenProgram(fn, [t.clone() for t in ins], training=False)
    got = program(*[t.clone() for t in ins])
    rtol, atol = TOLERANCE[dtype]
    assert len(got) == len(expected)
    for g, e, d in zip(got, expected, expected_dtypes):
        assert g.dtype == d, (g.dtype, d)
        if not e.is_floating_point():
            assert torch.equal(g, e), (g, e)
            continue
        torch.testing.assert_close(g.to(e.dtype), e.detach().to(d).to(e.dtype), rtol=rtol,
                                   atol=atol * max(1.0, float(e.detach().abs().max())))
    frozen = getattr(fn, "no_grad", ())
    differentiable = [i for i, t in enumerate(ins) if t.is_floating_point() and i not in frozen]
    outs = [(i, e) for i, e in enumerate(expected) if e.requires_grad]
    if not differentiable or not outs:
        return
    cotangents = [torch.randn(e.shape).to(d) if e.requires_grad else None
                  for e, d in zip(expected, expected_dtypes)]
    try:
        ref = torch.autograd.grad([e for _, e in outs], [wide[i] for i in differentiable],
                                  [cotangents[i].float() for i, _ in outs], allow_unused=True)
    except RuntimeError as exc:  # torch defines no gradient for it (floor_divide)
        assert "not implemented" in str(exc)
        return
    grads = program.vjp([t.clone() for t in ins], cotangents, differentiable)
    for i, g, r in zip(differentiable, grads, ref):
        r = torch.zeros_like(wide[i]) if r is None else r
        torch.testing.assert_close(g.float(), r, rtol=rtol * 5, atol=atol * 5 * max(
            1.0, float(r.abs().max())), msg=lambda m, i=i: f"gradient of input {i}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(COVERED & set(CASES)))
def test_op_matches_torch(name: str, dtype: torch.dtype) -> None:
    for fn, make in CASES[name]:
        check_case(fn, make, dtype)


def test_every_covered_name_has_samples():
    assert COVERED <= set(CASES) | set(RANDOM), sorted(COVERED - set(CASES) - set(RANDOM))


@pytest.mark.parametrize("name", sorted(set(RANDOM) & COVERED))
def test_sampler_draws_from_its_distribution(name: str) -> None:
    """Random samplers: shape, dtype, and mean/std within 5% of the distribution's; two draws
    with different seeds differ and one seed repeats."""
    fn, ins, mean, std = RANDOM[name]
    program = AtenProgram(fn, ins)
    seed = program.new_seed()
    (a,), (b,) = program(*ins, seed=seed), program(*ins, seed=seed + 1)
    (again,) = program(*ins, seed=seed)
    expected = fn(*ins)
    assert a.shape == expected.shape and a.dtype == expected.dtype
    assert torch.equal(a, again) and not torch.equal(a, b)
    assert abs(float(a.float().mean()) - mean) < 0.05 * max(std, abs(mean))
    assert abs(float(a.float().std()) - std) < 0.05 * std
