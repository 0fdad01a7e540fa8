"""Training a model of embeddings, ``layers`` copies of one layer and a loss head in two forms,
as the applications' pretraining scripts do: the plain form (one graph, every weight a
variable) and the phased form (each part's weights in remote buffers, one entry per layer;
each phase loads its weights, runs ``batch_serialise_fwd_and_grad`` over the micro-batches of
a step with activations and their gradients in remote buffers, accumulates the weight
gradients with ``autodiff_with_accumulation``, applies Adam and stores the weights back).
Both take the same micro-batches and the same Adam, so their losses and weights agree to
float32 rounding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons import NamedTensors, TaskSession
from xlgraph.addons.named_replica_grouping import fill_none_group
from xlgraph.addons.optimizers.adam import AdamOptimizerStep
from xlgraph.addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise_fwd_and_grad,
)

LR = 1e-2


@dataclass(frozen=True)
class Parts:
    """The model: ``embeddings(*inputs) -> x``, ``layer(x) -> x`` (``layers`` times) and
    ``head(x, *labels) -> loss``; ``hidden`` is ``x``'s spec (one micro-batch)."""

    embeddings: Callable[[], addons.Module]
    layer: Callable[[], addons.Module]
    head: Callable[[], addons.Module]
    layers: int
    inputs: Sequence[popxl.TensorSpec]
    labels: Sequence[popxl.TensorSpec]
    hidden: popxl.TensorSpec
    replicas: int = 1  # data-parallel copies times the layers' tensor-parallel replicas


class Whole(addons.Module):
    """The plain form's model: ``embeddings``, ``layers.<i>``, ``head``."""

    def __init__(self, parts: Parts) -> None:
        super().__init__()
        self.parts = parts
        self.embeddings = parts.embeddings()
        self.layers = addons.Module.from_list([parts.layer() for _ in range(parts.layers)])
        self.head = parts.head()

    def build(self, *args: popxl.Tensor) -> popxl.Tensor:
        n = len(self.parts.inputs)
        x = self.embeddings(*args[:n])
        for layer in self.layers:
            x = layer(x)
        return self.head(x, *args[n:])


def _adam(optimizer: AdamOptimizerStep, var: popxl.Tensor, grad: popxl.Tensor, name: str,
          group: popxl.ReplicaGrouping) -> dict[str, popxl.Tensor]:
    """One Adam update of ``var`` from ``grad`` averaged over ``group``, the replicas that hold
    the same value of it (the data-parallel copies); its state variables by name."""
    if group.group_size > 1:
        grad = ops.collectives.replicated_all_reduce(grad, op="mean", group=group)
    facts, graph = optimizer.create_graph(  # lr a float32 scalar input, as in the scripts
        var, grad.spec, lr=popxl.TensorSpec((), popxl.float32), weight_decay=0.0,
        first_order_dtype=popxl.float32)
    state = facts.init(prefix=f"optimizer.{name}")
    graph.bind(state).call(var, grad, popxl.constant(LR, popxl.float32, name="lr"))
    return {f"optimizer.{name}.{k}": t for k, t in state.to_dict().items()}


def _streams(parts: Parts) -> list[popxl.HostToDeviceStream]:
    specs = [*parts.inputs, *parts.labels]
    return [popxl.h2d_stream(s.shape, s.dtype, f"input{i}") for i, s in enumerate(specs)]


def plain(parts: Parts, steps: int) -> tuple[TaskSession, list, popxl.DeviceToHostStream]:
    """The plain form: ``steps`` micro-batches forward and backward per run, the gradients
    averaged (seeded with ``1 / steps``), one Adam update of every variable."""
    ir = popxl.Ir(replication=parts.replicas)
    ir.num_host_transfers = steps
    with ir.main_graph, popxl.in_sequence():
        streams = _streams(parts)
        loss_s = popxl.d2h_stream((), popxl.float32, "loss")
        facts, graph = Whole(parts).create_graph(*parts.inputs, *parts.labels)
        variables = facts.init()
        grad_graph = addons.autodiff(graph, grads_required=graph.args.tensors)
        info = grad_graph.grad_graph_info
        grads: dict[str, popxl.Tensor] = {}
        for _ in range(steps):
            fwd = graph.bind(variables).call_with_info(*map(ops.host_load, streams))
            ops.host_store(loss_s, fwd.outputs[0])
            seed = popxl.constant(1.0 / steps, popxl.float32)
            to_grad = info.fwd_graph_ins_to_grad_parent_outs(
                grad_graph.call_with_info(seed, args=info.inputs_dict(fwd)))
            for name, t in graph.args.to_dict().items():
                grads[name] = grads[name] + to_grad[t] if name in grads else to_grad[t]
        state = dict(variables.to_dict())
        optimizer = AdamOptimizerStep(cache=True)
        groups = facts.replica_groupings
        for name, var in variables.to_dict().items():
            state.update(_adam(optimizer, var, grads[name], name, groups.get(name)))
    session = TaskSession(streams, [loss_s], NamedTensors.from_dict(state), 1, ir, "cpu")
    return session, streams, loss_s


