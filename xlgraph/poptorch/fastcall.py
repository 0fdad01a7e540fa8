"""The per-call work of a compiled PopTorch wrapper in its common case, planned once.

A call of ``PoplarExecutor`` binds ``forward``'s arguments, flattens them, checks their
signature against the compiled one, converts the tensors to stream data and the outputs back to
torch tensors, each through general code (pytrees, output modes, replicas). When the wrapper
runs one micro-batch per call on one replica and ``forward`` takes tensors only, positionally,
most of that is known at compilation: ``FastCall`` keeps what it needs and handles calls that
match it exactly (same number of tensors, each with its compiled shape and dtype, none needing
gradients), leaving every other call to the general path.

Inputs reach the Session as numpy views of the torch tensors (``Tensor.numpy``), cast only
where xlgraph runs another dtype (int64 as int32). The outputs are fresh zeroed torch tensors
made before the run, which the run writes through their numpy views: nothing calls into torch
after the step (whose data evicts torch's code from the caches: each first call into torch after
a step costs tens of microseconds).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from xlgraph.poptorch.enums import OutputMode
from xlgraph.poptorch.narrowing import fits

__all__ = ["FastCall"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The numpy dtype of ``Tensor.numpy()`` for tensors of ``dtype`` (None if it has none)."""
    try:
        return torch.empty((), dtype=dtype).numpy().dtype
    except TypeError:
        return None


def _torch_dtype(dtype: Any) -> torch.dtype | None:
    """The torch dtype of ``torch.from_numpy`` for arrays of numpy ``dtype`` (None if torch
    has none)."""
    try:
        return torch.from_numpy(np.zeros((), dtype)).dtype
    except TypeError:
        return None


class FastCall:
    """The planned conversions of one compiled wrapper (see the module docstring)."""

    def __init__(self, specs: list[tuple[tuple[int, ...], torch.dtype]], streams: list[Any],
                 output_streams: list[Any], output_dtypes: list[torch.dtype], d2h: list[Any],
                 out_spec: Any) -> None:
        self.count = len(specs)
        # torch's dtypes as numpy's: a tensor whose numpy view has another dtype (or that has
        # none) does not match
        self.inputs = [(tuple(shape), _numpy_dtype(dtype), stream,
                        np.dtype(stream.dtype.as_numpy()))
                       for (shape, dtype), stream in zip(specs, streams)]
        # every stream the run writes, and those the call returns (not the loss, anchored
        # gradients) with their torch dtypes
        self.outputs = [(s, s.shape, np.dtype(s.dtype.as_numpy())) for s in d2h]
        self.returned = list(output_streams)
        # the dtype to convert each returned tensor to (None: it has it already); compared
        # here, as reading a tensor's dtype after the step is a cold call into torch
        self.casts = [None if _torch_dtype(s.dtype.as_numpy()) == dtype else dtype
                      for s, dtype in zip(output_streams, output_dtypes)]
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
             d2h: list[Any], out_spec: Any) -> FastCall | None:
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
        if any(_torch_dtype(s.dtype.as_numpy()) is None for s in output_streams):
            return None
        return FastCall(specs, streams, output_streams, output_dtypes, d2h, out_spec)

    def feeds(self, args: tuple[Any, ...]) -> dict[Any, np.ndarray] | None:
        """``{stream: array}`` for these call arguments, or None if they do not match the plan
        (the general path then handles them: recompiling, warning, converting)."""
        if len(args) != self.count:
            return None
        feeds = {}
        for t, (shape, dtype, stream, np_dtype) in zip(args, self.inputs):
            if type(t) is not torch.Tensor:
                return None
            try:  # refuses tensors that need gradients, other devices, conjugate views
                array = t.numpy()
            except (RuntimeError, TypeError):
                return None
            # checked on the numpy view: each call into torch costs microseconds here
            if array.dtype != dtype or array.shape != shape:
                return None
            if array.dtype != np_dtype:
                if not fits(array, np_dtype):
                    return None  # the general path names the input that does not fit
                array = array.astype(np_dtype)
            feeds[stream] = array
        return feeds

    def output_arrays(self) -> tuple[dict[Any, np.ndarray], list[torch.Tensor]]:
        """Fresh zeroed outputs of one run: ``{stream: array}`` for the Session to write and
        the torch tensors that view the returned ones, made now, while torch is in the
        caches."""
        arrays = {s: np.zeros(shape, dtype) for s, shape, dtype in self.outputs}
        return arrays, [torch.from_numpy(arrays[s]) for s in self.returned]

    def results(self, tensors: list[torch.Tensor]) -> Any:
        """The call's return value from the run's output tensors (``output_arrays``)."""
        returned = [t if dtype is None else t.to(dtype) for t, dtype in zip(tensors, self.casts)]
        if self.single:
            return returned[0]
        if self.container is not None:
            return self.container(returned)
        return pytree.tree_unflatten(returned, self.out_spec)
