"""Errors that tell the user what to do next."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.errors import AutodiffError
from xlgraph.transforms import autodiff

SPEC = popxl.TensorSpec((2,), popxl.float32)


@pytest.mark.parametrize("update, twin", [
    (lambda x, y: ops.scaled_add_(x, y, b=0.1), "scaled_add"),
    (lambda x, y: ops.add_(x, y), "add"),
])
def test_autodiff_in_place_refusal_names_the_out_of_place_op(update, twin):
    ir = popxl.Ir()

    def step(x, y):
        update(x, y)
        return ops.mul(x, y)

    with ir.main_graph:
        graph = ir.create_graph(step, SPEC, SPEC)
    with pytest.raises(AutodiffError) as info:
        autodiff(graph)
    message = str(info.value)
    assert f"Fix: use ops.{twin}(...), which returns a new tensor" in message
    assert "in the calling graph" in message


def test_no_current_graph_says_which_context_to_open():
    with pytest.raises(RuntimeError, match=r"no current graph.*`with ir\.main_graph:`"):
        popxl.variable(np.zeros(2), popxl.float32)
