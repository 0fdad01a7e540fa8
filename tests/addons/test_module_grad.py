"""``Module`` with its own ``build_grad`` as popxl-addons 3.4 guards it: ``aux`` and
``var_grad`` usable only inside ``build_grad``, assignments checked at once, the order of the
checks of ``create_grad_graph`` with the phrases programs match, ``autodiff_applied``."""

from __future__ import annotations

import numpy as np
import pytest

import xlgraph as popxl
import xlgraph.addons as addons
from tests.addons.helpers import fetch, run
from xlgraph import ops

SPEC = popxl.TensorSpec((2, 3), popxl.float32)


class Gain(addons.Module):
    """``y = x * s`` over the last axis, with its gradient written by hand."""

    def build(self, x):
        s = self.add_variable_input("s", lambda: np.arange(1, 4, dtype=np.float32), x.dtype)
        self.aux["x"], self.aux["s"] = x, s
        return x * s

    def build_grad(self, dy):
        assert self.aux["x"] is self.aux["x"]  # one gradient-graph input per key
        self.var_grad["s"] = ops.sum(dy * self.aux["x"], 0)
        assert "s" in self.var_grad and self.var_grad["s"].shape == (3,)
        return dy * self.aux["s"]


def _variant(build_grad):
    return type("Variant", (Gain,), {"build_grad": build_grad})


def test_gradient_values_and_seed_named_after_the_parameter():
    ir = popxl.Ir()
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with ir.main_graph:
        facts, fwd = Gain().create_graph(SPEC)
        assert fwd.autodiff_applied is False
        grad = fwd.autodiff()
        assert fwd.autodiff_applied is True
        x = popxl.variable(data, name="x")
        assert grad.graph.inputs[0].name.endswith("dy")
        assert [t.name.split("/")[-1] for t in grad.graph.inputs[1:]] == ["x", "s"]
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        dy = popxl.constant(np.ones((2, 3), np.float32))
        dx, ds = grad.call(dy, args=grad.grad_graph_info.inputs_dict(info))
        streams = fetch(dx, ds)
    got_dx, got_ds = run(ir, streams)
    np.testing.assert_allclose(got_dx, np.tile([1.0, 2.0, 3.0], (2, 1)))
    np.testing.assert_allclose(got_ds, np.arange(6).reshape(2, 3).sum(0))


def test_aux_and_var_grad_are_guarded_outside_build_grad():
    class Reads(addons.Module):
        def build(self, x):
            self.aux["x"] = x
            assert "x" in self.aux
            return self.aux["x"]

    class Writes(addons.Module):
        def build(self, x):
            self.var_grad["w"] = x
            return x

    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(Exception, match="You can only get items within the `build_graph` "
                                            "method"):
            Reads().create_graph(SPEC)
        with pytest.raises(Exception, match=" within the `build_graph` method"):
            Writes().create_graph(SPEC)
    with pytest.raises(Exception, match=" within the `build_graph` method"):
        _ = Gain().var_grad["s"]


@pytest.mark.parametrize("value,error,phrase", [
    ("not a tensor", TypeError, "Not a tensor"),
    ("other", KeyError, "Not a variable"),
    ("shape", ValueError, "Shape or meta-shape of Tensor does not match variable."),
])
def test_var_grad_assignment_checked_at_once(value, error, phrase):
    seen = []

    def build_grad(self, dy):
        try:
            if value == "not a tensor":
                self.var_grad["s"] = 1.0
            elif value == "other":
                self.var_grad["t"] = ops.sum(dy, 0)
            else:
                self.var_grad["s"] = dy
        except Exception as exc:
            seen.append(exc)
            raise

    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = _variant(build_grad)().create_graph(SPEC)
        n_out = len(fwd.graph.outputs)
        with pytest.raises(error, match=phrase):
            fwd.autodiff()
    assert len(seen) == 1  # raised by the assignment itself
    assert len(fwd.graph.outputs) == n_out and not fwd.autodiff_applied


@pytest.mark.parametrize("case,error,phrase", [
    ("no var_grad", Exception, "Not all variable gradients have been specified"),
    ("too many", Exception, "Too many outputs in the grad graph"),
    ("too few", Exception, "Not all forward graph inputs have been specified"),
    ("wrong shape", ValueError, "Shape or meta-shape of output Tensor at position 0"),
    ("kwargs", TypeError, "method signature must only have a fixed number of positional "
                          "parameters as inputs."),
    ("two seeds", ValueError, "do not match the signature"),
])
def test_checks_after_build_grad_in_order(case, error, phrase):
    def body(self, dy):
        if case != "no var_grad":
            self.var_grad["s"] = ops.sum(dy, 0)
        if case == "too many":
            return dy, dy
        if case == "too few":
            return None
        if case == "wrong shape":
            return ops.sum(dy, 0)
        return dy

    if case == "kwargs":
        def build_grad(self, dy, **kw):
            return body(self, dy)
    elif case == "two seeds":
        def build_grad(self, dy, extra):
            return body(self, dy)
    else:
        build_grad = body
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = _variant(build_grad)().create_graph(SPEC)
        graphs, n_out = len(ir.graphs), len(fwd.graph.outputs)
        with pytest.raises(error, match=phrase):
            fwd.autodiff()
        assert len(ir.graphs) == graphs and len(fwd.graph.outputs) == n_out
        fwd.autodiff(method="autodiff")  # the forward graph is untouched: autodiff still works


def test_grads_arguments_method_and_repeated_autodiff():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Gain().create_graph(SPEC)
        x = fwd.graph.inputs[0]
        with pytest.raises(ValueError, match="A Tensor specified in `grads_provided` is not a "
                                             "output of `fwd_graph`"):
            fwd.autodiff(grads_provided=[x])
        with pytest.raises(ValueError, match="A Tensor specified in `grads_required` is not a "
                                             "input of `fwd_graph`"):
            fwd.autodiff(grads_required=fwd.graph.outputs)
        with pytest.raises(ValueError):
            fwd.autodiff(grads_required=[x, x])
        with pytest.raises(ValueError, match="`method` should be one of"):
            fwd.autodiff(method="numeric")
        grad = fwd.autodiff(grads_required=[x])
        assert len(grad.graph.outputs) == 1
        with pytest.raises(Exception, match="Autodiff has already been applied"):
            fwd.autodiff()
        fwd.autodiff(grads_provided=fwd.graph.outputs[:1], force=True)  # aux became outputs
        plain = addons.GraphWithNamedArgs(ir.create_graph(lambda t: t * 2.0, SPEC))
        with pytest.raises(Exception, match="`from_module` is specified"):
            plain.autodiff(method="build_grad")
    with pytest.raises(NotImplementedError):
        addons.Module().build_grad()


def test_create_graph_binding_error_wording():
    ir = popxl.Ir()
    with pytest.raises(ValueError, match="do not match the signature") as err:
        ir.create_graph(lambda a: a, SPEC, SPEC)
    assert isinstance(err.value.__cause__, TypeError)
