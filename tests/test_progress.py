"""Progress bars follow tqdm's conventions: off when the stream is not a terminal unless asked,
and ``XLGRAPH_PROGRESS`` (0 or 1) decides for the whole process."""

from __future__ import annotations

import io

import pytest

from xlgraph.progress import ENV, bar_disable, tqdm


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
