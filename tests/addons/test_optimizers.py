"""``popxl_addons.optimizers.AdamOptimizerStep`` and ``named_replica_grouping``."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph.addons import named_replica_grouping as nrg
from xlgraph.addons.optimizers import AdamOptimizerStep

W0 = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
G = np.array([4.0, -8.0, 2.0, 1.0], np.float32)


def adam_step(**kwargs):
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(W0, name="w")
        g = popxl.variable(G, popxl.float16, name="g")  # a float16 gradient
        norm = kwargs.pop("norm", None)
        extra = []
        if norm is not None:  # a tensor argument: a graph input, passed at the call
            kwargs["global_norm"] = popxl.variable(norm, popxl.float32, name="norm")
            extra.append(kwargs["global_norm"])
        facts, graph = AdamOptimizerStep().create_graph(w, g.spec, lr=0.1, **kwargs)
        state = facts.init()
        graph.bind(state).call(w, g, *extra)
    with popxl.Session(ir, "cpu") as s:
        s.run({})
        return s.get_tensor_data(w), facts


def numpy_adam(grad, b1=0.9, b2=0.999, eps=1e-5, wd=0.01, lr=0.1):
    m, v = (1 - b1) * grad, (1 - b2) * grad ** 2
    m_hat, v_hat = m / (1 - b1), v / (1 - b2)
    return W0 - lr * (m_hat / (np.sqrt(v_hat) + eps) + wd * W0)


@pytest.mark.parametrize("kwargs,c", [({}, 1.0), ({"loss_scaling": 4}, 0.25),
                                      ({"norm": 20.0, "global_norm_max": 5.0}, 0.25),
                                      ({"norm": 2.0, "global_norm_max": 5.0}, 1.0)])
def test_adam_scales_the_gradient_as_the_library(kwargs, c):
    w, facts = adam_step(**kwargs)
    np.testing.assert_allclose(w, numpy_adam(G * c), rtol=2e-3)
    assert facts.first_order.dtype == popxl.float16 and facts.second_order.dtype == popxl.float32
    rg = facts.step.replica_grouping  # given by default, never None
    assert (rg.num_replicas, rg.group_size, rg.num_groups) == (1, 1, 1)


def test_adam_needs_global_norm_max_and_shards_moments_like_the_variable():
    with pytest.raises(ValueError, match="global_norm_max"):
        adam_step(norm=1.0)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        shard = popxl.TensorSpec((4,), popxl.float32, (2, 4))  # a replica shard of (2, 4)
        facts, _ = AdamOptimizerStep().create_graph(shard, shard, lr=0.1)
    assert facts.first_order.shard_over == 2 and facts.first_order.meta_shape == (2, 4)
    assert facts.first_order.shape == (4,)  # one shard, as popxl-addons' factories
    assert facts.first_order.shape_on_replica == (4,)


def test_replica_group_membership_follows_stride_and_size():
    ir = popxl.Ir(replication=8)
    for stride, size in ((1, 8), (2, 2), (2, 4), (1, 2), (4, 2)):
        rg = ir.replica_grouping(stride=stride, group_size=size)
        for r in range(8):
            base = r // (stride * size) * stride * size + r % stride
            members = [base + k * stride for k in range(size)]
            group = next(g for g in rg.groups if r in g)
            assert sorted(group) == members, (stride, size, r)


def test_ild_and_instance_groupings(monkeypatch):
    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 4}')
        assert nrg.get_ild_size_from_popdist() == 4
        big = ir.replica_grouping(stride=1, group_size=8)
        bounded = nrg.get_ild_replica_grouping(big)
        assert bounded.group_size == 4 and bounded.stride == 1 and nrg.is_cross_ild(big)
        small = ir.replica_grouping(stride=2, group_size=2)
        assert nrg.get_ild_replica_grouping(small) is small and not nrg.is_cross_ild(small)
        monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 2}')
        with pytest.raises(ValueError, match="stride"):
            nrg.get_ild_replica_grouping(ir.replica_grouping(stride=4, group_size=2))
        monkeypatch.delenv("POPLAR_TARGET_OPTIONS")
        assert nrg.get_ild_size_from_popdist() == 8
        assert nrg.get_instance_replica_grouping() .group_size == 8  # one instance
        assert not nrg.is_cross_instance()
        named = nrg.NamedReplicaGrouping.build_groups(["a", "b.c"], small)
        assert named.b.c is small and nrg.fill_none_group(None).group_size == 8
