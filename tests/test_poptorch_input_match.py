"""A compiled PopTorch model's later calls matched against the compiled inputs, as PopTorch
words and orders it: dicts (and dict subclasses) by key set, ``**kwargs`` as "named
arguments", ``*args`` by count, and outputs in the caller's dict subclass."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402

_PARAGRAPH = (r"\nThis error occurred because the inputs passed at runtime don't match the "
              r"inputs used to compile the model. To recompile the model for the new inputs "
              r"create a new inferenceModel / trainingModel wrapper or call destroy\(\) on the "
              r"curent one and try again.")


class Batch(collections.OrderedDict):
    """A user's batch type: an OrderedDict subclass."""


class Scores(collections.OrderedDict):
    """A user's output type."""


class ByKey(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(3, 3)

    def forward(self, batch):
        return Scores(z=self.fc(batch["x"]) - batch["y"], w=batch["y"] * 2)


def test_a_dict_with_the_same_keys_in_another_order_is_the_same_input_fed_by_key():
    net = ByKey()
    model = poptorch.inferenceModel(net)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    first = model({"x": x, "y": y})
    again = model({"y": y, "x": x})
    want = net({"x": x, "y": y})
    for out in (first, again):
        torch.testing.assert_close(out["z"], want["z"].detach())
        torch.testing.assert_close(out["w"], want["w"])


def test_dict_subclass_inputs_and_outputs_keep_their_types():
    net = ByKey()
    model = poptorch.inferenceModel(net)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    out = model(Batch(y=y, x=x))
    assert type(out) is Scores and list(out) == ["z", "w"]
    torch.testing.assert_close(out["z"], net(Batch(x=x, y=y))["z"].detach())
    again = model(Batch(x=x, y=y))  # the same keys in another order
    torch.testing.assert_close(again["z"], out["z"])


@pytest.mark.parametrize("batch,words", [
    (lambda x, y: {"x": x}, r"Keys mismatch for batch: Missing arguments: y\."),
    (lambda x, y: {"x": x, "y": y, "z": y, "a": x},
     r"Keys mismatch for batch: Unexpected arguments: a, z\."),
    (lambda x, y: {"x": x, "q": y}, r"Keys mismatch for batch: Unexpected arguments: q\. "
                                    r"Missing arguments: y\."),
    (lambda x, y: {"x": x, "y": y[:1]}, r"Shape mismatch for batch\[y\]: expected "
                                        r"torch.Size\(\[2, 3\]\) but got torch.Size\(\[1, 3\]\)\."),
    (lambda x, y: {"x": x.half(), "y": y}, r"Data type mismatch for batch\[x\]: expected "
                                           r"torch.float32 but got torch.float16\."),
    (lambda x, y: [x, y], r"Type mismatch for batch: expected <class 'dict'> but got "
                          r"<class 'list'>\."),
])
def test_dict_mismatches_are_named_as_popTorch_names_them(batch, words):
    model = poptorch.inferenceModel(ByKey())
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    model({"x": x, "y": y})
    with pytest.raises(poptorch.Error, match=words + _PARAGRAPH):
        model(batch(x, y))


class Keywords(nn.Module):
    def forward(self, x, z=None, **named):
        out = x if z is None else x + z
        return out + sum(named.values()) if named else out


def test_keyword_arguments_are_one_dict_of_named_arguments():
    model = poptorch.inferenceModel(Keywords())
    x = torch.randn(2)
    torch.testing.assert_close(model(x, z=x, m=x, n=2 * x), 5 * x)
    torch.testing.assert_close(model(x, n=2 * x, m=x, z=x), 5 * x)  # keyword order is free
    with pytest.raises(poptorch.Error, match=r"Keys mismatch for named arguments: Missing "
                                             r"arguments: m\." + _PARAGRAPH):
        model(x, z=x, n=x)
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for n: expected torch.Size\(\[2\]\)"
                                             r" but got torch.Size\(\[3\]\)\."):
        model(x, z=x, m=x, n=torch.ones(3))
    with pytest.raises(poptorch.Error, match=r"Type mismatch for z: expected <class "
                                             r"'torch.Tensor'> but got <class 'NoneType'>\."):
        model(x, m=x, n=x)  # z left out: its default None


def test_a_different_number_of_positional_arguments_is_named():
    class Sum(nn.Module):
        def forward(self, *xs):
            return sum(xs)

    model = poptorch.inferenceModel(Sum())
    a = torch.randn(3)
    torch.testing.assert_close(model(a, a), 2 * a)
    with pytest.raises(poptorch.Error, match=r"Number of positional arguments mismatch: "
                                             r"expected 2 arguments but got 3\."):
        model(a, a, a)


def test_value_mismatch_prints_both_values():
    class Scale(nn.Module):
        def forward(self, x, mode):
            return x * 2 if mode == "double" else x

    model = poptorch.inferenceModel(Scale())
    model(torch.ones(2), "double")
    with pytest.raises(poptorch.Error, match=r"Value mismatch for mode: expected double but got "
                                             r"single\."):
        model(torch.ones(2), "single")
