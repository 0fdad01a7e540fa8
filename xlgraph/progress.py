"""Progress bars that follow tqdm's conventions.

A bar is shown only when its stream is a terminal, unless the caller asks for it. The
environment variable ``XLGRAPH_PROGRESS`` overrides both for the whole process: ``0`` hides every
bar, ``1`` shows every bar even when the output is a file or a pipe.
"""

from __future__ import annotations

import os
from typing import Any

from tqdm import tqdm as _tqdm

ENV = "XLGRAPH_PROGRESS"  # the environment variable that shows (1) or hides (0) every bar


def bar_disable(requested: bool | None = None) -> bool | None:
    """The ``disable`` argument for a tqdm bar.

    Args:
        requested: ``True`` shows the bar even when its stream is not a terminal, ``False``
            hides it (for example PopTorch's ``showCompilationProgressBar(False)``), ``None``
            leaves it to tqdm (shown on a terminal only).

    Returns:
        ``True`` (hidden), ``False`` (shown) or ``None`` (shown when the stream is a terminal).
        ``XLGRAPH_PROGRESS=0`` gives ``True`` and ``XLGRAPH_PROGRESS=1`` gives ``False`` whatever
        was requested; any other value is ignored.
    """
    env = os.environ.get(ENV, "").strip()
    if env in ("0", "1"):
        return env == "0"
    return None if requested is None else not requested


class tqdm(_tqdm):  # noqa: N801 - the drop-in name
    """``tqdm.tqdm`` that is off when its stream is not a terminal and honours ``XLGRAPH_PROGRESS``.

    ``disable=False`` asks for the bar whatever the stream; ``disable=True`` hides it.
    """

    def __init__(self, *args: Any, disable: bool | None = None, **kwargs: Any) -> None:
        requested = None if disable is None else not disable
        super().__init__(*args, disable=bar_disable(requested), **kwargs)
