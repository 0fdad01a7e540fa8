"""The applications' heads: BERT's masked-LM loss through ``addons.cross_entropy_with_grad``
(logits ``(batch * masked, vocab)`` against labels ``(batch, masked)``, float16 logits giving
a float16 loss) and its pretraining head, whose ``fwd``/``grad`` sub-module containers are
used only for ``add_variable_inputs``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons.layers import Linear
from xlgraph.errors import ShapeError


def _mlm_case(dtype: popxl.dtype, reduction: str, loss_scaling: object):
    rng = np.random.default_rng(3)
    batch, masked, vocab = 2, 3, 11
    logits = rng.normal(0, 2, (batch * masked, vocab)).astype(np.float32)
    labels = rng.integers(0, vocab, (batch, masked)).astype(np.int32)
    labels[1, 2] = 0  # ignore_index: a padded mask position
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(logits.astype(dtype.as_numpy()), dtype)
        lab = popxl.variable(labels)
        scaling = loss_scaling if not callable(loss_scaling) else loss_scaling()
        loss, dx = addons.cross_entropy_with_grad(x, lab, loss_scaling=scaling, ignore_index=0,
                                                  reduction=reduction)
        outs = addons.host_store(loss), addons.host_store(dx)
    session = popxl.Session(ir, "ipu_model")
    with session:
        got = session.run()
    t = torch.tensor(logits.astype(dtype.as_numpy()).astype(np.float32), requires_grad=True)
    want = torch.nn.functional.cross_entropy(t, torch.tensor(labels.reshape(-1)).long(),
                                             ignore_index=0, reduction=reduction)
    want.backward(torch.ones_like(want) * 8.0)
    if reduction == "none":
        want = want.reshape(batch, masked)
    return (loss, dx), [got[s] for s in outs], want.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_mlm_loss_takes_batch_by_masked_labels_for_flat_logits(reduction: str) -> None:
    (loss, dx), (got_loss, got_dx), want, want_dx = _mlm_case(popxl.float32, reduction, 8)
    assert loss.shape == (() if reduction == "mean" else (2, 3)) and dx.shape == (6, 11)
    np.testing.assert_allclose(got_loss, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx, want_dx, rtol=1e-5, atol=1e-6)
    assert not got_dx[5].any()  # the ignored position


def test_float16_logits_give_a_float16_loss_and_gradient_scaled_by_a_tensor() -> None:
    (loss, dx), (got_loss, got_dx), want, want_dx = _mlm_case(
        popxl.float16, "mean", lambda: popxl.constant(8.0, popxl.float32))
    assert loss.dtype == popxl.float16 and dx.dtype == popxl.float16
    assert got_loss.dtype == np.float16 and got_dx.dtype == np.float16
    # softmax and the loss in float16: a few units of float16's 4.9e-4 roundoff
    np.testing.assert_allclose(got_loss, want, rtol=3e-3)
    np.testing.assert_allclose(got_dx, want_dx, atol=3e-3)


def test_nll_loss_still_needs_labels_shaped_like_all_but_the_last_axis() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        probs = popxl.variable(np.full((6, 4), 0.25, np.float32))
        labels = popxl.variable(np.zeros((2, 3), np.int32))
        with pytest.raises(ShapeError, match=r"The label tensor \(.*\) must have shape \(6,\) to "
                           r"match all but the final dimension of the probabilities tensor"):
            ops.nll_loss(probs, labels)
        with pytest.raises(ShapeError, match=r"must have shape 6 items"):
            ops.nll_loss_with_softmax_grad(probs, popxl.variable(np.zeros((5,), np.int32)))


class PretrainingHead(addons.Module):
    """BERT's pretraining head: the masked-LM transform's weights and their gradient
    accumulators are declared through two bare containers, ``fwd`` and ``grad``, that are
    never called."""

    def __init__(self) -> None:
        super().__init__()
        self.fwd = addons.Module()
        self.grad = addons.Module()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        fwd_facts, transform = Linear(4).create_graph(x)
        grad_facts = addons.NamedVariableFactories(**{  # accumulators, updated in place
            name: addons.VariableFactory(lambda f=f: np.zeros(f.shape, np.float32), by_ref=True)
            for name, f in fwd_facts.to_dict().items()})
        weights = self.fwd.add_variable_inputs("mlm", fwd_facts)
        accums = self.grad.add_variable_inputs("mlm", grad_facts)
        (y,) = transform.bind(weights).call(x)
        ops.add_(accums.bias, ops.sum(y, 0))  # a stand-in for the accumulated gradient
        return y


def test_sub_module_containers_used_only_for_add_variable_inputs_bind_and_run() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xt = popxl.variable(x)
        facts, graph = PretrainingHead().create_graph(xt)
        variables = facts.init()
        (y,) = graph.bind(variables).call(xt)
        out = addons.host_store(y)
    names = ["fwd.mlm.weight", "fwd.mlm.bias", "grad.mlm.weight", "grad.mlm.bias"]
    assert sorted(facts.to_dict()) == sorted(names) == sorted(graph.args.to_dict())
    session = popxl.Session(ir, "ipu_model")
    weight = np.random.default_rng(4).normal(size=(3, 4)).astype(np.float32)
    with session:
        session.write_variables_data({variables.fwd.mlm.weight: weight})
        got = session.run()[out]
        bias_acc = session.get_tensor_data(variables.grad.mlm.bias)
    np.testing.assert_allclose(got, x @ weight, rtol=1e-6)
    np.testing.assert_allclose(bias_acc, (x @ weight).sum(0), rtol=1e-5)
