"""Read one line of a PopTorch options file (``opts.loadFromFile``) as data, never as code.

PopTorch's files hold the calls a program would make on ``Options``, one per line:
``deviceIterations(4)``, ``Training.gradientAccumulation(2)``,
``setExecutionStrategy(poptorch.ShardedExecution())``. A line is parsed with ``ast`` and only
these forms are accepted: a call of a setter path, whose arguments are literals (numbers,
strings, lists, tuples, dicts, ``None``/``True``/``False``), members and classes of the
``poptorch`` names given (enums, execution strategies, stages) or ``torch`` dtypes, and calls
of those classes and of their public methods (``poptorch.Stage("0").ipu(1)``). Nothing in the
file is evaluated by Python.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["parse_call"]

_DTYPES = {"float16": torch.float16, "half": torch.float16, "float32": torch.float32,
           "float": torch.float32}


class _Refused(ValueError):
    """A part of the line outside the accepted forms."""


def parse_call(line: str, poptorch: Mapping[str, Any]) -> tuple[str, list[Any], dict[str, Any]]:
    """``(setter path, args, kwargs)`` of a line such as ``Training.gradientAccumulation(2)``.

    Args:
        line: one line of the file, without its comment.
        poptorch: the objects ``poptorch.<name>`` may name (enums, strategy classes...).

    Raises:
        ValueError: the line is not a setter call with accepted arguments (the message names
            the part that is not).
    """
    try:
        tree = ast.parse(line, mode="eval").body
    except SyntaxError as exc:
        raise _Refused(f"not a setter call ({exc.msg})") from None
    if not isinstance(tree, ast.Call):
        raise _Refused("not a setter call")
    setter = _dotted(tree.func)
    if setter is None:
        raise _Refused("the setter must be a name such as Training.gradientAccumulation")
    return setter, [_value(a, poptorch) for a in tree.args], {
        k.arg: _value(k.value, poptorch) for k in tree.keywords if k.arg is not None}


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a chain of names, or None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _named(path: str, poptorch: Mapping[str, Any]) -> Any:
    """The object ``poptorch.X[.member]`` or ``torch.<dtype>`` names."""
    root, _, rest = path.partition(".")
    parts = rest.split(".") if rest else []
    if root == "torch" and len(parts) == 1 and parts[0] in _DTYPES:
        return _DTYPES[parts[0]]
    if root != "poptorch" or not parts or parts[0] not in poptorch:
        raise _Refused(f"{path} is not a poptorch enum, class or torch dtype")
    value = poptorch[parts[0]]
    for part in parts[1:]:
        if part.startswith("_") or not hasattr(value, part):
            raise _Refused(f"{path}: no public {part!r}")
        value = getattr(value, part)
    return value


def _value(node: ast.AST, poptorch: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _value(node.operand, poptorch)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.List | ast.Tuple):
        items = [_value(e, poptorch) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k, poptorch): _value(v, poptorch) for k, v in zip(node.keys, node.values)}
    path = _dotted(node)
    if path is not None:
        return _named(path, poptorch)
    if isinstance(node, ast.Call):
        args = [_value(a, poptorch) for a in node.args]
        kwargs = {k.arg: _value(k.value, poptorch) for k in node.keywords if k.arg is not None}
        return _callee(node.func, poptorch)(*args, **kwargs)
    raise _Refused(f"{ast.unparse(node)!r} is not a value an options file may hold")


def _callee(node: ast.AST, poptorch: Mapping[str, Any]) -> Any:
    """A class of ``poptorch`` (``poptorch.ShardedExecution``) or a public method of a value
    built from one (``poptorch.Stage("0").ipu``)."""
    path = _dotted(node)
    if path is not None:
        target = _named(path, poptorch)
        if not isinstance(target, type) or target.__module__.split(".")[0] != "xlgraph":
            raise _Refused(f"{path} is not a poptorch class")
        return target
    if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
        owner = _value(node.value, poptorch)
        if type(owner).__module__.split(".")[0] == "xlgraph":
            method = getattr(owner, node.attr, None)
            if callable(method):
                return method
    raise _Refused(f"{ast.unparse(node)!r} is not a poptorch class or method")