class _Phase:
    """One part in the phased form: its forward graph, the gradient graph accumulating its
    weights' gradients (and returning its first input's when ``input_grad``), its weights in
    remote buffers (``entries`` of them) and their load and store graphs."""

    def __init__(self, module: addons.Module, specs: Sequence[popxl.TensorSpec],
                 input_grad: bool, entries: int, names: list[str]) -> None:
        self.facts, self.fwd = module.create_graph(*specs)
        self.accum_facts, self.bwd = addons.autodiff_with_accumulation(
            self.fwd, self.fwd.args.tensors,
            grads_required=self.fwd.graph.inputs[:1] if input_grad else [])
        self.buffers = addons.named_variable_buffers(self.facts, entries=entries,
                                                     shard_over_dict=False)
        self.variables = [self.facts.init_remote(self.buffers, i, prefix=name)
                          for i, name in enumerate(names)]
        self.accums = [self.accum_facts.init(prefix=f"accum.{name}") for name in names]
        self.load, self.load_names = addons.load_remote_graph(self.buffers, entries=entries)
        self.store = addons.store_remote_graph(self.buffers, entries=entries)
        self.names = names
        self.optimizer = AdamOptimizerStep(cache=True)
        self.state: dict[str, popxl.Tensor] = {}

    def weights(self, entry: int) -> NamedTensors:
        return NamedTensors.pack(self.load_names, self.load.call(entry))

    def backward_and_update(self, bwd: Any, entry: int, row: int) -> None:
        """Load the weights of ``entry``, run the batch-serialised gradient over the step's
        micro-batches, apply Adam to the weights from the mean gradients, store them back and
        restart the mean."""
        weights, accum = self.weights(entry), self.accums[entry]
        bwd.graph.bind(NamedTensors.from_dict({**weights.to_dict(), **accum.to_dict()})).call(row)
        groups = self.facts.replica_groupings
        for name, t in weights.to_dict().items():
            self.state.update(_adam(self.optimizer, t, accum.accum.get(name),
                                    f"{self.names[entry]}.{name}", groups.get(name)))
        ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)
        self.store.bind(weights).call(entry)


