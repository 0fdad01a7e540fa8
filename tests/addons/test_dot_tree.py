"""``popxl_addons.dot_tree`` and the trees built on it, as programs use them."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph.addons.dot_tree import DotTree, sanitise, to_mapping


def tree() -> DotTree:
    return DotTree.from_dict({"fc1.weight": 1, "fc1.bias": 2, 0: "a", 1: "b", 10: "c"})


def test_keys_segments_and_int_keys():
    t = DotTree()
    t.insert(3, "x")
    assert t.keys() == ["3"] and t[3] == "x" and t["3"] == "x"
    for bad in ("a-b", "a..b", "", "1a"):
        with pytest.raises(ValueError, match="segment"):
            t.insert(bad, 0)
    with pytest.raises(ValueError, match="negative"):
        t.insert(-1, 0)


def test_insert_refuses_an_existing_first_segment_unless_overwrite():
    t = DotTree.from_dict({"a.b": 1})
    with pytest.raises(ValueError, match="already has 'a'"):
        t.insert("a.c", 2)  # a new leaf beside an existing subtree: still refused
    t.insert("a.c", 2, overwrite=True)  # subtrees merge
    t.insert("a.b", 5, overwrite=True)  # leaves are replaced
    assert t.to_dict() == {"a.b": 5, "a.c": 2}
    t.insert("a", DotTree(d=4), overwrite=True)
    assert t.to_dict() == {"a.b": 5, "a.c": 2, "a.d": 4}


def test_lookup_by_attribute_key_path_position_and_negative_index():
    t = tree()
    assert t.fc1.weight == 1 and t["fc1"]["bias"] == 2 and t.get("fc1.weight") == 1
    assert t[0] == "a" and t["1"] == "b" and t[-1] == "c"  # -1: the largest numeric key
    with pytest.raises(KeyError):
        t[-2]  # str(10 - 1) is not a key
    with pytest.raises(KeyError):
        t["nope"]
    with pytest.raises(KeyError):
        t.get("fc1.weight.x")  # through a leaf
    with pytest.raises(AttributeError, match="keys"):
        t.nope  # noqa: B018
    with pytest.raises(ValueError, match="numeric"):
        DotTree(a=1)[-1]
    assert "fc1.bias" in t and "fc1.x" not in t and "-1" not in t


def test_no_len_eq_setitem_and_iteration_by_position():
    t = tree()
    with pytest.raises(TypeError):
        len(t)
    assert t.len() == 4 and t.len_flat() == 5
    assert bool(DotTree())  # empty trees are truthy
    assert t != tree()  # identity, no __eq__
    with pytest.raises(TypeError):
        t["x"] = 1
    t.plain = 5  # a plain attribute, not a key
    assert "plain" not in t.to_dict()
    seen = []
    with pytest.raises(KeyError):
        for v in DotTree.from_dict({0: "a", 1: "b"}):
            seen.append(v)
    assert seen == ["a", "b"]


def test_to_dict_depth_first_and_unpack_sorted_as_strings():
    t = DotTree.from_dict({"b.y": 1, "b.x": 2, "a": 3, 2: 4, 10: 5})
    assert t.keys_flat() == ["b.y", "b.x", "a", "2", "10"]
    keys, values = t.unpack()
    assert keys == ("10", "2", "a", "b.x", "b.y") and values == (5, 4, 3, 2, 1)
    assert DotTree().unpack() == ([], [])
    assert DotTree.pack(keys, values).to_dict() == dict(zip(keys, values))
    assert repr(DotTree(a=1)) == "DotTree({'a': 1})"


def test_copy_shares_leaves_update_pop_filter_map_and_clear():
    leaf = [1]
    t = DotTree.from_dict({"a.b": leaf, "c": 2})
    c = t.copy()
    assert c.a is not t.a and c.a.b is leaf
    c.update(DotTree(d=3))
    assert "d" not in t and c.d == 3
    with pytest.raises(ValueError):
        c.update({"c": 9})
    c.update({"c": 9}, overwrite=True)
    assert c.c == 9 and t.c == 2
    assert c.pop("a.b") is leaf and c.a.keys() == []
    assert t.filter_keys(["a.b"]).to_dict() == {"a.b": leaf}
    with pytest.raises(ValueError, match="duplicate"):
        t.filter_keys(["c", "c"])
    assert t.map(lambda v: v if v == 2 else 0).to_dict() == {"a.b": 0, "c": 2}
    sub = t.a
    t._clear()
    assert t.to_dict() == {} and t.a is sub


def test_sanitise_and_to_mapping():
    assert sanitise("layer.0/w") == "layer_0_w" and sanitise("3x") == "_x"
    a, b = DotTree(x=1, y=2), DotTree(y=20, z=30)
    assert to_mapping(a, b) == {2: 20} and a.to_mapping(b) == {2: 20}


def test_named_tensors_sorted_by_tensor_name_and_streams_iterate():
    ir = popxl.Ir()
    with ir.main_graph:
        zb = popxl.variable(np.zeros(2, np.float32), name="b_var")
        za = popxl.variable(np.zeros(2, np.float32), name="a_var")
        named = addons.NamedTensors(first=zb, second=za)
        assert named.tensors == (za, zb)  # by tensor name
        assert list(named.named_tensors) == ["first", "second"]  # by insertion
        swapped = named.remap({za: zb, zb: za})
        assert swapped.second is zb and swapped.first is za
        with pytest.raises(KeyError, match="'first'"):  # 3.4 has no fallback for a missing tensor
            named.remap({za: zb})
        ins = addons.InputStreams(x=((2,), popxl.float32), y=popxl.TensorSpec((3,), popxl.int32))
        assert [s.name for s in ins] == ["x", "y"] and len(ins) == 2
        assert ins[0] is ins.x is ins["x"] and ins[1:] == [ins.y]
        outs = addons.OutputStreams.from_streams([popxl.d2h_stream((), popxl.float32, "loss")])
        assert outs.keys() == ["loss"]


def test_factory_init_draws_in_alphabetical_order_and_probes_once():
    calls = []

    def draw(tag):
        def fn():
            calls.append(tag)
            return np.full(2, len(calls), np.float32)
        return fn

    ir = popxl.Ir()
    with ir.main_graph:
        facts = addons.NamedVariableFactories.from_dict({
            "z": addons.VariableFactory(draw("z")), "a": addons.VariableFactory(draw("a"))})
        assert calls == ["z", "a"]  # probed once each at creation
        variables = facts.init()
    assert calls == ["z", "a", "a", "z"] and variables.keys_flat() == ["a", "z"]
    np.testing.assert_array_equal(variables.a.initial_data, [3, 3])


def test_factory_sources_groups_and_errors():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rows = iter([np.full(3, i, np.float32) for i in range(5)])
        f = addons.VariableFactory(rows, replica_grouping=ir.replica_grouping(group_size=2))
        np.testing.assert_array_equal(f.create_tensor("v").initial_data, [[0] * 3, [1] * 3])
        with pytest.raises(ValueError, match="iterable"):
            addons.VariableFactory(3)
        with pytest.raises(ValueError, match="failed"):
            addons.VariableFactory(lambda: 1 / 0)
        with pytest.raises(ValueError, match="numpy array or a scalar"):
            addons.VariableFactory(lambda: "text")


def test_memmap_variables(tmp_path):
    ir = popxl.Ir()
    with ir.main_graph:
        f = addons.VariableFactory(lambda: np.arange(4, dtype=np.float32))
        v = f.create_tensor("w", memmap_dir=tmp_path)
    assert (tmp_path / "w.npy").exists()
    np.testing.assert_array_equal(np.memmap(tmp_path / "w.npy", np.float32, "r"), np.arange(4))
    assert isinstance(v, popxl.Variable)
