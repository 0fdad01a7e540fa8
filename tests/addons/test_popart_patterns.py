"""PopART's pattern calls as popxl-addons programs make them (accepted, no effect on the
simulator), and the identity-replaceable collectives computing their result without them."""

from __future__ import annotations

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from xlgraph.addons.patterns import apply_pre_alias_patterns
from xlgraph.popart_compat._internal import ir as _ir
from xlgraph.transforms import autodiff


def _program():
    """Two replicas: ``y = identical_inputs(x)`` and ``z = identical_grad_inputs(x)``, each
    differentiated with PopXL's own autodiff (which runs no pattern)."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x_stream = popxl.h2d_stream((3,), popxl.float32, "x")
        x = ops.host_load(x_stream)
        outs = []
        for fn in (replicated_all_reduce_identical_inputs,
                   replicated_all_reduce_identical_grad_inputs):
            graph = ir.create_graph(fn, x)
            info = autodiff(graph)
            (y,) = ops.call(graph, x)
            (dx,) = ops.call(info.graph, x * 2.0)  # the seed differs on each replica
            outs += [addons.host_store(y), addons.host_store(dx)]
    return ir, x_stream, outs


def _run(ir, x_stream, outs):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with popxl.Session(ir, "cpu") as s:
        res = s.run({x_stream: data})
    return data, [res[o] for o in outs]


def test_identity_replaceable_collectives_compute_without_patterns():
    data, (y, dy, z, dz) = _run(*_program())
    total = data.sum(0)
    np.testing.assert_allclose(y, data)  # forward of identical_inputs: identity
    np.testing.assert_allclose(dy, [2 * total, 2 * total])  # its gradient: the sum
    np.testing.assert_allclose(z, [total, total])  # identical_grad_inputs: the sum
    np.testing.assert_allclose(dz, 2 * data)  # its gradient: identity


def test_pattern_calls_are_accepted_with_no_effect():
    ir, x_stream, outs = _program()
    patterns = _ir.patterns.Patterns(_ir.patterns.PatternsLevel.Default)
    assert patterns.enableRuntimeAsserts(False) is patterns and not patterns.runtime_asserts
    ir._pb_ir.setPatterns(patterns)
    assert ir._pb_ir.getPatterns() is patterns
    assert [lvl.name for lvl in _ir.patterns.PatternsLevel] == ["NoPatterns", "Minimal",
                                                               "Default", "All"]
    counts = [len(g.getOps()) for g in ir._pb_ir.getAllGraphs()]
    for pb_graph in ir._pb_ir.getAllGraphs():
        ir._pb_ir.applyPreAliasPatterns(pb_graph)
        ir._pb_ir.applyInplacePattern(pb_graph)
    apply_pre_alias_patterns(ir, level="default")
    assert [len(g.getOps()) for g in ir._pb_ir.getAllGraphs()] == counts
    data, (y, dy, z, dz) = _run(ir, x_stream, outs)
    np.testing.assert_allclose(y, data)
    np.testing.assert_allclose(z, [data.sum(0)] * 2)
