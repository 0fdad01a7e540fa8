"""PopTorch defects of the fourth reliability audit (issue 43: R7, R8, R11, R14, and R16 in
PopTorch's ``enableProfiling``).

Each test failed before its fix: ``setOptimizer`` over other parameters kept training a layer
left out (R7), a model with an optional argument could not be called after ``poptorch.load``
(R8), a file whose weights were replaced loaded with other dtypes or failed in torch, and
``loadExecutable`` raised a bare ``KeyError`` (R11), ``AsynchronousDataAccessor`` stored
arguments it later tripped over (R14), and an ``enableProfiling`` directory that cannot hold the
profile raised a bare ``OSError``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xlgraph.poptorch as poptorch  # noqa: E402
from xlgraph.poptorch.checks import OptionValueError  # noqa: E402


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.b(torch.relu(self.a(x)))
        return out, nn.functional.mse_loss(out, target)


def _trained_once() -> tuple[TwoLayers, poptorch.PoplarExecutor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = TwoLayers()
    x, t = torch.randn(8, 4), torch.randn(8, 2)
    tm = poptorch.trainingModel(model, poptorch.Options(),
                                poptorch.optim.SGD(model.parameters(), lr=0.1))
    tm(x, t)
    return model, tm, x, t


def test_set_optimizer_over_a_subset_of_the_parameters_is_refused_and_changes_nothing():
    model, tm, x, t = _trained_once()
    tm.copyWeightsToHost()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with pytest.raises(poptorch.Error, match=r"param group 0 of the new optimizer holds other "
                                             r"parameters than the model was compiled with "
                                             r"\(2 against 4\)"):
        tm.setOptimizer(poptorch.optim.SGD(model.a.parameters(), lr=0.1))
    tm.copyWeightsToHost()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    tm(x, t)  # the compiled optimiser still runs: every layer trains as before
    tm.copyWeightsToHost()
    assert not torch.equal(before["b.weight"], model.b.weight)


def test_set_optimizer_over_another_models_parameters_is_refused():
    _, tm, _, _ = _trained_once()
    other = TwoLayers()
    with pytest.raises(poptorch.Error, match="holds other parameters"):
        tm.setOptimizer(poptorch.optim.SGD(other.parameters(), lr=0.1))


def test_set_optimizer_with_the_same_parameters_still_changes_the_learning_rate():
    model, tm, x, t = _trained_once()
    tm.setOptimizer(poptorch.optim.SGD(model.parameters(), lr=0.0))
    tm.copyWeightsToHost()
    before = model.a.weight.detach().clone()
    tm(x, t)
    tm.copyWeightsToHost()
    assert torch.equal(before, model.a.weight)


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc(x)
        return y if scale is None else y * scale


def test_a_loaded_model_with_an_optional_argument_is_called_as_before(tmp_path: Path):
    torch.manual_seed(1)
    model, x = Scaled().eval(), torch.randn(2, 4)
    inference = poptorch.inferenceModel(model)
    expected = inference(x)
    inference.compileAndExport(str(tmp_path / "a.pt"), x)
    loaded = poptorch.load(str(tmp_path / "a.pt"))
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(loaded(x, scale=None), model(x), rtol=1e-6, atol=1e-6)


def _exported(tmp_path: Path) -> tuple[dict[str, np.ndarray], torch.Tensor]:
    torch.manual_seed(2)
    x = torch.randn(2, 4)
    poptorch.inferenceModel(nn.Linear(4, 2).eval()).compileAndExport(str(tmp_path / "m.pt"), x)
    return dict(np.load(tmp_path / "m.pt")), x


def _rewritten(tmp_path: Path, arrays: dict[str, np.ndarray]) -> str:
    path = tmp_path / "edited.pt"
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


@pytest.mark.parametrize("key,edit,words", [
    ("weight/weight", lambda a: a.reshape(4, 2), r"'weight' is stored as float32\[4, 2\], "
                                                 r"listed as float32\[2, 4\]"),
    ("weight/weight", lambda a: a.reshape(-1), r"'weight' is stored as float32\[8\]"),
    ("weight/bias", lambda a: np.zeros(3, np.float32), r"'bias' is stored as float32\[3\]"),
    ("weight/weight", lambda a: a.astype(np.float16), r"'weight' is stored as float16\[2, 4\]"),
    ("weight/weight", lambda a: a.astype(np.float64), r"'weight' is stored as float64\[2, 4\]"),
])
def test_load_checks_every_weight_against_the_files_parameter_list(tmp_path, key, edit, words):
    arrays, _ = _exported(tmp_path)
    arrays[key] = edit(arrays[key])
    with pytest.raises(poptorch.Error, match=words):
        poptorch.load(_rewritten(tmp_path, arrays))


def test_load_executable_without_a_parameter_list_is_a_malformed_file(tmp_path: Path):
    arrays, x = _exported(tmp_path)
    meta = json.loads(bytes(arrays["meta"]).decode())
    del meta["parameters"]
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    path = _rewritten(tmp_path, arrays)
    with pytest.raises(poptorch.Error, match=r"edited.pt: a malformed executable "
                                             r"\(KeyError: 'parameters'\)"):
        poptorch.inferenceModel(nn.Linear(4, 2).eval()).loadExecutable(path)


@pytest.mark.parametrize("kwargs,words", [
    ({"miss_sleep_time_in_ms": float("nan")}, "miss_sleep_time_in_ms must be a finite number"),
    ({"miss_sleep_time_in_ms": "fast"}, "miss_sleep_time_in_ms must be a finite number"),
    ({"miss_sleep_time_in_ms": -1}, "miss_sleep_time_in_ms must be a finite number >= 0"),
    ({"load_indefinitely": "no"}, "load_indefinitely must be True or False, got 'no'"),
    ({"early_preload": 1}, "early_preload must be True or False"),
    ({"rebatched_size": -1}, r"rebatched_size must be a whole number in \[1, "),
    ({"rebatched_size": 2.5}, "rebatched_size must be a whole number"),
])
def test_async_accessor_refuses_bad_arguments_when_built(kwargs, words):
    with pytest.raises(OptionValueError, match=f"AsynchronousDataAccessor: {words}"):
        poptorch.AsynchronousDataAccessor(torch.arange(4.0), **kwargs)


def test_async_accessor_takes_good_arguments():
    accessor = poptorch.AsynchronousDataAccessor(
        torch.arange(4.0), miss_sleep_time_in_ms=0, load_indefinitely=False, rebatched_size=2)
    try:
        assert [float(v) for v in accessor] == [0.0, 1.0, 2.0, 3.0]
    finally:
        accessor.terminate()


@pytest.mark.parametrize("make", ["file", "profile_is_a_directory"])
def test_enable_profiling_into_a_place_that_cannot_hold_the_profile(tmp_path: Path, make: str):
    target = tmp_path / "profiles"
    if make == "file":
        target.write_text("not a directory")
    else:
        (target / "profile.json").mkdir(parents=True)
    opts = poptorch.Options().enableProfiling(str(target))
    with pytest.raises(poptorch.Error, match=r"the profile that Options.enableProfiling\(.*"
                                             r"profiles'\) asks for cannot be written to .*"
                                             r"profile.json'") as info:
        poptorch.inferenceModel(nn.Linear(2, 2), opts)(torch.ones(1, 2))
    assert info.value.location.startswith("test_reliability_round4_poptorch.py:")
