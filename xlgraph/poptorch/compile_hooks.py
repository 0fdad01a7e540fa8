"""``poptorch.registerPreCompileHook`` / ``registerPostCompileHook``: callables run, with no
arguments and in registration order, before each compilation of any wrapped model traces it
and after its executable is built."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from torch.utils.hooks import RemovableHandle

__all__ = ["registerPreCompileHook", "registerPostCompileHook", "run_pre_compile_hooks",
           "run_post_compile_hooks"]

_PRE: OrderedDict[int, Callable[[], Any]] = OrderedDict()
_POST: OrderedDict[int, Callable[[], Any]] = OrderedDict()


def _register(hooks: OrderedDict[int, Callable[[], Any]], hook: Any, kind: str,
              ) -> RemovableHandle:
    if not callable(hook):
        raise RuntimeError(f"{kind}-compile hook must be callable")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook: Callable[[], Any]) -> RemovableHandle:  # noqa: N802
    """Call ``hook()`` before every compilation of a wrapped model; ``.remove()`` the handle
    to stop.

    Raises:
        RuntimeError: ``hook`` is not callable.
    """
    return _register(_PRE, hook, "Pre")


def registerPostCompileHook(hook: Callable[[], Any]) -> RemovableHandle:  # noqa: N802
    """Call ``hook()`` after every compilation of a wrapped model; ``.remove()`` the handle
    to stop.

    Raises:
        RuntimeError: ``hook`` is not callable.
    """
    return _register(_POST, hook, "Post")


def run_pre_compile_hooks() -> None:
    for hook in list(_PRE.values()):
        hook()


def run_post_compile_hooks() -> None:
    for hook in list(_POST.values()):
        hook()
