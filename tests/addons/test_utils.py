"""``popxl_addons.utils`` and the debug printers."""

from __future__ import annotations

import logging
import sys
import types

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph.addons import utils


def test_ordered_dict_and_weights_dict():
    d = addons.OrderedDict(a=1, b=2)
    assert d.idx(1) == 2 and repr(d) == "{\n  'a': 1,\n  'b': 2,\n}"
    assert repr(addons.OrderedDict()) == "{}"
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        v = popxl.variable(np.zeros((2, 3), np.float32), name="v",
                           replica_grouping=ir.replica_grouping(group_size=2))
    w = addons.WeightsDict()
    w[v] = np.ones((2, 3), np.float32)  # host shape: one value per group
    with pytest.raises(ValueError, match="dtype"):
        w[v] = np.ones((2, 3), np.float64)
    with pytest.raises(ValueError, match="shape"):
        w[v] = np.ones(3, np.float32)
    assert list(w) == [v] and not isinstance(w, dict)


def test_small_helpers():
    assert utils.suffix_graph_name("fwd_subgraph(3)", "grad") == "fwd_grad"
    assert utils.suffix_graph_name("fwd", "grad") == "fwd_grad"
    assert utils.duplicate_items([3, 1, 3, 2, 1, 3]) == [3, 1]

    class Base:
        def f(self):
            pass

    class Same(Base):
        pass

    class Other(Base):
        def f(self):
            pass

    assert utils.overrides(Other, Base, "f") and not utils.overrides(Same, Base, "f")
    with utils.null_context():
        pass


def test_timer_logs_minutes_and_records_in_an_active_wandb_run(caplog, monkeypatch):
    run = types.SimpleNamespace(summary={})
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(run=run))
    with caplog.at_level(logging.INFO, logger="popxl_addons"):
        with addons.timer("Model Build"):
            pass
    assert "Starting: Model Build" in caplog.text and "mins" in caplog.text
    assert run.summary["model_build_mins"] == pytest.approx(0, abs=0.01)
    with addons.timer("quiet", log_to_wandb=False):
        pass
    assert "quiet_mins" not in run.summary


def test_print_tensor_and_text_follow_model_log_level(monkeypatch):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        monkeypatch.delenv("MODEL_LOG_LEVEL", raising=False)
        assert addons.print_tensor(x) is x  # INFO by default: DEBUG prints are off
        addons.print_text("off")
        before = len(ir.main_graph.ops)
        monkeypatch.setenv("MODEL_LOG_LEVEL", "DEBUG")
        assert addons.print_tensor(x, title="x") is not x
        addons.print_text("on", 3)
        assert len(ir.main_graph.ops) == before + 2
        monkeypatch.setenv("MODEL_LOG_LEVEL", "LOUD")
        with pytest.raises(ValueError, match="log level"):
            addons.print_tensor(x)
