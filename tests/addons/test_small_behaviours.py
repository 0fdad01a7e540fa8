"""Smaller popxl-addons / PopXL behaviours programs rely on: the fp8 module paths and
PopXL's tensor truth value."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons


def test_fp8_module_paths():
    module = importlib.import_module("xlgraph.addons.ops.fp8_amax_scale")
    assert addons.ops.fp8_amax_scale is module.fp8_amax_scale  # the attribute: the function
    from xlgraph.addons.ops.fp8_utils import FpDef, float8_143_def, float8_152_def

    assert FpDef._fields == ("num_exp_bits", "num_mantissa_bits", "fix_exponent_bias",
                             "include_denorm", "has_nans", "max_value", "max_exp", "min_exp")
    assert float8_143_def == (4, 3, 8, True, False, 240, 7, -10)
    assert float8_152_def == (5, 2, 16, True, False, 57344, 15, -17)
    utils = addons.ops.fp8_utils
    assert utils.ieee_fp16_denorms.max_value == float(np.finfo(np.float16).max)
    assert utils.ieee_fp32_no_denorms.max_value == pytest.approx(np.finfo(np.float32).max)


def test_tensor_truth_value_is_its_length():
    """``assert variables.fc.weight`` passes for a non-empty first axis; a scalar has no
    length; ``==`` is identity and gives a bool."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((3, 2), np.float32))
        empty = popxl.variable(np.zeros((0, 2), np.float32))
        s = popxl.variable(np.float32(0.0))
    assert w and len(w) == 3 and not empty
    with pytest.raises(ValueError, match="Tensor is a scalar and doesn't have a length."):
        bool(s)
    assert (w == w) is True and (w == empty) is False and hash(w) == hash(w)
    with pytest.raises(TypeError):
        iter(w)


def test_group_quantize_numpy_helpers_default_to_the_last_axis():
    from xlgraph.addons.ops.group_quantize_decompress import (
        group_quantize_compress_numpy,
        group_quantize_decompress_numpy,
    )

    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    packed, scale, bias = group_quantize_compress_numpy(x, 8)  # the previous release's call
    for got, want in zip((packed, scale, bias), group_quantize_compress_numpy(x, 8, -1)):
        np.testing.assert_array_equal(got, want)
    back = group_quantize_decompress_numpy(packed, scale, bias)
    np.testing.assert_allclose(back, x, atol=float(scale.max()) / 2 + 1e-3)


def test_variable_factory_grouping_is_given_by_default():
    from xlgraph.addons.variable_factory import VariableFactory

    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        f = VariableFactory(lambda: np.zeros(2, np.float32))
        rg = f.replica_grouping
        assert (rg.num_replicas, rg.group_size, rg.num_groups) == (4, 4, 1)
        assert f.create_tensor("v").shape == (2,)


def test_float16_moving_average_forms_one_minus_f_before_narrowing():
    """A float16 first moment with beta1 = 0.9: the gradient's factor is 0.1 rounded once
    (PopART's host constant), not 1 - float16(0.9) = 0.10010 (+0.1 % on every step)."""
    from xlgraph import ops

    ir = popxl.Ir()
    with ir.main_graph:
        m = popxl.variable(np.zeros(4, np.float16), popxl.float16)
        v = popxl.variable(np.zeros(4, np.float16), popxl.float16)
        g = popxl.constant(np.full(4, 1.0, np.float16), popxl.float16)
        ops.var_updates.accumulate_moving_average_(m, g, 0.9)
        ops.var_updates.accumulate_moving_average_square_(v, g, 0.999)
    with popxl.Session(ir, "cpu") as s:
        s.run()
        first, second = s.get_tensor_data(m), s.get_tensor_data(v)
    assert set(first.tolist()) <= {float(np.float16(0.1)), 0.1}
    assert first[0] != float(np.float16(1) - np.float16(0.9))
    np.testing.assert_allclose(second, np.float16(1 - np.float32(0.999)), rtol=1e-3)
