"""The training step in phased form (``pretrain.py --phased``), as the applications' phased
pretraining scripts run it: every weight lives in remote buffers (the embeddings', each
block's in one entry of a shared set of buffers, the head's), and the step runs in phases.
Each phase loads its weights, runs ``batch_serialise_fwd_and_grad`` over the step's
micro-batches (activations and their gradients go through remote buffers, one row per
block), and after its backward pass applies Adam to the mean gradients and stores the
weights back. The variable names are the plain form's, so checkpoints move between the two
forms and ``generate.py`` reads either; from the same seed both train to the same weights
(to float32 rounding: the phased form averages the micro-batches' gradients as a running
mean)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from config import GPTConfig
from model import Block

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph import ops
from xlgraph.addons import NamedTensors
from xlgraph.addons.layers import Embedding, LayerNorm, Linear
from xlgraph.addons.ops.cross_entropy import cross_entropy
from xlgraph.addons.optimizers.adam import AdamOptimizerStep
from xlgraph.addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise_fwd_and_grad,
)


def adam(optimizer: AdamOptimizerStep, cfg: GPTConfig, name: str, var: popxl.Tensor,
         grad: popxl.Tensor) -> dict[str, popxl.Tensor]:
    """Average ``grad`` over the data-parallel replicas and apply one Adam update to ``var``;
    returns the optimizer's state variables (``optimizer.<name>.*``)."""
    if popxl.gir().replication_factor > 1:
        grad = ops.collectives.replicated_all_reduce(grad, op="mean")
    facts, graph = optimizer.create_graph(var, grad.spec, lr=cfg.lr, weight_decay=0.0,
                                          first_order_dtype=popxl.float32)
    state = facts.init(prefix=f"optimizer.{name}")
    graph.bind(state).call(var, grad)
    return {f"optimizer.{name}.{k}": t for k, t in state.to_dict().items()}


class Embeddings(addons.Module):
    """The first phase: word and position embeddings (the plain model's ``word``,
    ``positional``)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.word = Embedding(popxl.float32, cfg.vocab_size, cfg.hidden_size)
        self.positional = Embedding(popxl.float32, cfg.sequence_length, cfg.hidden_size)

    def build(self, words: popxl.Tensor) -> popxl.Tensor:
        positions = np.tile(np.arange(self.cfg.sequence_length, dtype=np.int32),
                            words.shape[0] // self.cfg.sequence_length)
        return self.word(words) + self.positional(popxl.constant(positions))


class Head(addons.Module):
    """The last phase: the final norm, the head and the mean cross-entropy."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_f = LayerNorm()
        self.head = Linear(cfg.vocab_size, bias=False)

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        return cross_entropy(self.head(self.ln_f(x)), labels)


class Phase:
    """A part of the model: forward graph, accumulating gradient graph, its weights in
    remote buffers (one entry per name in ``prefixes``) and its Adam state."""

    def __init__(self, module: addons.Module, specs: list[popxl.TensorSpec], input_grads: int,
                 prefixes: list[str | None]) -> None:
        self.facts, self.fwd = module.create_graph(*specs)
        self.accum_facts, self.bwd = addons.autodiff_with_accumulation(
            self.fwd, self.fwd.args.tensors, grads_required=self.fwd.graph.inputs[:input_grads])
        buffers = addons.named_variable_buffers(self.facts, len(prefixes), shard_over_dict=False)
        self.weights = [self.facts.init_remote(buffers, i, prefix) for i, prefix in
                        enumerate(prefixes)]
        self.accums = [self.accum_facts.init() for _ in prefixes]
        self.load, self.names = addons.load_remote_graph(buffers, len(prefixes))
        self.store = addons.store_remote_graph(buffers, len(prefixes))
        self.prefixes = prefixes
        self.state: dict[str, popxl.Tensor] = {}

    def named(self) -> dict[str, popxl.Tensor]:
        """Every weight by its plain-form name, and the Adam state."""
        out = dict(self.state)
        for prefix, weights in zip(self.prefixes, self.weights):
            out.update({f"{prefix}.{k}" if prefix else k: t
                        for k, t in weights.to_dict().items()})
        return out

    def loaded(self, entry: int) -> NamedTensors:
        return NamedTensors.pack(self.names, self.load.call(entry))

    def update(self, bwd: addons.GraphWithNamedArgs, entry: int, cfg: GPTConfig,
               optimizer: AdamOptimizerStep) -> None:
        """Backward over the step's micro-batches, Adam on the mean gradients, store."""
        weights, accum = self.loaded(entry), self.accums[entry]
        bwd.bind(NamedTensors.from_dict({**weights.to_dict(), **accum.to_dict()})).call(entry)
        prefix = self.prefixes[entry]
        for name, t in weights.to_dict().items():
            full = f"{prefix}.{name}" if prefix else name
            self.state.update(adam(optimizer, cfg, full, t, accum.accum.get(name)))
        ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)
        self.store.bind(weights).call(entry)


