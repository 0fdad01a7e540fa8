"""PopTorch user-guide style programs (``tests/poptorch_programs/``), run as scripts and checked
against torch eager: options read from a file (the execution strategy included), a model in
blocks placed by ``ShardedExecution``'s stages, and constants and buffers changed in ``forward``."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
poptorch = pytest.importorskip("xlgraph.poptorch")

PROGRAMS = Path(__file__).resolve().parent / "poptorch_programs"


def _run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.chdir(tmp_path)
    return runpy.run_path(str(PROGRAMS / name), run_name="__main__")


def test_options_file_sets_the_execution_strategy_and_the_rest(tmp_path, monkeypatch):
    scope = _run("options_file.py", tmp_path, monkeypatch)
    opts = scope["opts"]
    assert opts.device_iterations == 2 and opts.random_seed == 42
    assert isinstance(opts.execution_strategy, poptorch.ShardedExecution)
    assert opts.output_mode == poptorch.OutputMode.All
    torch.testing.assert_close(scope["out"], scope["model"](scope["x"]).detach())


def test_sharded_stages_place_blocks_and_train_like_torch(tmp_path, monkeypatch):
    scope = _run("sharded_stages.py", tmp_path, monkeypatch)
    strategy = scope["strategy"]
    assert [s.blocks for s in strategy.stages] == [["A"], ["B"], ["C"]]
    assert strategy.stage("B") is strategy.stages[1] and strategy.stages[2]._ipu == 1
    losses = scope["losses"]
    assert losses[-1] < losses[0]
    model, x, labels = scope["model"], scope["x"], scope["labels"]
    torch.testing.assert_close(scope["probabilities"], model(x, labels)[0].detach())
    # the same 20 SGD steps in eager torch from the same start give the same loss
    torch.manual_seed(0)
    ref = type(model)()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(20):
        opt.zero_grad()
        loss = ref(x, labels)[1]
        loss.backward()
        opt.step()
    assert abs(float(ref(x, labels)[1].detach()) - float(model(x, labels)[1].detach())) < 1e-4


@pytest.mark.parametrize("line,match", [
    ("__import__('os').system('true')", "the setter must be a name"),
    ("deviceIterations(open('x'))", "open is not a poptorch enum"),
    ("setExecutionStrategy(poptorch.ShardedExecution.__init__)", "no public"),
    ("_values.clear()", "unknown option setter"),
])
def test_options_files_are_read_as_data(tmp_path, line, match):
    path = tmp_path / "bad.conf"
    path.write_text(line + "\n")
    with pytest.raises(poptorch.ConfigFileError, match=match):
        poptorch.Options().loadFromFile(str(path))


def test_constants_changed_in_forward_stay_inside_the_call(tmp_path, monkeypatch):
    scope = _run("buffers.py", tmp_path, monkeypatch)
    assert [c.tolist() for c in scope["constant_counts"]] == [[1.0]] * 3
    assert [c.tolist() for c in scope["buffer_counts"]] == [[1.0], [2.0], [3.0]]
    constant = scope["constant_model"]
    assert constant.i.tolist() == [0.0] and "i" not in dict(constant.named_buffers())
