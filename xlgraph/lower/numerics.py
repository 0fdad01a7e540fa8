"""The numerics mode (``Session(..., check_numerics=True)``): stop at the first NaN or Inf.

The reference interpreter runs the program op by op and checks every floating-point value an op
produces (and every host transfer it loads). The first non-finite value raises
``NumericsError`` naming the op, its output and whether its inputs were finite; the Session
reports it as an ``ExecutionError`` whose message starts with the op and the user's line where
it was created. Under ``enableFloatingPointChecks`` the floating-point traps fire first, with the
error every other mode raises. With replicas the index starts with the replica's. It is slower
than the compiled path: a debugging tool.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from xlgraph.errors import NumericsError
from xlgraph.lower.interpreter import Interpreter, _HostIO
from xlgraph.op import Op

__all__ = ["NumericsInterpreter"]


def _first_bad(value: Any) -> str | None:
    """``"nan at index (1, 2)"`` for the first non-finite element of a float array, or None."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "fc" or arr.size == 0:
        return None
    bad = ~np.isfinite(arr)
    if not bad.any():
        return None
    index = np.unravel_index(int(np.argmax(bad)), arr.shape) if arr.ndim else ()
    return f"{arr[index]} at index {tuple(int(i) for i in index)}"


class NumericsInterpreter(Interpreter):
    """The interpreter, raising ``NumericsError`` at the first non-finite value."""

    def op(self, op: Op, args: list[Any], io: _HostIO) -> list[Any]:
        traps = self.ir.session_options.enableFloatingPointChecks
        quiet = contextlib.nullcontext() if traps else np.errstate(all="ignore")
        with quiet:  # the check below reports it, with the op
            outs = super().op(op, args, io)
        for t, value in zip(op.outputs, outs):
            found = _first_bad(value)
            if found is None:
                continue
            if op.defn.kind == "host_load":
                raise NumericsError(f"stream {op.attrs['stream'].name!r} delivered {found}")
            bad_inputs = [f"{x.id} {x.spec}" for x, a in zip(op.inputs, args)
                          if _first_bad(a) is not None]
            origin = (f"its inputs {bad_inputs} were not finite already" if bad_inputs
                      else "every input was finite")
            raise NumericsError(f"output {t.id} {t.spec} holds {found}; {origin}")
        return outs
