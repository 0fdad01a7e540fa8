"""Progress bars that follow tqdm's conventions.

A bar is shown only when its stream is a terminal, unless the caller asks for it. The
environment variable ``XLGRAPH_PROGRESS`` overrides both for the whole process: ``0`` hides every
bar, ``1`` shows every bar even when the output is a file or a pipe.

In a Jupyter kernel a bar is shown (the cell's output is where its user looks), as a notebook
widget when ``ipywidgets`` is installed and as text otherwise: tqdm's own convention
(``tqdm.auto``), without its warning when the widgets are missing.

A shown bar redraws at most twice a second (``mininterval`` 0.5 s unless the caller sets it),
``set_postfix``/``set_description`` included: tqdm redraws on every such call, which in a
training loop that sets the loss each step means thousands of redraws an epoch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tqdm import tqdm as _tqdm

ENV = "XLGRAPH_PROGRESS"  # the environment variable that shows (1) or hides (0) every bar
MININTERVAL = 0.5  # seconds between redraws, unless the caller chooses


def bar_disable(requested: bool | None = None) -> bool | None:
    """The ``disable`` argument for a tqdm bar.

    Args:
        requested: ``True`` shows the bar even when its stream is not a terminal, ``False``
            hides it (for example PopTorch's ``showCompilationProgressBar(False)``), ``None``
            leaves it to tqdm (shown on a terminal only), but shows it in a Jupyter kernel.

    Returns:
        ``True`` (hidden), ``False`` (shown) or ``None`` (shown when the stream is a terminal).
        ``XLGRAPH_PROGRESS=0`` gives ``True`` and ``XLGRAPH_PROGRESS=1`` gives ``False`` whatever
        was requested; any other value is ignored.
    """
    env = os.environ.get(ENV, "").strip()
    if env in ("0", "1"):
        return env == "0"
    if requested is None:
        return False if in_notebook() else None
    return not requested


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ``IPKernelApp``, as tqdm.auto asks;
    IPython is not imported to find out)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _base() -> type:
    """tqdm's notebook widget bar in a Jupyter kernel with ipywidgets, else its text bar."""
    if in_notebook():
        try:
            import ipywidgets  # noqa: F401 - the widget bar needs it
            from tqdm.notebook import tqdm as widget_bar
        except ImportError:
            return _tqdm
        return widget_bar
    return _tqdm


class tqdm(_base()):  # type: ignore[misc]  # noqa: N801 - the drop-in name
    """``tqdm.tqdm`` (``tqdm.notebook.tqdm`` in a Jupyter kernel with ipywidgets) that is off
    when its stream is not a terminal (outside Jupyter), honours ``XLGRAPH_PROGRESS`` and
    redraws at most every ``mininterval`` seconds (default ``MININTERVAL``).

    ``disable=False`` asks for the bar whatever the stream; ``disable=True`` hides it. A
    refreshing ``set_postfix``/``set_description`` redraws only when ``mininterval`` has passed
    since the last redraw; otherwise the new text shows at the next one (or at ``close``). The
    values given to ``set_postfix`` are formatted when the postfix is next read (a redraw, or
    ``bar.postfix``), not on every call.
    """

    def __init__(self, *args: Any, disable: bool | None = None, **kwargs: Any) -> None:
        requested = None if disable is None else not disable
        kwargs.setdefault("mininterval", MININTERVAL)
        super().__init__(*args, disable=bar_disable(requested), **kwargs)

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        self.__dict__["_pending_postfix"] = (dict(ordered_dict or {}), kwargs)
        self._refresh_when_due(refresh)

    @property
    def postfix(self) -> str | None:
        """The postfix text (tqdm's attribute), formatted from the last ``set_postfix``."""
        pending = self.__dict__.pop("_pending_postfix", None)
        if pending is not None:
            _tqdm.set_postfix(self, pending[0], refresh=False, **pending[1])
        return self.__dict__.get("_postfix")

    @postfix.setter
    def postfix(self, text: str | None) -> None:
        self.__dict__.pop("_pending_postfix", None)
        self.__dict__["_postfix"] = text

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        super().set_postfix_str(s, refresh=False)
        self._refresh_when_due(refresh)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description(desc, refresh=False)
        self._refresh_when_due(refresh)

    def set_description_str(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description_str(desc, refresh=False)
        self._refresh_when_due(refresh)

    def _refresh_when_due(self, refresh: bool) -> None:
        if not refresh or self.disable:
            return
        # tqdm's own redraw clock (last_print_t) stays tqdm's: iteration keeps counts with it
        now = self._time()
        if now - max(self.last_print_t, getattr(self, "_postfix_t", 0.0)) >= self.mininterval:
            self._postfix_t = now
            self.refresh()
