"""The per-call plan of a ``PoplarExecutor``: bind the call's arguments, split the batch into
micro-batches per replica, feed the streams, run, and shape the outputs by the output mode
(or take the planned fast path, ``fastcall.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from xlgraph.poptorch.arguments import bind_call
from xlgraph.poptorch.enums import (
    CommGroupType,
    OutputMode,
)
from xlgraph.poptorch.executor_compile import _Compiled
from xlgraph.poptorch.input_match import register_dict_types
from xlgraph.poptorch.lowering import (
    flat_tensors,
    torch_to_numpy,
)
from xlgraph.poptorch.support import Error

__all__ = ["BatchDimensionError"]


class BatchDimensionError(Error, AssertionError):
    """An input's batch dimension is not a multiple of the micro-batches per call (PopTorch
    asserts it, so it is an ``AssertionError`` as well as a ``poptorch.Error``)."""


def _apply_output_mode(array: np.ndarray, steps: int, replicas: int, mode: OutputMode,
                       period: int) -> np.ndarray:
    """One output of ``steps`` micro-batches on ``replicas`` replicas (stream data: leading
    steps and replica dims, each only when > 1) as PopTorch returns it."""
    lead = sum(n > 1 for n in (steps, replicas))
    grid = array.reshape((steps, replicas) + array.shape[lead:])
    if mode == OutputMode.Final:
        grid = grid[-1:]
    elif mode == OutputMode.Sum:
        grid = grid.sum(axis=0, keepdims=True)
    elif mode == OutputMode.EveryN:
        grid = grid[period - 1::period]
    count = grid.shape[0] * grid.shape[1]
    if count == 1:
        return grid[0, 0]
    if grid.ndim == 2:  # a scalar per micro-batch becomes a vector
        return grid.reshape(count)
    return grid.reshape((count * grid.shape[2],) + grid.shape[3:])


def _to_torch(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, order="C"))  # 0-d stays 0-d


class _CallPlan:
    """``PoplarExecutor.__call__`` and the stream data of each call."""

    # -- compilation -------------------------------------------------------------------------
    @property
    def _steps(self) -> int:
        """Micro-batches per call and replica (device iterations x gradient accumulation)."""
        return self.options.device_iterations * self.options.Training.gradient_accumulation

    @property
    def _replicas(self) -> int:
        return self.options.replication_factor

    def _lead(self) -> tuple[int, ...]:
        """The leading dims of stream data: transfers, then replicas (each only when > 1)."""
        return tuple(n for n in (self._steps, self._replicas) if n > 1)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        owner = f"{type(self._user_model).__name__}.forward"
        bound = bind_call(self._signature, owner, args, kwargs)
        if self._compiled is None:  # capture needs the dict subclasses; later calls do not
            register_dict_types(bound)
        return bound

    @property
    def _input_replicas(self) -> int:
        """Distinct inputs per micro-batch: replicas / ``inputReplicaGrouping`` group size."""
        return self._replicas // max(self.options.input_group_size, 1)

    def _micro_batch(self, name: str, t: torch.Tensor) -> torch.Tensor:
        steps = self._steps * self._input_replicas
        if steps == 1:
            return t  # one micro-batch per call: any shape, 0-d included
        size = t.shape[0] if t.dim() else "none"
        if not (t.dim() > 0 and t.shape[0] % steps == 0 and t.shape[0] >= steps):
            raise BatchDimensionError(
                f"Invalid batch dimension: in the input {name}, the batch dimension ({size}) must "
                f"be a multiple of device iterations x replication factor / input group size x "
                f"gradient accumulation ({steps})")
        return t[: t.shape[0] // steps]

    def _replica_inputs(self) -> np.ndarray:
        """Which of the call's per-replica input slices each replica reads."""
        distinct, replicas = self._input_replicas, np.arange(self._replicas)
        if self.options.input_group_type == CommGroupType.Orthogonal:
            return replicas % distinct
        return replicas // (self._replicas // distinct)

    def _feed(self, stream: Any, t: torch.Tensor, name: str) -> np.ndarray:
        array = torch_to_numpy(t, f"input {name!r}")
        if self.options.synthetic_data:
            array = np.zeros_like(array)
        grid = array.reshape((self._steps, self._input_replicas) + stream.shape)
        if self._input_replicas != self._replicas:
            grid = grid[:, self._replica_inputs()]
        return grid.reshape(self._lead() + stream.shape)

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self._compiled
        fast = None if compiled is None or kwargs or self._stale_step else compiled.fast
        feeds = None if fast is None else fast.feeds(args)
        bound = None
        if feeds is None:  # the general path: bind, check the signature, convert
            fast, bound = None, self._bind(args, kwargs)
            compiled, bound, feeds = self._prepare(bound)
        if not compiled.session.is_attached:
            self.attachToDevice()
        if self.training:
            compiled.sync.upload_changed()
        else:
            self._upload_trained()
        if fast is not None:
            out, tensors = fast.output_arrays()
            compiled.session.run_with_outputs(feeds, out)
        else:
            out = compiled.session.run(feeds)
        if self.training:
            compiled.sync.host_stale = True
            self._optimizer_steps += self.options.device_iterations
            # the device stepped the optimizer: flag it as optimizer.step() does, so torch's LR
            # schedulers know the step came before theirs
            self._optimizer._opt_called = True
            if self._grad_streams:
                self._keep_anchored_gradients(out)
        elif compiled.lowered.buffer_updates:  # buffers forward updated keep their new values
            compiled.sync.download_buffers(compiled.lowered.buffer_updates.values())
        if fast is not None:
            return fast.results(tensors)
        if compiled.input_updates:
            self._write_back_inputs(out, flat_tensors(bound), compiled.input_updates)
        mode = self.options.output_mode
        period = self.options.output_return_period
        results = [_to_torch(_apply_output_mode(out[s], self._steps, self._replicas, mode,
                                                period)).to(dtype)
                   for s, dtype in zip(compiled.output_streams, compiled.lowered.output_dtypes)]
        return pytree.tree_unflatten(compiled.lowered.results(results), compiled.lowered.out_spec)

    def _write_back_inputs(self, out: dict[Any, np.ndarray], tensors: list[torch.Tensor],
                           updates: dict[Any, int]) -> None:
        """PopTorch's in-place inputs: each input ``forward`` changed in place takes, in the
        caller's tensor, the values every micro-batch left in its slice."""
        for stream, position in updates.items():
            t = tensors[position]
            grid = out[stream].reshape((self._steps, self._replicas) + stream.shape)
            if self._input_replicas != self._replicas:  # one slice per group: its first replica
                firsts = np.unique(self._replica_inputs(), return_index=True)[1]
                grid = grid[:, firsts]
            with torch.no_grad():
                t.copy_(torch.from_numpy(np.ascontiguousarray(grid)).reshape(t.shape))

    def _prepare(self, bound: dict[str, Any],
                 ) -> tuple[_Compiled, dict[str, Any], dict[Any, np.ndarray]]:
        """Compile for ``bound`` if needed and convert its tensors to stream data; ``bound``
        comes back with its dicts in the compiled key order.

        Raises:
            InputMismatchError: after compilation, inputs other than the compiled ones
                (PopTorch does not compile again: ``destroy()`` or a new wrapper does).
        """
        if self._compiled is None:
            self._compile(bound)
        compiled = self._compiled
        bound = compiled.inputs.check(bound)  # PopTorch runs only what it compiled for
        tensors = flat_tensors(bound)
        if any(t.requires_grad for t in tensors):
            warnings.warn("Input tensor has requires_grad=True set. This tensor will be "
                          "detached: the backward pass through inputs is not supported "
                          "(as in PopTorch)", stacklevel=3)
        if self._stale_step:  # setOptimizer changed what the step compiled in
            if not compiled.session.is_attached:
                self.attachToDevice()  # the state to carry over is on the device
            compiled.sync.download()
            # the new program goes on from the optimiser state of the old one
            carried, steps = self.read_optimizer_state(), self._optimizer_steps
            if compiled.session.is_attached:
                compiled.session.__exit__(None, None, None)
            self._compiled = None
            self._compile(bound)
            self.write_optimizer_state(carried)
            self._optimizer_steps = steps
            compiled = self._compiled
        names = [t.name for t in compiled.lowered.data_inputs]
        return compiled, bound, {stream: self._feed(stream, t, name)
                                 for stream, t, name in zip(compiled.streams, tensors, names)}
