"""Seeing programs: Ir and graph listings, what call sites modify, DOT export, annotated source."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.ops as ops
from xlgraph.core import listing

F32 = popxl.float32


def _sgd_loop_ir(by_ref: bool, mark: bool) -> popxl.Ir:
    """A repeat whose body updates ``w`` and ``b`` in place through a nested call."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((3, 2), np.float32), name="w")
        b = popxl.variable(np.zeros((2,), np.float32), name="b")
        x = popxl.variable(np.ones((4, 3), np.float32), name="x")

    def update(p: popxl.Tensor, g: popxl.Tensor) -> None:
        ops.scaled_add_(p, g, b=-0.1)

    upd = ir.create_empty_graph("update")
    with upd:
        p = popxl.graph_input((3, 2), F32, "p", by_ref=True)
        g = popxl.graph_input((3, 2), F32, "g")
        update(p, g)
    body = ir.create_empty_graph("body")
    with body:
        wi = popxl.graph_input((3, 2), F32, "w", by_ref=by_ref)
        bi = popxl.graph_input((2,), F32, "b", by_ref=by_ref)
        xi = popxl.graph_input((4, 3), F32, "x")
        y = xi @ wi + bi
        ops.call(upd, wi, ops.transpose(xi) @ y)
        ops.scaled_add_(bi, ops.sum(y, 0), b=-0.1)
        ops.relu_(xi)  # writes the body's copy of x only
    with ir.main_graph:
        site = ops.repeat_with_info(body, 2, w, b, x)
        if mark:
            site.set_parent_input_modified(w)
            site.set_parent_input_modified(b)
    return ir


@pytest.mark.parametrize("by_ref, mark", [(True, False), (False, True)])
def test_repeat_listing_names_the_inputs_its_body_modifies(by_ref: bool, mark: bool) -> None:
    ir = _sgd_loop_ir(by_ref, mark)
    text = str(ir.main_graph)
    line = next(x for x in text.splitlines() if "repeat" in x)
    assert "modifies=[%w, %b]" in line and "writes_copy_of=[%x]" in line
    assert "modified=" not in line
    body = ir.graphs[2]
    assert {t.name for t in listing.modified_inputs(body)} == {"w", "b", "x"}
    call_line = next(x for x in str(body).splitlines() if "call" in x)
    assert "modifies=[%w]" in call_line  # the nested callee's input is by_ref


def test_a_body_that_writes_nothing_shows_no_modifications() -> None:
    ir = _sgd_loop_ir(by_ref=False, mark=False)
    line = next(x for x in str(ir.main_graph).splitlines() if "repeat" in x)
    assert "modifies=" not in line and "writes_copy_of=[%w, %b, %x]" in line


def test_conditional_listing_names_modified_inputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        flag = popxl.variable(np.array(True), popxl.bool, name="flag")
        w = popxl.variable(np.ones((2,), np.float32), name="w")
        then_g = ir.create_empty_graph("then")
        with then_g:
            t = popxl.graph_input((2,), F32, "t", by_ref=True)
            ops.relu_(t)
        else_g = ir.create_empty_graph("else")
        with else_g:
            popxl.graph_input((2,), F32, "e")
        ops.conditional(flag, then_g, else_g, then_inputs=[w], else_inputs=[w])
    line = next(x for x in str(ir.main_graph).splitlines() if "conditional" in x)
    assert "modifies=[%w]" in line


def test_print_ir_lists_every_graph() -> None:
    ir = _sgd_loop_ir(by_ref=True, mark=False)
    ir.num_host_transfers = 3
    text = str(ir)
    assert text.startswith(f"Ir[id={ir.id}] num_host_transfers=3 replication_factor=1")
    starts = [text.index(f"graph {g.name}(") for g in ir.graphs]
    assert starts == sorted(starts) and len(starts) == 3
    assert "%w:f32[3,2] by_ref" in text
    assert repr(ir) == f"Ir[id={ir.id}]"