def build_phased(cfg: GPTConfig, words_s: popxl.HostToDeviceStream,
                 labels_s: popxl.HostToDeviceStream, loss_s: popxl.DeviceToHostStream,
                 ) -> dict[str, popxl.Tensor]:
    """The phased step in the current Ir's main graph; returns the state by name."""
    ir = popxl.gir()
    ir._pb_ir.getSessionOptions().numIOTiles = 32  # batch-serialised transfers on IO tiles
    steps, layers = cfg.gradient_accumulation, cfg.layers
    rows = cfg.micro_batch_size * cfg.sequence_length
    hidden = popxl.TensorSpec((rows, cfg.hidden_size), popxl.float32)
    ids = popxl.TensorSpec((rows,), popxl.int32)
    emb = Phase(Embeddings(cfg), [ids], 0, [None])
    block = Phase(Block(cfg), [hidden], 1, [f"layer{i}" for i in range(layers)])
    head = Phase(Head(cfg), [hidden, ids], 1, [None])
    xs = batch_serial_buffer(hidden, steps, rows=layers + 1)  # row i: block i's input
    dxs = batch_serial_buffer(hidden, steps, rows=layers + 1)
    seeds = batch_serial_buffer(popxl.TensorSpec((), popxl.float32), steps)
    for i in range(steps):  # each micro-batch's loss gradient
        popxl.remote_variable(np.float32(1.0), seeds, i)

    def serialise(phase: Phase, loads: dict, stores: dict, streams: dict | None = None,
                  n_rows: int = 1) -> tuple[Callable, addons.GraphWithNamedArgs]:
        fwd, bwd = batch_serialise_fwd_and_grad(phase.fwd, phase.bwd, phase.fwd.args, steps,
                                                loads, streams or {}, stores, rows=n_rows)
        return fwd.graph, bwd.graph

    fwd_e, bwd_e = serialise(emb, {emb.fwd.graph.inputs[0]: words_s,
                                   emb.bwd.graph.inputs[0]: RemoteHandle(dxs, 0)},
                             {emb.fwd.graph.outputs[0]: RemoteHandle(xs, 0)})
    fwd_b, bwd_b = serialise(block, {block.fwd.graph.inputs[0]: RemoteHandle(xs, 0),
                                     block.bwd.graph.inputs[0]: RemoteHandle(dxs, 1)},
                             {block.fwd.graph.outputs[0]: RemoteHandle(xs, 1),
                              block.bwd.graph.outputs[0]: RemoteHandle(dxs, 0)}, n_rows=layers)
    x, labels = head.fwd.graph.inputs[:2]
    fwd_h, bwd_h = serialise(head, {x: RemoteHandle(xs, layers), labels: labels_s,
                                    head.bwd.graph.inputs[0]: RemoteHandle(seeds, None)},
                             {head.bwd.graph.outputs[0]: RemoteHandle(dxs, layers)},
                             {head.fwd.graph.outputs[0]: loss_s})
    fwd_e.bind(emb.loaded(0)).call(0)
    for i in range(layers):
        fwd_b.bind(block.loaded(i)).call(i)
    fwd_h.bind(head.loaded(0)).call(0)
    optimizer = AdamOptimizerStep(cache=True)
    head.update(bwd_h, 0, cfg, optimizer)
    for i in reversed(range(layers)):
        block.update(bwd_b, i, cfg, optimizer)
    emb.update(bwd_e, 0, cfg, optimizer)
    return {**emb.named(), **block.named(), **head.named()}
