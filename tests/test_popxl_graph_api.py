"""PopXL's graph and tensor API beyond the core: hooks, TensorByRef, placement scopes, session
options, and the host helpers of ``random_seed`` and ``utils``."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import errors, ops, transforms
from xlgraph.random_seed import two_uint32_to_uint64, uint64_to_two_uint32
from xlgraph.testing import run_once
from xlgraph.utils import table_to_string, to_numpy

F32 = popxl.float32


def test_op_created_hooks_see_each_op_until_removed() -> None:
    ir = popxl.Ir()
    seen: list[str] = []
    main = ir.main_graph
    handle = main.register_op_created_hook(lambda op: seen.append(op.defn.name))
    other = main.register_op_created_hook(lambda op: seen.append("other"))
    with main:
        x = popxl.variable(np.ones(3, np.float32))
        y = ops.relu(x)
        main.remove_op_created_hook(other)
        ops.exp(y)
        main.remove_op_created_hook(handle)
        ops.log(y)
    assert seen == ["relu", "other", "exp"]
    with pytest.raises(KeyError, match="no op-created hook"):
        main.remove_op_created_hook(handle)


def test_graph_ids_are_unique_names() -> None:
    ir = popxl.Ir()

    def f(x):
        return x + 1

    spec = popxl.TensorSpec((2,), F32)
    g0, g1 = ir.create_graph(f, spec), ir.create_graph(f, spec)
    assert g0.id != g1.id and {g0.id, g1.id} == {g0.name, g1.name}
    assert ir.main_graph.id == ir.main_graph.id


def test_tensor_by_ref_annotation_makes_the_input_by_reference() -> None:
    def bump(x: popxl.TensorByRef, y):
        ops.add_(x, y)

    def bump_all(xs: list[popxl.TensorByRef]):
        for x in xs:
            ops.add_(x, 1.0)

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        b = popxl.variable(np.zeros(2, np.float32), name="b")
        g = ir.create_graph(bump, a, a)
        assert [t.by_ref for t in g.inputs] == [True, False]
        ops.call(g, a, popxl.constant(np.full(2, 3.0, np.float32)))
        many = ir.create_graph(bump_all, [a, b])
        assert all(t.by_ref for t in many.inputs)
        ops.call(many, a, b)
    with pytest.raises(TypeError, match="annotation"):
        popxl.TensorByRef()
    session = popxl.Session(ir)
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(a), [4, 4])
    np.testing.assert_array_equal(session.get_tensor_data(b), [1, 1])


def test_io_tiles_and_io_tile_copy_place_tensors_without_changing_values() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((4,), F32, "x")
        y_s = popxl.d2h_stream((4,), F32, "y")
        with popxl.io_tiles():
            x_io = ops.host_load(x_s)
            assert x_io.tile_set == "io"
        x = ops.io_tile_copy(x_io)
        y = ops.relu(x)
        assert (x.tile_set, y.tile_set) == ("compute", "compute")
        with popxl.io_tiles():
            y_io = ops.io_tile_copy(y)
        assert y_io.tile_set == "io" and y_io.producer.hints["tile_set"] == "io"
        ops.host_store(y_s, y_io)
    data = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(run_once(ir, {x_s: data})[y_s], np.maximum(data, 0))


def test_exchange_scopes_group_transfers() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        streams = [popxl.h2d_stream((2,), F32, f"s{i}") for i in range(3)]
        out = popxl.d2h_stream((2,), F32, "out")
        with transforms.merge_exchange():
            a, b = ops.host_load(streams[0]), ops.host_load(streams[1])
        with transforms.io_tile_exchange():
            c = ops.host_load(streams[2])
        ops.host_store(out, a + b + c)
    group = {t.producer.hints.get("exchange_group") for t in (a, b)}
    assert len(group) == 1 and None not in group
    assert c.producer.hints["exchange_group"] not in group and c.tile_set == "io"
    assert c.producer.region is None  # in_sequence(False) inside io_tile_exchange
    feeds = {s: np.full(2, i + 1.0, np.float32) for i, s in enumerate(streams)}
    np.testing.assert_array_equal(run_once(ir, feeds)[out], [6, 6])


def test_decompose_sum_leaves_gradient_add_chains_and_values_alone() -> None:
    ir = popxl.Ir()

    def fan(x):
        return x * x + ops.exp(x) + ops.sin(x)  # three uses: three partial gradients

    g = ir.create_graph(fan, popxl.TensorSpec((3,), F32))
    info = transforms.autodiff(g)
    before = [op.defn.name for op in info.graph.ops]
    assert transforms.decompose_sum(info.graph) is info.graph
    assert [op.defn.name for op in info.graph.ops] == before
    assert all(len(op.inputs) == 2 for op in info.graph.ops if op.defn.name == "add")
    with pytest.raises(TypeError, match="expects a Graph"):
        transforms.decompose_sum("graph")


def test_gather_out_of_range_gives_zeros_with_or_without_zero_oor() -> None:
    """Past the end: zeros either way; negative: zero rows with ``zero_OOR`` (PopART masks
    ``0 <= i < n``), from the end without it (undefined in PopXL)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([0, 7, -1, -9], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x)
        i = popxl.variable(idx)
        outs = [popxl.d2h_stream((4, 4), F32, f"o{z}") for z in (0, 1)]
        for s, zero in zip(outs, (False, True)):
            ops.host_store(s, ops.gather(t, i, zero_OOR=zero, available_memory_proportion=0.3))
    got = run_once(ir)
    np.testing.assert_array_equal(got[outs[0]], np.stack([x[0], np.zeros(4), x[2], np.zeros(4)]))
    np.testing.assert_array_equal(got[outs[1]], np.stack([x[0], np.zeros(4), np.zeros(4),
                                                          np.zeros(4)]))


