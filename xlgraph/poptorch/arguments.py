"""PopTorch's checks of a wrapped model's call arguments against ``forward``'s signature.

The call must fit the signature (PopTorch asserts it, so a bad call is an ``AssertionError`` as
well as a ``TypeError``). What a compiled model's later calls must match is
``xlgraph.poptorch.input_match``'s.
"""

from __future__ import annotations

import inspect
from typing import Any

from xlgraph.errors import user_source_line
from xlgraph.poptorch.support import Error

__all__ = ["ArgumentsError", "InputMismatchError", "bind_call"]


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