def _dot_nodes_and_edges(dot: str) -> tuple[set[str], list[tuple[str, str]]]:
    nodes = set(re.findall(r"^\s*(\w+) \[", dot, re.M))
    edges = re.findall(r"^\s*(\w+) -> (\w+) ", dot, re.M)
    return nodes, edges


def test_graph_to_dot_has_a_node_per_op_and_named_edges() -> None:
    ir = _sgd_loop_ir(by_ref=True, mark=False)
    body = ir.graphs[2]
    dot = body.to_dot()
    assert dot.startswith(f'digraph "{body.name}" {{') and dot.rstrip().endswith("}")
    nodes, edges = _dot_nodes_and_edges(dot)
    assert sum(n.startswith("nop") for n in nodes) == len(body.ops)
    assert all(a in nodes and b in nodes for a, b in edges)
    assert '[label="%w"]' in dot and 'label="matmul"' in dot
    assert "f32[4,3]" in dot  # the input x with its spec


def test_ir_to_dot_clusters_every_graph_and_draws_calls() -> None:
    ir = _sgd_loop_ir(by_ref=True, mark=False)
    dot = ir.to_dot()
    assert dot.count("subgraph cluster_") == len(ir.graphs)
    for g in ir.graphs:
        assert f'label="{g.name}";' in dot
    nodes, edges = _dot_nodes_and_edges(dot)
    assert all(a in nodes and b in nodes for a, b in edges)
    calls = re.findall(r"^\s*(\w+) -> (\w+) \[style=dashed", dot, re.M)
    assert len(calls) == 2  # main -> body (repeat), body -> update (call)
    assert dot.count("{") == dot.count("}")


def test_to_dot_writes_dot_files_and_renders_with_graphviz(tmp_path: Path,
                                                            monkeypatch) -> None:
    ir = _sgd_loop_ir(by_ref=True, mark=False)
    text = ir.to_dot(tmp_path / "ir.dot")
    assert (tmp_path / "ir.dot").read_text() == text
    calls = []
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, **kw: calls.append((cmd, kw["input"])))
    ir.main_graph.to_dot(tmp_path / "main.svg")
    assert calls == [(["/usr/bin/dot", "-Tsvg", "-o", str(tmp_path / "main.svg")],
                      ir.main_graph.to_dot())]
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs Graphviz's `dot` program"):
        ir.to_dot(tmp_path / "ir.png")


def test_session_source_names_ir_tensors_constants_and_views() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = ops.host_load(xs := popxl.h2d_stream((4, 8), F32, "x"))
        w = popxl.variable(np.full((8, 8), 0.1, np.float32), name="w")
        scale = popxl.constant(np.float32(2.0), name="two") * 0.5
        linear = ir.create_graph(lambda a, b: ops.gelu(a @ b), x, w)
        (y,) = ops.call(linear, x, w)
        y = y + scale
        ops.scaled_add_(w, ops.transpose(x) @ y, b=-0.01)
        ops.host_store(popxl.d2h_stream((32,), F32, "y"), y.reshape((32,)))
    session = popxl.Session(ir)
    src = session.source
    assert "# constant c" in src and "%mul:f32[], folded" in src
    assert re.search(r"# view v\d+ = %reshape:f32\[32\], a reshape view of b\d+", src)
    assert re.search(r"= V  # %w$", src, re.M)
    assert re.search(r"  # \S*<lambda>_subgraph\(0\): %matmul:f32\[4,8\] = matmul %a %b$", src,
                     re.M)  # an op inlined from a subgraph names it
    assert "# %scaled_add_:f32[8,8] = scaled_add_ %w %matmul" in src
    code = [line for line in src.splitlines() if line.startswith("    ") and
            ("o_" in line or "k_" in line)]
    assert code and all("  # " in line and "%" in line for line in code)
    with session:
        session.run({xs: np.ones((4, 8), np.float32)})  # the annotated source runs
