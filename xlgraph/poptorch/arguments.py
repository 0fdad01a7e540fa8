"""PopTorch's checks of a wrapped model's call arguments.

Binding: the call must fit ``forward``'s signature (PopTorch asserts it, so a bad call is an
``AssertionError`` as well as a ``TypeError``). Once compiled, every call must give what the
compiled program was built for: the same argument structure, tensor shapes and dtypes, and the
same non-tensor values. PopTorch raises ``poptorch.Error`` otherwise and does not compile
again; a new wrapper, or ``destroy()`` on this one, compiles for new inputs.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from xlgraph.errors import user_source_line
from xlgraph.poptorch.support import Error

__all__ = ["ArgumentsError", "InputMismatchError", "CompiledInputs", "bind_call"]

_FIX = ("The inputs of a call must match those the model was compiled for; to run other "
        "inputs, create a new poptorch.inferenceModel / trainingModel wrapper or call destroy() "
        "on this one first")


class ArgumentsError(Error, TypeError, AssertionError):
    """A call that does not fit ``forward``'s signature (PopTorch asserts the arguments)."""


class InputMismatchError(Error):
    """A call whose inputs differ from those the model was compiled for."""


def bind_call(signature: inspect.Signature, owner: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> dict[str, Any]:
    """``forward``'s arguments by name, defaults applied.

    Raises:
        ArgumentsError: too many arguments, an unknown keyword, one given twice or a mandatory
            one missing, naming ``owner`` (``"Net.forward"``), the parameters and the user's line.
    """
    params = list(signature.parameters.values())
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    variadic_args = any(p.kind == p.VAR_POSITIONAL for p in params)
    variadic_kwargs = any(p.kind == p.VAR_KEYWORD for p in params)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
    where = f"[called at {user_source_line()}]"
    if not variadic_args and len(args) > len(positional):
        raise ArgumentsError(f"Too many arguments provided to {owner}: expected at most "
                             f"{len(positional)} {positional} but got {len(args)} positional "
                             f"{where}")
    for key in kwargs:
        if key not in names and not variadic_kwargs:
            raise ArgumentsError(f"{key} is not a valid parameter of {owner}. Allowed values "
                                 f"are {names} {where}")
        if key in positional[: len(args)]:
            raise ArgumentsError(f"Parameter {key} of {owner} was passed more than once (by "
                                 f"position and by keyword) {where}")
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        missing = [p.name for p in params[len(args):] if p.default is p.empty
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in kwargs]
        if missing:
            raise ArgumentsError(f"Mandatory parameter {missing[0]} missing in the call to "
                                 f"{owner} {where}") from None
        raise ArgumentsError(f"{owner}: {exc} {where}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def _leaf(value: Any) -> Any:
    """What must stay the same of one argument leaf: a tensor's shape and dtype, else the
    value itself."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    return value


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - values without a plain ==, e.g. arrays
        return a is b


@dataclass
class CompiledInputs:
    """The arguments a model was compiled for, as ``check`` compares them."""

    flat: dict[str, tuple[list[tuple[Any, Any]], Any]]

    @classmethod
    def of(cls, bound: dict[str, Any]) -> CompiledInputs:
        flat = {}
        for name, value in bound.items():
            leaves, spec = pytree.tree_flatten_with_path(value)
            flat[name] = ([(path, _leaf(v)) for path, v in leaves], spec)
        return cls(flat)

    def check(self, bound: dict[str, Any]) -> None:
        """Raise ``InputMismatchError`` at the first argument that differs from the compiled
        ones, naming it (``x``, ``batch['x']``), what was compiled and what was given."""
        for name, (leaves, spec) in self.flat.items():
            got = bound.get(name)
            new_leaves, new_spec = pytree.tree_flatten_with_path(got)
            if new_spec != spec:
                _spec_mismatch(name, spec, new_spec, _kind(leaves[0][1]) if spec.is_leaf()
                               else None, type(got).__name__)
            for (path, want), (_, value) in zip(leaves, new_leaves):
                where = name + pytree.keystr(path)
                have = _leaf(value)
                is_tensor = isinstance(want, tuple) and want[:1] == ("tensor",)
                if is_tensor and isinstance(value, torch.Tensor):
                    if want[2] != value.dtype:
                        _mismatch("Dtype", where, want[2], value.dtype)
                    if want[1] != tuple(value.shape):
                        _mismatch("Shape", where, list(want[1]), list(value.shape))
                elif is_tensor or isinstance(value, torch.Tensor) or \
                        type(want) is not type(have):
                    _mismatch("Type", where, _kind(want), _kind(have))
                elif not _same(want, have):
                    _mismatch("Value", where, repr(want), repr(have))


def _kind(leaf: Any) -> str:
    if isinstance(leaf, tuple) and leaf[:1] == ("tensor",):
        return "torch.Tensor"
    return type(leaf).__name__


def _spec_mismatch(name: str, spec: Any, new: Any, kind: str | None, new_kind: str) -> None:
    """The first way the structure of argument ``name`` differs: its type, its length, its
    keys (or a custom argument's non-tensor values), or deeper."""
    if spec.type is not new.type:
        _mismatch("Type", name, kind or getattr(spec.type, "__name__", spec.type), new_kind)
    if spec.num_children != new.num_children:
        _mismatch("Length", name, spec.num_children, new.num_children)
    if spec.context != new.context:
        what = "Keys" if spec.type in (dict, OrderedDict) else "Value"
        _mismatch(what, name, spec.context, new.context)
    _mismatch("Structure", name, spec, new)


def _mismatch(what: str, name: str, expected: Any, got: Any) -> None:
    raise InputMismatchError(f"{what} mismatch for {name}: expected {expected} but got {got} "
                             f"[called at {user_source_line()}]. {_FIX}")
