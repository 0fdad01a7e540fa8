"""One-call training and inference steps: forward, loss, ``autodiff`` and optimiser updates.

``build_train_step`` writes, into an Ir, a loop that runs ``num_host_transfers`` training steps
per ``Session.run``: each iteration host-loads one batch, calls the forward-and-loss graph, calls
its gradient graph and applies the optimiser's in-place updates. ``build_inference`` writes the
matching loop for evaluation.

Example:
    >>> model = nn.Linear(4, 3)
    >>> ir = xlgraph.Ir()
    >>> step = build_train_step(ir, model, nn.cross_entropy, optim.SGD(lr=0.1),
    ...                         inputs=[TensorSpec((8, 4), float32)],
    ...                         targets=[TensorSpec((8,), int32)], num_host_transfers=10)
    >>> with xlgraph.Session(ir) as session:
    ...     losses = step.run(session, images, labels)   # arrays of shape (10, 8, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.context import in_sequence
from xlgraph.graph import Graph
from xlgraph.ir import Ir
from xlgraph.nn import Layer
from xlgraph.ops.collectives import replicated_all_reduce, replicated_slice
from xlgraph.ops.random import create_seeds
from xlgraph.ops.var_updates import copy_var_update_
from xlgraph.optim import Optimizer
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from xlgraph.tensor import (
    Tensor,
    TensorSpec,
    Variable,
    constant,
    graph_input,
    graph_output,
    variable,
)
from xlgraph.transforms import autodiff

__all__ = ["TrainStep", "InferenceStep", "build_train_step", "build_inference", "SEED_SPEC"]

SEED_SPEC = TensorSpec((2,), dtypes.uint32)  # the spec of a dropout seed (PopXL's uint32[2])


def _outputs(result: Any) -> tuple[Tensor, ...]:
    return (result,) if isinstance(result, Tensor) else tuple(result)


class _Forward:
    """A model as the training code sees it: variables by name, and a way to build it.

    ``forward`` is an ``nn.Layer`` (its parameters become inputs of the graph it is built in) or a
    subgraph with ``params`` mapping its parameter inputs to variables.
    """

    def __init__(self, forward: Layer | Graph, params: Mapping[Any, Variable] | None,
                 seed: int | None, seed_input: Tensor | None, init_seed: int | None) -> None:
        self.forward = forward
        self.seed_input = seed_input
        if isinstance(forward, Graph):
            if params is None:
                raise ValueError("a forward graph needs params={graph input: variable}")
            if seed_input is None and seed is not None:
                raise ValueError("a forward graph with a seed needs seed_input=<its seed input>")
            self.inputs = {v.name: t for t, v in params.items()}
            self.variables = {v.name: v for v in params.values()}
        elif isinstance(forward, Layer):
            self.variables = dict(params) if params is not None else \
                forward.create_variables(init_seed)
        else:
            raise TypeError(f"forward must be an nn.Layer or a Graph, got {type(forward).__name__}")

    def build(self, xs: Sequence[Tensor], seed: Tensor | None) -> tuple[tuple[Tensor, ...],
                                                                         dict[str, Tensor]]:
        """Build the forward in the current subgraph; returns its outputs and parameter tensors."""
        if isinstance(self.forward, Layer):
            out = self.forward(*xs) if seed is None else self.forward(*xs, seed=seed)
            return _outputs(out), self.forward.named_tensors()
        params = {name: graph_input(t.shape, t.dtype, name) for name, t in self.inputs.items()}
        bound = {t: params[name] for name, t in self.inputs.items()}
        if seed is not None:
            bound[self.seed_input] = seed
        data = [t for t in self.forward.inputs if t not in bound and t is not self.seed_input]
        if len(data) != len(xs):
            raise ValueError(f"forward graph {self.forward.name!r} has {len(data)} data inputs, "
                             f"got {len(xs)} input specs")
        bound.update(zip(data, xs))
        return ops.call(self.forward, inputs_dict=bound), params


def _streams(specs: Sequence[TensorSpec], prefix: str) -> list[HostToDeviceStream]:
    return [h2d_stream(s.shape, s.dtype, f"{prefix}{i}") for i, s in enumerate(specs)]


def _loop(ir: Ir, body: Graph, count: int, bound: Mapping[Tensor, Variable]) -> None:
    """Repeat ``body`` in the main graph; the variables it updates in place stay updated. Once
    is a plain call: its steps are then the run's own, whose first writes of a variable the
    lowering can direct to a spare array instead of snapshotting the variable each run."""
    with ir.main_graph, in_sequence():
        if count == 1:
            site = ops.call_with_info(body, inputs_dict=bound)
        else:
            site = ops.repeat_with_info(body, count, inputs_dict=bound)
        for v in dict.fromkeys(bound.values()):
            site.set_parent_input_modified(v)


def _feeds(streams: Sequence[HostToDeviceStream], arrays: Sequence[Any]) -> dict[Any, Any]:
    if len(arrays) != len(streams):
        raise ValueError(f"expected {len(streams)} arrays ({[s.name for s in streams]}), "
                         f"got {len(arrays)}")
    return dict(zip(streams, arrays))


@dataclass(eq=False)
class TrainStep:
    """What ``build_train_step`` made: streams, variables and the optimiser.

    Attributes:
        streams: the h2d streams, model inputs then targets (one batch per transfer).
        loss_stream: the d2h stream of the per-step loss.
        params: ``{name: Variable}`` of the model.
        state: ``{name: Variable}`` of the optimiser.
        seed: the dropout seed variable (``uint32[2]``), or None.
        num_host_transfers: training steps per ``run``.
        output_streams: with ``store_outputs``, the d2h stream of each forward output.
        grad_streams: ``{parameter name: d2h stream}`` of the reduced gradient of each step,
            for the names given as ``store_grads``.
    """

    optimizer: Optimizer
    streams: tuple[HostToDeviceStream, ...]
    loss_stream: DeviceToHostStream
    params: dict[str, Variable]
    state: dict[str, Variable]
    seed: Variable | None
    num_host_transfers: int
    output_streams: tuple[DeviceToHostStream, ...] = ()
    grad_streams: dict[str, DeviceToHostStream] | None = None

    def run(self, session: Any, *arrays: Any) -> np.ndarray:
        """Train on one group of batches; returns the loss of each step, shape ``(n,)``.

        Args:
            session: an attached Session of the Ir.
            *arrays: one array per stream, shaped ``(n, batch, ...)`` (``(batch, ...)`` if n=1).
        """
        out = session.run(_feeds(self.streams, arrays))
        return np.atleast_1d(out[self.loss_stream])


@dataclass(eq=False)
class InferenceStep:
    """What ``build_inference`` made: input and output streams, the model's variables and
    the seed variable of its random ops (or None)."""

    streams: tuple[HostToDeviceStream, ...]
    output_streams: tuple[DeviceToHostStream, ...]
    params: dict[str, Variable]
    num_host_transfers: int
    seed: Variable | None = None

    def run(self, session: Any, *arrays: Any) -> tuple[np.ndarray, ...]:
        """Run the model on one group of batches; returns one array per model output."""
        out = session.run(_feeds(self.streams, arrays))
        return tuple(out[s] for s in self.output_streams)


def build_train_step(
    ir: Ir,
    forward: Layer | Graph,
    loss: Callable[..., Tensor],
    optimizer: Optimizer,
    inputs: Sequence[TensorSpec],
    targets: Sequence[TensorSpec] = (),
    *,
    params: Mapping[Any, Variable] | None = None,
    seed: int | None = None,
    seed_input: Tensor | None = None,
    init_seed: int | None = None,
    num_host_transfers: int | None = None,
    store_outputs: bool = False,
    store_grads: Collection[str] = (),
    frozen: Collection[str] = (),
    updates: Mapping[int, str] | None = None,
    accumulation: int = 1,
    accumulation_reduction: str = "mean",
) -> TrainStep:
    """Build forward + loss + ``autodiff`` + optimiser updates, looped over host transfers.

    Args:
        ir: the Ir to build in (its main graph gets the variables, streams and the loop).
        forward: an ``nn.Layer``, or a subgraph whose parameter inputs ``params`` names.
        loss: ``loss(model_output, *targets) -> scalar``, built in the same subgraph.
        optimizer: an ``xlgraph.optim`` optimiser; its state variables are created here.
        inputs: specs of one batch of each model input.
        targets: specs of one batch of each loss target (e.g. int32 labels).
        params: for a Layer, existing variables ``{name: Variable}`` (default: created with
            ``forward.create_variables(init_seed)``); for a Graph, ``{graph input: Variable}``.
        seed: when given, a ``uint32[2]`` seed variable starting from ``create_seeds(seed)`` is
            split every step and passed as ``seed=`` to the Layer (or to ``seed_input``).
        seed_input: the seed input of a forward Graph.
        init_seed: seed of the parameter initialisation of a Layer.
        num_host_transfers: steps per ``run`` (sets ``ir.num_host_transfers``).
        store_outputs: also stream every forward output of every step to the host
            (``TrainStep.output_streams``).
        store_grads: parameter names whose gradient (reduced as the optimiser receives it) is
            streamed to the host every step (``TrainStep.grad_streams``; like every stream it
            makes one transfer per batch, so each step's gradient is repeated ``accumulation``
            times).
        frozen: names of variables the forward reads but the optimiser leaves alone.
        updates: ``{forward output index: variable name}``: after each step the variable takes
            that output's value (e.g. BatchNorm running statistics; name them in ``frozen``).
        accumulation: micro-batches per optimiser step: their gradients are summed, over the
            replicas too when ``ir.replication_factor > 1`` (and divided by accumulation x
            replicas for ``accumulation_reduction="mean"``); each run then takes
            ``num_host_transfers * accumulation`` batches per replica and returns as many losses.

    Returns:
        A ``TrainStep``; ``step.run(session, *arrays)`` trains and returns the losses.
    """
    if num_host_transfers is not None:
        ir.num_host_transfers = int(num_host_transfers) * accumulation
    if accumulation < 1 or ir.num_host_transfers % accumulation:
        raise ValueError(f"accumulation={accumulation} must be positive and divide "
                         f"ir.num_host_transfers={ir.num_host_transfers}")
    if accumulation_reduction not in ("mean", "sum"):
        raise ValueError(f"accumulation_reduction must be 'mean' or 'sum', "
                         f"got {accumulation_reduction!r}")
    n = ir.num_host_transfers // accumulation
    with ir.main_graph:
        model = _Forward(forward, params, seed, seed_input, init_seed)
        state = optimizer.create_state(model.variables)
        seed_var = None if seed is None else variable(create_seeds(seed), dtypes.uint32, "seed")
        streams = _streams(inputs, "input") + _streams(targets, "target")
    specs = [*inputs, *targets]

    fwd = ir.create_empty_graph("train_forward", unique_suffix=False)
    with fwd:
        args = [graph_input(s.shape, s.dtype, st.name) for s, st in zip(specs, streams)]
        seed_in = None if seed is None else graph_input(SEED_SPEC.shape, SEED_SPEC.dtype, "seed")
        outs, fwd_params = model.build(args[: len(inputs)], seed_in)
        value = loss(outs[0] if len(outs) == 1 else outs, *args[len(inputs):])
        if value.shape != () or not value.dtype.is_floating_point:
            raise ValueError(f"the loss must be a float scalar, got {value.spec}")
        graph_output(value)
        for t in outs if store_outputs or updates else ():
            graph_output(t)
    used = [k for k in model.variables if k in fwd_params]  # unused parameters get no update
    names = [k for k in used if k not in frozen]
    grad = autodiff(fwd, grads_provided=[value], grads_required=[fwd_params[k] for k in names])

    body = ir.create_empty_graph("train_loop", unique_suffix=False)
    everything = {**model.variables, **state}
    with ir.main_graph:
        loss_stream = d2h_stream((), value.dtype, "loss")
        out_streams = [d2h_stream(t.shape, t.dtype, f"output{i}")
                       for i, t in enumerate(outs if store_outputs else ())]
        grad_streams = {k: d2h_stream(model.variables[k].shape, model.variables[k].dtype,
                                      f"Gradient___{k}") for k in names if k in store_grads}
    with body, in_sequence():
        local = {k: graph_input(v.shape, v.dtype, k) for k, v in everything.items()}
        bound = {fwd_params[k]: local[k] for k in used}
        wiring = {local[k]: v for k, v in everything.items()}
        if seed_var is not None:
            seed_local = graph_input(SEED_SPEC.shape, SEED_SPEC.dtype, "seed")
            wiring[seed_local] = seed_var
        total: list[Tensor] = []
        for _ in range(accumulation):  # one forward and backward per micro-batch
            data = [ops.host_load(s) for s in streams]
            if seed_var is not None:
                bound[seed_in], next_seed = ops.split_random_seed(seed_local)
                copy_var_update_(seed_local, next_seed)
                if ir.replication_factor > 1:
                    bound[seed_in] = _replica_seed(bound[seed_in], ir.replication_factor)
            site = ops.call_with_info(fwd, *data, inputs_dict=bound)
            step_loss = site.outputs[0]
            one = constant(np.ones((), step_loss.dtype.as_numpy()), step_loss.dtype)
            grads = ops.call(grad.graph, one, inputs_dict=grad.inputs_dict(site))
            total = list(grads) if not total else [a + b for a, b in zip(total, grads)]
            step_outs = site.outputs[1:1 + len(outs)]
            for index, name in (updates or {}).items():
                copy_var_update_(local[name], step_outs[index])
            ops.host_store(loss_stream, step_loss)
            for s, t in zip(out_streams, step_outs):
                ops.host_store(s, t)
        # data parallel: every replica gets the gradient summed over the replicas sharing the
        # parameter (all of them, or its replica group: a grouped variable has one value each)
        groups = [model.variables[k].replica_grouping for k in names]
        if ir.replication_factor > 1:
            total = [replicated_all_reduce(g, "add", group=None if rg.num_groups == 1 else rg)
                     for g, rg in zip(total, groups)]
        if accumulation_reduction == "mean":
            total = [g if accumulation * rg.group_size == 1 else
                     g * (1.0 / (accumulation * rg.group_size)) for g, rg in zip(total, groups)]
        for k, g in zip(names, total):
            for _ in range(accumulation if k in grad_streams else 0):  # once per transfer
                ops.host_store(grad_streams[k], g)
        optimizer.update({k: local[k] for k in names}, dict(zip(names, total)),
                         {k: local[k] for k in state})
    _loop(ir, body, n, wiring)
    return TrainStep(optimizer, tuple(streams), loss_stream, model.variables, state, seed_var, n,
                     tuple(out_streams), grad_streams)


def _replica_seed(seed: Tensor, replicas: int) -> Tensor:
    """A different seed on each replica, split from ``seed`` (each draws its own dropout)."""
    seeds = []
    for _ in range(replicas):
        this, seed = ops.split_random_seed(seed)
        seeds.append(ops.reshape(this, (1, 2)))
    mine = replicated_slice(ops.concat(seeds, 0), 0)
    return ops.reshape(mine, SEED_SPEC.shape)


def build_inference(
    ir: Ir,
    forward: Layer | Graph,
    inputs: Sequence[TensorSpec],
    *,
    params: Mapping[Any, Variable] | None = None,
    init_seed: int | None = None,
    num_host_transfers: int | None = None,
    updates: Mapping[int, str] | None = None,
    seed: int | None = None,
    seed_input: Tensor | None = None,
) -> InferenceStep:
    """Build a loop that runs ``forward`` on ``num_host_transfers`` batches per ``run``.

    Args:
        ir: the Ir to build in.
        forward: an ``nn.Layer`` (built without a seed, so dropout is off) or a subgraph.
        inputs: specs of one batch of each model input.
        params: as for ``build_train_step``; load trained values afterwards with
            ``xlgraph.checkpoint.load_into`` (variables are named like the training ones).
        init_seed: seed of the parameter initialisation of a Layer.
        num_host_transfers: batches per ``run`` (sets ``ir.num_host_transfers``).
        updates: ``{forward output index: variable name}``: after each batch the variable
            takes that output (a buffer the model updates); those outputs are not streamed.
        seed: initial value of a seed variable split for every batch, for a forward graph
            with random ops (``seed_input`` is its seed input), as in ``build_train_step``.

    Returns:
        An ``InferenceStep``; ``step.run(session, *arrays)`` returns the model outputs.
    """
    if num_host_transfers is not None:
        ir.num_host_transfers = int(num_host_transfers)
    with ir.main_graph:
        model = _Forward(forward, params, seed, seed_input, init_seed)
        streams = _streams(inputs, "input")
        seed_var = None if seed is None else variable(create_seeds(seed), dtypes.uint32, "seed")
    body = ir.create_empty_graph("inference_loop", unique_suffix=False)
    wiring: dict[Tensor, Variable] = {}
    with body, in_sequence():
        step_seed = None
        if seed_var is not None:
            seed_local = graph_input(SEED_SPEC.shape, SEED_SPEC.dtype, "seed")
            wiring[seed_local] = seed_var
            step_seed, next_seed = ops.split_random_seed(seed_local)
            copy_var_update_(seed_local, next_seed)
            if ir.replication_factor > 1:
                step_seed = _replica_seed(step_seed, ir.replication_factor)
        outs, body_params = model.build([ops.host_load(s) for s in streams], step_seed)
        shown = [t for i, t in enumerate(outs) if i not in (updates or {})]
        with ir.main_graph:
            out_streams = [d2h_stream(t.shape, t.dtype, f"output{i}") for i, t in enumerate(shown)]
        for s, t in zip(out_streams, shown):
            ops.host_store(s, t)
        for index, name in (updates or {}).items():
            copy_var_update_(body_params[name], outs[index])
    wiring.update((t, model.variables[k]) for k, t in body_params.items())
    _loop(ir, body, ir.num_host_transfers, wiring)
    return InferenceStep(tuple(streams), tuple(out_streams), model.variables,
                         ir.num_host_transfers, seed_var)
