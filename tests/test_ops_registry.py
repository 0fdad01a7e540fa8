"""Every registered op x its samples: inference, reference, optimised vs interpreted, gradients."""

from __future__ import annotations

import numpy as np
import pytest
from op_harness import gradients, run_forward, sample_arrays

from xlgraph.op import BUILDERS, REGISTRY

KERNEL_OPS = sorted(n for n, d in REGISTRY.items() if d.kind == "kernel")


def _cases(differentiable_only: bool = False) -> list[tuple[str, int]]:
    cases = []
    for name in KERNEL_OPS:
        defn = REGISTRY[name]
        if differentiable_only and not defn.differentiable:
            continue
        samples = defn.samples(np.random.default_rng(0)) if defn.samples else []
        cases.extend(
            (name, i) for i, s in enumerate(samples) if s.grad or not differentiable_only
        )
    return cases


def _sample(name: str, index: int):
    rng = np.random.default_rng(1234 + index)
    return REGISTRY[name].samples(rng)[index]


def _as_list(result) -> list[np.ndarray]:
    return list(result) if isinstance(result, tuple) else [result]


def test_every_kernel_op_has_samples_and_a_builder() -> None:
    missing = [n for n in KERNEL_OPS if not REGISTRY[n].samples or n not in BUILDERS]
    assert missing == []


@pytest.mark.parametrize(("name", "index"), _cases())
def test_forward_matches_reference_and_inference(name: str, index: int) -> None:
    defn = REGISTRY[name]
    sample = _sample(name, index)
    arrays = sample_arrays(sample, np.float32)
    got, op = run_forward(defn, sample, arrays, optimize=True)
    interpreted, _ = run_forward(defn, sample, arrays, optimize=False)
    kernel_out = _as_list(defn.kernel(*[a.copy() for a in arrays], **op.attrs))
    for t, k in zip(op.outputs, kernel_out):
        assert np.shape(k) == t.shape, f"{name}: kernel shape {np.shape(k)} vs inferred {t.shape}"
        assert np.asarray(k).dtype == t.dtype.as_numpy(), f"{name}: kernel dtype {k.dtype}"
        assert np.asarray(k).flags.c_contiguous or not defn.c_contiguous, f"{name}: not C"
    reference = defn.ref or defn.kernel
    expected = _as_list(reference(*[a.copy() for a in arrays], **op.attrs))
    tol = defn.tol or 1e-5
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=tol, atol=tol)
    for g, i in zip(got, interpreted):
        np.testing.assert_array_equal(g, i)


@pytest.mark.parametrize(("name", "index"), _cases(differentiable_only=True))
def test_gradient_matches_finite_differences(name: str, index: int) -> None:
    defn = REGISTRY[name]
    sample = _sample(name, index)
    arrays = sample_arrays(sample, np.float64)
    rng = np.random.default_rng(99)
    grads, seeds, op = gradients(defn, sample, arrays, rng)
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    directions = {i: rng.normal(size=arrays[i].shape) for i in floats}

    def objective(shift: float) -> float:
        moved = [a + shift * directions[i] if i in directions else a for i, a in enumerate(arrays)]
        outs = [o for o in _as_list(defn.kernel(*moved, **op.attrs))
                if np.asarray(o).dtype.kind == "f"]
        return float(sum(np.sum(s * o) for s, o in zip(seeds, outs)))

    eps = 1e-6
    numeric = (objective(eps) - objective(-eps)) / (2 * eps)
    analytic = sum(float(np.sum(g * directions[i])) for g, i in zip(grads, floats))
    assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def test_a_derived_form_keeps_the_promises_of_the_kernels_it_keeps_only() -> None:
    """``OpDef.derived``: a form with a new ``kernel`` or ``kernel_out`` (replicated, float16)
    promises nothing of the old one's unless it says so again."""
    from xlgraph.ops.half_round import ROUND_HALF

    matmul = REGISTRY["matmul"]
    assert matmul.c_contiguous and matmul.derived(replicated=None).c_contiguous
    transposed = matmul.derived(kernel=lambda a, b: (a @ b).T)
    assert not transposed.c_contiguous and transposed.kernel_out is matmul.kernel_out
    assert matmul.derived(kernel=np.matmul, c_contiguous=True).c_contiguous
    assert ROUND_HALF.out_may_be_input and ROUND_HALF.derived(kernel=np.copy).out_may_be_input
    assert not ROUND_HALF.derived(kernel_out=None).out_may_be_input
    original = np.array([1.0, 1.0 + 2.0**-11, 70000.0, -3e-8], np.float32)  # tie, inf, subnormal
    x = original.copy()
    fresh = ROUND_HALF.kernel(x)
    np.testing.assert_array_equal(fresh, original.astype(np.float16).astype(np.float32))
    assert ROUND_HALF.kernel_out(x, out=x) is x  # into its input, as declared: same bits
    np.testing.assert_array_equal(x, fresh)
