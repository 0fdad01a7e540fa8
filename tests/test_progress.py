"""Progress bars follow tqdm's conventions: off when the stream is not a terminal unless asked,
and ``XLGRAPH_PROGRESS`` (0 or 1) decides for the whole process."""

from __future__ import annotations

import io
import time

import pytest

from xlgraph.progress import ENV, MININTERVAL, bar_disable, tqdm


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _draw(stream: io.StringIO, **kwargs) -> str:
    for _ in tqdm(range(3), file=stream, desc="work", mininterval=0, **kwargs):
        pass
    return stream.getvalue()


@pytest.mark.parametrize("env, kwargs, terminal, shown", [
    (None, {}, True, True),                     # tqdm's default: a terminal shows it
    (None, {}, False, False),                   # a file or pipe does not
    (None, {"disable": False}, False, True),    # unless the caller asks for it
    (None, {"disable": True}, True, False),     # or the caller hides it
    ("0", {}, True, False),                     # XLGRAPH_PROGRESS=0 hides every bar
    ("0", {"disable": False}, False, False),
    ("1", {}, False, True),                     # XLGRAPH_PROGRESS=1 shows every bar
    ("1", {"disable": True}, True, True),
    ("yes", {}, False, False),                  # other values are ignored
])
def test_bar_visibility(monkeypatch, env, kwargs, terminal, shown):
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    text = _draw(_Terminal() if terminal else io.StringIO(), **kwargs)
    assert ("work" in text and "3/3" in text) == shown
    if not shown:
        assert text == ""


def test_bar_disable_values(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert [bar_disable(None), bar_disable(True), bar_disable(False)] == [None, False, True]
    monkeypatch.setenv(ENV, "0")
    assert bar_disable(True) is True


class _Counting(_Terminal):
    """A terminal that counts the bar's redraws (each starts with a carriage return)."""

    def __init__(self) -> None:
        super().__init__()
        self.draws = 0

    def write(self, text: str) -> int:
        self.draws += text.count("\r")
        return super().write(text)


def test_a_loss_set_every_step_redraws_a_few_times_a_second(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    stream = _Counting()
    started = time.perf_counter()
    bar = tqdm(range(3000), file=stream, desc="[Epoch 01]")
    for i in bar:
        bar.set_postfix({"Loss": i})
        bar.set_description(f"[Epoch 01] {i % 3}")
    bar.close()
    seconds = time.perf_counter() - started
    text = stream.getvalue()
    # tqdm itself redraws on every set_postfix and set_description: 6000 times here
    assert stream.draws <= 4 + 2 * 2 * seconds / MININTERVAL
    last = text.rsplit("\r", 1)[-1]
    assert "3000/3000" in last and "Loss=2999" in last  # the final state is shown, counted once


def test_an_explicit_mininterval_is_kept(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    assert tqdm(range(2), file=io.StringIO()).mininterval == MININTERVAL
    assert tqdm(range(2), file=io.StringIO(), mininterval=0).mininterval == 0
    stream = _Counting()
    bar = tqdm(range(20), file=stream, mininterval=0)
    for i in bar:
        bar.set_postfix(step=i)
    assert stream.draws >= 20  # no limit asked for: every call redraws, as tqdm does


def test_postfix_text_is_tqdms_formatted_when_read(monkeypatch):
    from tqdm import tqdm as plain

    monkeypatch.setenv(ENV, "1")
    ours, theirs = tqdm(range(2), file=io.StringIO()), plain(range(2), file=io.StringIO())
    values = {"Loss": 0.123456, "name": "b", "n": 3}
    for bar in (ours, theirs):
        bar.set_postfix(values, lr=1e-3)
    values["Loss"] = 9.0  # changed after the call: the bar keeps what it was given
    assert ours.postfix == theirs.postfix == "Loss=0.123, name=b, n=3, lr=0.001"
    ours.set_postfix_str("text")
    assert ours.postfix == "text"
    ours.set_postfix(step=4)
    ours.close()
    assert ours.fp.getvalue().rsplit("\r", 1)[-1].rstrip().endswith("step=4]")