# -- session options -------------------------------------------------------------------------
def test_session_options_record_known_names_and_suggest_for_typos() -> None:
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    assert opts is ir.session_options and opts.numIOTiles == 0 and not opts.aliasZeroCopy
    opts.aliasZeroCopy = True
    opts.engineOptions["debug.retainDebugInformation"] = "false"
    opts.executionPhaseSettings.phases = 2
    opts.numIOTiles = 32
    assert opts.changed == {"aliasZeroCopy", "numIOTiles"}
    assert opts.executionPhaseSettings.phases == 2 and "numIOTiles=32" in repr(opts)
    assert popxl.Ir().session_options.engineOptions == {}  # defaults are per Ir
    with pytest.raises(AttributeError, match="did you mean enableStochasticRounding"):
        opts.enableStochasticRoundng = True
    with pytest.raises(AttributeError, match="not a PopART session option"):
        _ = opts.noSuchThing


def _dividing_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(2, np.float32), name="w")
        x_s = popxl.h2d_stream((2,), F32, "x")
        ops.var_updates.copy_var_update_(w, w / ops.host_load(x_s))
    return ir, w, x_s


def test_floating_point_checks_trap_and_leave_variables_unchanged() -> None:
    ir, w, x_s = _dividing_ir()
    zeros = np.zeros(2, np.float32)
    with popxl.Session(ir) as session, np.errstate(divide="ignore"):
        session.run({x_s: zeros})  # checks off: inf, no error
        assert np.isinf(session.get_tensor_data(w)).all()
    ir, w, x_s = _dividing_ir()
    ir.session_options.enableFloatingPointChecks = True
    with popxl.Session(ir) as session:
        with pytest.raises(errors.ExecutionError, match="div"):
            session.run({x_s: zeros})
        np.testing.assert_array_equal(session.get_tensor_data(w), [1, 1])
        session.run({x_s: np.full(2, 2.0, np.float32)})
        np.testing.assert_array_equal(session.get_tensor_data(w), [0.5, 0.5])


def test_disabling_inplace_ambiguity_checking_runs_in_creation_order() -> None:
    def build():
        ir = popxl.Ir()
        with ir.main_graph:
            w = popxl.variable(np.ones(2, np.float32), name="w")
            ops.var_updates.accumulate_(w, popxl.constant(np.ones(2, np.float32)))
            ops.var_updates.accumulator_scale_(w, 3.0)
        return ir, w

    ir, _ = build()
    with pytest.raises(errors.SchedulingError, match="nothing orders them"):
        popxl.Session(ir)
    ir, w = build()
    ir._pb_ir.getSessionOptions().enableInplaceAmbiguityChecking = False
    session = popxl.Session(ir)
    with session:
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(w), [6, 6])


