"""Names are data, never code (issue 22, item 1).

User text given as a name (a variable, constant, graph, stream, ``name_scope`` or op name) used
to be copied into comments of the generated Python source, so a name holding a newline ran
arbitrary Python at ``Session()``. These tests build one program with arbitrary Unicode names on
every backend (the numpy codegen, numba, the ``optimize=False`` interpreter, the ipu_model) and
check that it computes what the same program with plain names computes, and that the generated
source, the DOT text and the report plot treat the names as data.

The Hypothesis search is derandomised with a fixed budget (``XL_NAME_EXAMPLES``, default 60) so
CI stays well under 30 s.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import xlgraph as popxl
from xlgraph import ops
from xlgraph.lower import annotate, codegen

F32 = popxl.float32
EXAMPLES = int(os.environ.get("XL_NAME_EXAMPLES", 60))
PAYLOAD = "w\n    import os; os._exit(3)  #"  # a name that, pasted into a comment, runs code
ROLES = ("variable", "constant", "graph", "h2d", "d2h", "scope", "op")
BACKENDS = [  # (device, optimize, backend)
    ("cpu", True, "numpy"), ("cpu", True, "numba"), ("cpu", False, "numpy"),
    ("ipu_model", True, "numpy"),
]
NASTY = ["\n", "\r\n", '"""', "'''", "\\", "\x00", "\x1b[2J", "\u2028", "\ud800", "# -*- coding: "
         "latin-1 -*-", "\t\f\v", "{}%s", "$\\frac{$", "../../x", "é中文", "\U0001F600"]


@dataclass
class Program:
    ir: popxl.Ir
    xs: popxl.HostToDeviceStream
    ys: popxl.DeviceToHostStream
    w: popxl.Variable


def build(names: dict[str, str]) -> Program:
    """One program touching every named thing: a variable updated in place, a constant, a
    subgraph (called once and repeated) named ``names["graph"]``, a ``conditional``, streams, a
    name scope and a named op."""
    ir = popxl.Ir()
    spec = popxl.TensorSpec((4,), F32)

    def body(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return x * w + 1.0

    def other(x: popxl.Tensor) -> popxl.Tensor:
        return x - 2.0

    body.__qualname__ = names["graph"]
    other.__qualname__ = names["graph"]
    with ir.main_graph:
        xs = popxl.h2d_stream((4,), F32, names["h2d"])
        ys = popxl.d2h_stream((4,), F32, names["d2h"])
        w = popxl.variable(np.arange(4, dtype=np.float32) / 4, F32, names["variable"])
        c = popxl.constant(np.array([0.5, -1.0, 2.0, 3.0], np.float32), F32, names["constant"])
        g = ir.create_graph(body, spec, spec)
        h = ir.create_graph(other, spec)
        with popxl.name_scope(names["scope"]):
            x = ops.host_load(xs)
            z = ops.init((4,), F32, names["op"])
            (y,) = ops.call(g, x, w)
            (y,) = ops.repeat(h, 2, y + c + z)
            positive = ops.greater(ops.sum(x), popxl.constant(0.0, F32))
            (y,) = ops.conditional(positive, h, h, [y], [y * 2.0])
            ops.var_updates.accumulate_(w, y)
        ops.host_store(ys, y)
    return Program(ir, xs, ys, w)


def run(program: Program, device: str, optimize: bool, backend: str) -> tuple[np.ndarray, ...]:
    session = popxl.Session(program.ir, device, optimize=optimize, backend=backend,
                            compile_in_background=False)
    data = np.array([1.0, -2.0, 3.0, 0.25], np.float32)
    with session:
        outs = [session.run({program.xs: data})[program.ys] for _ in range(2)]
    if optimize:
        source = session.source
        assert all(line.isprintable() for line in source.split("\n"))
    if device == "ipu_model":
        assert session.report().to_json()  # names are JSON strings in the report
    return (*outs, session.get_tensor_data(program.w))


PLAIN = {role: role for role in ROLES}


@functools.cache
def expected(key: tuple[str, bool, str]) -> tuple[np.ndarray, ...]:
    return run(build(PLAIN), *key)


def names_strategy() -> st.SearchStrategy[dict[str, str]]:
    text = st.one_of(st.text(max_size=40), st.sampled_from(NASTY),
                     st.text(min_size=1, max_size=4).map(lambda s: s * 2000))
    return st.fixed_dictionaries({role: text for role in ROLES})


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(names_strategy())
@example({role: PAYLOAD for role in ROLES})
@example({role: NASTY[i % len(NASTY)] for i, role in enumerate(ROLES)})
@example({role: '"""\x00\\' * 3 for role in ROLES})
def test_any_names_compute_what_plain_names_compute(names: dict[str, str]) -> None:
    program = build(names)
    dot = program.ir.to_dot()
    assert all(line.isprintable() for line in dot.split("\n"))
    assert names["variable"] in str(program.ir)  # listings keep the real name
    for key in BACKENDS:
        got = run(build(names), *key)
        for a, b in zip(got, expected(key), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_name_holding_code_does_not_run_it() -> None:
    """The exploit: a variable name with a newline and an indented statement. Before the fix the
    subprocess exited with status 3 at ``Session()``; now it prints the result."""
    script = f"""
import numpy as np, xlgraph as popxl
from xlgraph import ops
ir = popxl.Ir()
with ir.main_graph:
    x = popxl.h2d_stream((2,), popxl.float32, {PAYLOAD!r})
    w = popxl.variable(np.ones(2, np.float32), popxl.float32, {PAYLOAD!r})
    with popxl.name_scope({PAYLOAD!r}):
        y = ops.host_load(x) * w
    out = popxl.d2h_stream((2,), popxl.float32, {PAYLOAD!r})
    ops.host_store(out, y)
with popxl.Session(ir, backend="numpy") as s:
    print(s.run({{x: np.full(2, 3.0, np.float32)}})[out].tolist())
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 3.0]"


def test_the_real_name_stays_in_the_comment_escaped() -> None:
    program = build({**PLAIN, "variable": "w\nb"})
    source = popxl.Session(program.ir, backend="numpy").source
    assert "%w\\nb" in source and "%w\nb" not in source


def test_generated_source_with_a_raw_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line of defence: a comment that escaped nothing is caught before ``exec``."""
    monkeypatch.setattr(annotate, "comment", lambda text: f"# {text}")
    program = build({**PLAIN, "variable": PAYLOAD})
    with pytest.raises(AssertionError, match="non-printable"):
        popxl.Session(program.ir, backend="numpy")


def test_attribute_names_that_are_not_identifiers_are_passed_as_data() -> None:
    writer = codegen._Writer.__new__(codegen._Writer)
    writer.namespace = {}
    text = writer.attr_text({"x\n import os": 1, "lambda": 2})
    assert text == ", **attrs" and writer.namespace["attrs"] == {"x\n import os": 1, "lambda": 2}


def test_dot_checkpoint_keeps_the_file_in_save_dir(tmp_path) -> None:
    ir = build(PLAIN).ir
    ir.session_options.dotChecks = ["ALL"]  # PopXL writes only the checks asked for
    path = ir.dot_checkpoint("../../escape\n", tmp_path / "dots")
    assert path.parent == tmp_path / "dots" and path.name == ".._.._escape__.dot"
    assert path.read_text() == ir.main_graph.to_dot()


def test_report_plot_shows_names_as_text(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    program = build({**PLAIN, "graph": "$\\frac{$\n"})
    session = popxl.Session(program.ir, "ipu_model", backend="numpy")
    assert session.report().plot(tmp_path / "r.png").stat().st_size > 0
