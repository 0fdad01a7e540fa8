"""The per-call work of a compiled PopTorch wrapper in its common case, planned once.

A call of ``PoplarExecutor`` binds ``forward``'s arguments, flattens them, checks their
signature against the compiled one, converts the tensors to stream data and the outputs back to
torch tensors, each through general code (pytrees, output modes, replicas). When the wrapper
runs one micro-batch per call on one replica and ``forward`` takes tensors only, positionally,
most of that is known at compilation: ``FastCall`` keeps what it needs and handles calls that
match it exactly (same number of tensors, each with its compiled shape and dtype, none needing
gradients), leaving every other call to the general path.

Inputs reach the Session as numpy views of the torch tensors (``Tensor.numpy``), cast only
where xlgraph runs another dtype (int64 as int32). The outputs are the Session's fresh arrays of
this run, wrapped without a copy (``torch.from_numpy``): no other reference to them is kept.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from xlgraph.poptorch.enums import OutputMode

__all__ = ["FastCall"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class FastCall:
    """The planned conversions of one compiled wrapper (see the module docstring)."""

    def __init__(self, specs: list[tuple[tuple[int, ...], torch.dtype]], streams: list[Any],
                 output_streams: list[Any], output_dtypes: list[torch.dtype],
                 out_spec: Any) -> None:
        self.count = len(specs)
        self.inputs = [(torch.Size(shape), dtype, stream, np.dtype(stream.dtype.as_numpy()))
                       for (shape, dtype), stream in zip(specs, streams)]
        self.outputs = list(zip(output_streams, output_dtypes))
        # one output, or a tuple or list of them, is built directly; others through pytree
        self.single = out_spec.is_leaf()
        flat = out_spec.type in (tuple, list) and all(c.is_leaf() for c in out_spec.children())
        self.container = out_spec.type if flat else None
        self.out_spec = out_spec

    @staticmethod
    def plan(signature: inspect.Signature, specs: list[tuple[tuple[int, ...], torch.dtype]],
             concrete: list[Any], steps: int, replicas: int, synthetic: bool,
             mode: OutputMode, streams: list[Any], output_streams: list[Any],
             output_dtypes: list[torch.dtype], constant_outputs: dict[int, Any],
             out_spec: Any) -> FastCall | None:
        """The plan, or None when calls of this wrapper need the general path: several
        micro-batches or replicas per call, synthetic data, an output mode that selects over
        steps (``EveryN``, ``Sum``), non-tensor or keyword-only arguments of ``forward``, or
        outputs that are plain Python values."""
        params = list(signature.parameters.values())
        if (steps != 1 or replicas != 1 or synthetic
                or mode not in (OutputMode.All, OutputMode.Final) or concrete or constant_outputs
                or any(p.kind not in _POSITIONAL for p in params) or len(params) != len(specs)
                or len(streams) != len(specs)):
            return None
        return FastCall(specs, streams, output_streams, output_dtypes, out_spec)

    def feeds(self, args: tuple[Any, ...]) -> dict[Any, np.ndarray] | None:
        """``{stream: array}`` for these call arguments, or None if they do not match the plan
        (the general path then handles them: recompiling, warning, converting)."""
        if len(args) != self.count:
            return None
        feeds = {}
        for t, (shape, dtype, stream, np_dtype) in zip(args, self.inputs):
            if (type(t) is not torch.Tensor or t.dtype != dtype or t.shape != shape
                    or t.requires_grad or not t.is_cpu):
                return None
            array = t.numpy()
            feeds[stream] = array if array.dtype == np_dtype else array.astype(np_dtype)
        return feeds

    def results(self, out: dict[Any, np.ndarray]) -> Any:
        """The call's return value from the Session's fresh output arrays of one run."""
        tensors = []
        for stream, dtype in self.outputs:
            t = torch.from_numpy(out[stream])
            tensors.append(t if t.dtype == dtype else t.to(dtype))
        if self.single:
            return tensors[0]
        if self.container is not None:
            return self.container(tensors)
        return pytree.tree_unflatten(tensors, self.out_spec)