def phased(parts: Parts, steps: int) -> tuple[TaskSession, list, popxl.DeviceToHostStream]:
    """The phased form over ``steps`` micro-batches per run (see the module docstring)."""
    ir = popxl.Ir(replication=parts.replicas)
    ir.num_host_transfers = steps
    ir._pb_ir.getSessionOptions().numIOTiles = 32  # batch-serialised transfers on IO tiles
    layers = parts.layers
    with ir.main_graph, popxl.in_sequence():
        streams = _streams(parts)
        loss_s = popxl.d2h_stream((), popxl.float32, "loss")
        emb = _Phase(parts.embeddings(), parts.inputs, False, 1, ["embeddings"])
        layer = _Phase(parts.layer(), [parts.hidden], True, layers,
                       [f"layers.{i}" for i in range(layers)])
        head = _Phase(parts.head(), [parts.hidden, *parts.labels], True, 1, ["head"])
        # activations and their gradients: row i holds layer i's input, row `layers` the head's
        xs = batch_serial_buffer(parts.hidden, steps, rows=layers + 1)
        dxs = batch_serial_buffer(parts.hidden, steps, rows=layers + 1)
        ones = batch_serial_buffer(popxl.TensorSpec((), popxl.float32), steps)
        for i in range(steps):  # the loss gradient each micro-batch starts from
            popxl.remote_variable(np.float32(1.0), ones, i)
        n = len(parts.inputs)
        fwd_e, bwd_e = batch_serialise_fwd_and_grad(
            emb.fwd, emb.bwd, emb.fwd.args, steps,
            load_handles={**dict(zip(emb.fwd.graph.inputs, streams[:n])),
                          emb.bwd.graph.inputs[0]: RemoteHandle(dxs, 0)},
            store_streams={}, store_buffers={emb.fwd.graph.outputs[0]: RemoteHandle(xs, 0)})
        fwd_l, bwd_l = batch_serialise_fwd_and_grad(
            layer.fwd, layer.bwd, layer.fwd.args, steps,
            load_handles={layer.fwd.graph.inputs[0]: RemoteHandle(xs, 0),
                          layer.bwd.graph.inputs[0]: RemoteHandle(dxs, 1)},
            store_streams={}, store_buffers={layer.fwd.graph.outputs[0]: RemoteHandle(xs, 1),
                                             layer.bwd.graph.outputs[0]: RemoteHandle(dxs, 0)},
            rows=layers)
        head_ins = head.fwd.graph.inputs
        fwd_h, bwd_h = batch_serialise_fwd_and_grad(
            head.fwd, head.bwd, head.fwd.args, steps,
            load_handles={head_ins[0]: RemoteHandle(xs, layers),
                          **dict(zip(head_ins[1:1 + len(parts.labels)], streams[n:])),
                          head.bwd.graph.inputs[0]: (ones, None)},
            store_streams={head.fwd.graph.outputs[0]: loss_s},
            store_buffers={head.bwd.graph.outputs[0]: RemoteHandle(dxs, layers)})

        fwd_e.graph.bind(emb.weights(0)).call(0)
        for i in range(layers):
            fwd_l.graph.bind(layer.weights(i)).call(i)
        fwd_h.graph.bind(head.weights(0)).call(0)
        head.backward_and_update(bwd_h, 0, 0)
        for i in reversed(range(layers)):
            layer.backward_and_update(bwd_l, i, i)
        emb.backward_and_update(bwd_e, 0, 0)
    state: dict[str, popxl.Tensor] = {}
    for phase in (emb, layer, head):
        for name, variables in zip(phase.names, phase.variables):
            state.update({f"{name}.{k}": t for k, t in variables.to_dict().items()})
        state.update(phase.state)
    session = TaskSession(streams, [loss_s], NamedTensors.from_dict(state), 1, ir, "cpu")
    return session, streams, loss_s


def train(form: Callable[[Parts, int], tuple[TaskSession, list, Any]], parts: Parts,
          steps: int, start: dict[str, np.ndarray], batches: list[list[np.ndarray]],
          ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Train ``form`` from the weights ``start`` (by name; optimizer state starts at zero) on
    ``batches`` (one list of ``(steps, [replicas,] *spec)`` arrays per run); returns each
    run's losses and every weight after the last."""
    session, streams, loss_s = form(parts, steps)
    weights = {n: t for n, t in session.state.to_dict().items() if n in start}
    assert sorted(weights) == sorted(start), sorted(set(weights) ^ set(start))
    losses = []
    with session:
        session.write_variables_data({weights[n]: a for n, a in start.items()})
        for arrays in batches:
            losses.append(session.run(dict(zip(streams, arrays)))[loss_s])
        after = session.get_tensors_data(list(weights.values()))
    return losses, {n: after[t] for n, t in weights.items()}


def initial_weights(parts: Parts, seed: int) -> dict[str, np.ndarray]:
    """Random weights for every variable of the model, by name (``Whole``'s names, which the
    phased form shares)."""
    rng = np.random.default_rng(seed)
    ir = popxl.Ir(replication=parts.replicas)
    with ir.main_graph:
        facts, _ = Whole(parts).create_graph(*parts.inputs, *parts.labels)
    out = {}
    for name, f in facts.to_dict().items():
        scale = 0.5 if len(f.shape) == 1 else 0.2
        groups = fill_none_group(f.replica_grouping).num_groups  # one value per group
        shape = (groups, *f.shape) if groups > 1 else f.shape
        out[name] = (rng.normal(size=shape) * scale).astype(f.dtype.as_numpy())
        if name.endswith(("norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
            out[name] = (1.0 + out[name] * 0.2).astype(out[name].dtype)
    return out
