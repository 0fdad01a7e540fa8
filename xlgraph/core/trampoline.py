"""Recursion on the heap: deeply nested programs walked without Python's call stack.

Calls, repeats and conditionals nest graphs, and the passes over them (flattening, dead-step
removal, liveness, the buffer plan, the interpreter) are naturally recursive: one level of
recursion per level of nesting. Written as generators, they recurse by *yielding* the
generator of the nested call, and ``run`` drives them with an explicit stack of suspended
generators: ``result = yield walk(inner)`` stands for ``result = walk(inner)``. The depth a
program may nest is then bounded by memory, not by ``sys.getrecursionlimit()`` or the C stack
of the thread, and nothing process-wide (the recursion limit) has to change.

>>> def depth(n: int) -> Nested[int]:
...     return 0 if n == 0 else 1 + (yield depth(n - 1))
>>> run(depth(100_000))
100000
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

__all__ = ["Nested", "run"]

T = TypeVar("T")
Nested = Generator[Any, Any, T]  # yields nested calls, returns its result


def run(call: Nested[T]) -> T:
    """The result of ``call``, running every generator it yields (and they yield) in turn.

    An exception raised in a nested call is thrown into its caller at the ``yield``, so
    ``try``/``finally`` and ``except`` work as in ordinary recursion."""
    stack: list[Nested[Any]] = [call]
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            if error is None:
                inner = stack[-1].send(value)
            else:
                inner, error = stack[-1].throw(error), None
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
            continue
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, or re-raised
            stack.pop()
            if not stack:
                raise
            error = exc
            continue
        stack.append(inner)
        value = None