def test_weights_come_to_the_host_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, w, x_s = _dividing_ir()
    session = popxl.Session(ir, weights_to_host_on_exit=False)
    assert session.ir is ir and session.device.name == "cpu"
    calls = []
    real = session._to_host  # the copy weights_to_host and stale reads both make
    monkeypatch.setattr(session, "_to_host", lambda: (calls.append(1), real()))
    with session:
        for _ in range(2):
            session.run({x_s: np.full(2, 2.0, np.float32)})
            for _ in range(3):
                session.get_tensor_data(w)
            session.get_tensors_data([w])
    assert len(calls) == 2  # one transfer per run, none on exit
    np.testing.assert_array_equal(session.get_tensor_data(w), [0.25, 0.25])


# -- host helpers ------------------------------------------------------------------------------
def test_seed_words_round_trip() -> None:
    key = (123 << 32) | 456
    words = uint64_to_two_uint32(key)
    assert words.dtype == np.uint32 and words.tolist() == [123, 456]
    assert two_uint32_to_uint64(words) == key
    seeds = popxl.random_seed.create_seeds(5, batches_per_step=3)
    assert seeds.shape == (3, 2) and popxl.create_seeds is popxl.random_seed.create_seeds
    with pytest.raises(ValueError, match="not a uint64"):
        uint64_to_two_uint32(-1)


def test_to_numpy_follows_popxl_host_rules() -> None:
    assert to_numpy([1.5, 2.0]).dtype == np.float32
    assert to_numpy(np.arange(3)).dtype == np.int32  # int64 downcast
    assert to_numpy(np.arange(3), downcast=False).dtype == np.int64
    assert to_numpy([1, 2], popxl.float16).dtype == np.float16
    src = np.ones(2, np.float32)
    assert to_numpy(src, copy=False) is not None and to_numpy(src) is not src
    with popxl.Ir().main_graph:
        c = popxl.constant(1.0)
        with pytest.raises(TypeError, match="graph tensor"):
            to_numpy(c)


def test_table_to_string_aligns_columns() -> None:
    text = table_to_string([["name", "shape"], ["w", "(784, 32)"], ["bias", "(32,)"]])
    assert text.splitlines() == ["name | shape", "----------------",
                                 "w    | (784, 32)", "bias | (32,)"]


def test_remote_code_load_checks_arguments_and_adds_nothing() -> None:
    ir = popxl.Ir()
    g = ir.create_graph(lambda x: x + 1, popxl.TensorSpec((2,), F32))
    with ir.main_graph:
        ops.remote_code_load(g, "executable")
        with pytest.raises(ValueError, match="executable"):
            ops.remote_code_load(g, "onchip")
        with pytest.raises(TypeError, match="Graph"):
            ops.remote_code_load("g", "executable")
    assert ir.main_graph.ops == []


def test_ipu_placement_is_recorded_and_checked() -> None:
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(2):
            y = x + 1.0
            z = ops.ipu_copy(y, 3)
        assert (x.ipu, y.ipu, z.ipu) == (0, 2, 3) and z.producer.hints["source_ipu"] == 2
        with pytest.raises(ValueError, match="non-negative int"):
            ops.ipu_copy(y, -1)
        with pytest.raises(ValueError, match="non-negative int"):
            popxl.ipu("0")


def test_tensor_scope_meta_shape_and_diag(tmp_path) -> None:
    wide = np.arange(12, dtype=np.float32).reshape(3, 4)
    tall = wide.T.copy()
    ir = popxl.Ir()
    with ir.main_graph:
        w, t = popxl.variable(wide), popxl.variable(tall)
        with popxl.name_scope("block"):
            dw, dt = w.diag(), t.diag()
        assert (dw.scope, w.scope, dw.meta_shape) == ("block", "", ())
        streams = [popxl.d2h_stream((3,), F32, n) for n in ("dw", "dt")]
        for s, d in zip(streams, (dw, dt)):
            ops.host_store(s, d)
        with pytest.raises(ValueError, match="2-D"):
            popxl.variable(np.ones(3, np.float32)).diag()
    ir._pb_ir.getSessionOptions().dotChecks = {"other"}
    assert ir.dot_checkpoint("after_build", tmp_path / "dots") is None  # not asked for
    ir._pb_ir.getSessionOptions().dotChecks = {"after_build"}
    path = ir.dot_checkpoint("after_build", tmp_path / "dots")
    assert path == tmp_path / "dots" / "after_build_.dot" and "digraph" in path.read_text()
    got = run_once(ir)
    np.testing.assert_array_equal(got[streams[0]], np.diag(wide))
    np.testing.assert_array_equal(got[streams[1]], np.diag(tall))
