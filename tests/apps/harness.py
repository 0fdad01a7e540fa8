"""Run one application-style layer over tensor-parallel replicas and compare it with its
HuggingFace twin, forward and backward, the way the applications' layer tests do: load the HF
weights through the layer's own ``hf_mapping``, feed the same inputs to every replica, seed the
backward pass with the same gradient, and read outputs, input gradients and variable gradients
back per replica."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

import xlgraph as popxl
import xlgraph.addons as addons
from xlgraph.addons import NamedTensors, TaskSession


@dataclass(frozen=True)
class TinyConfig:
    """The applications' ``tiny`` test configuration (their config/*.yml ``tiny`` entries)."""

    hidden_size: int = 64
    heads: int = 4
    sequence_length: int = 8
    vocab_size: int = 128
    micro_batch_size: int = 2
    tensor_parallel: int = 1
    rotary_dim: int = 8
    eps: float = 1e-5
    dtype: popxl.dtype = popxl.float32

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads

    @property
    def ffn_size(self) -> int:
        return 4 * self.hidden_size

    def with_(self, **changes: Any) -> TinyConfig:
        return replace(self, **changes)


def sharded_grouping(config: TinyConfig) -> popxl.ReplicaGrouping:
    """Replicas holding the same shard of a tensor-parallel variable (one group per TP
    member): with data parallelism too (replica ``r`` is TP member ``r % tp`` of data-parallel
    copy ``r // tp``), the replicas ``tp`` apart."""
    tp, ir = config.tensor_parallel, popxl.gcg().ir
    return ir.replica_grouping(stride=tp, group_size=ir.replication_factor // tp)


def tp_group(config: TinyConfig) -> popxl.ReplicaGrouping:
    """The tensor-parallel group: the replicas whose shards make one whole layer."""
    return popxl.gcg().ir.replica_grouping(group_size=config.tensor_parallel)


def shard_host(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """``addons.array_munging.shard`` (a leading shard axis), as the mappings write it."""
    return addons.array_munging.shard(x, n, axis)


@dataclass
class Result:
    """Per replica (leading axis): outputs, input gradients, and variable gradients by name;
    the HF values to compare them with."""

    outputs: list[np.ndarray]
    input_grads: list[np.ndarray]
    var_grads: dict[str, np.ndarray]
    want_outputs: list[np.ndarray]
    want_input_grads: list[np.ndarray]
    want_var_grads: dict[str, np.ndarray]
    groups: dict[str, int] = field(default_factory=dict)  # name -> shards (num_groups)

    def errors(self, relative: bool = False) -> dict[str, float]:
        """Max abs error of each compared quantity over every replica (divided by the
        quantity's largest HF magnitude when ``relative``)."""
        pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        reps = self.outputs[0].shape[0]
        for i, (got, want) in enumerate(zip(self.outputs, self.want_outputs)):
            pairs[f"out{i}"] = [(got[r], want) for r in range(reps)]
        for i, (got, want) in enumerate(zip(self.input_grads, self.want_input_grads)):
            pairs[f"d_in{i}"] = [(got[r], want) for r in range(reps)]
        for name, got in self.var_grads.items():
            want, shards = self.want_var_grads[name], self.groups[name]
            pairs[f"d_{name}"] = [(got[r], want[r % shards] if shards > 1 else want)
                                  for r in range(reps)]
        out = {}
        for key, items in pairs.items():
            err = max(_err(g, w) for g, w in items)
            scale = max(float(np.max(np.abs(w))) for _, w in items) if relative else 1.0
            out[key] = err / max(scale, 1e-30)
        return out


# float16 keeps 11 significant bits (unit roundoff 4.9e-4) and each value passes through a few
# roundings (matmul results, norm statistics, the row sums of the weight gradients), so float16
# runs against HF in float32 are held to 1% of each quantity's largest magnitude.
FLOAT16_RELATIVE_TOL = 1e-2


def assert_float16_close(result: Result) -> None:
    """Every quantity of a float16 run within ``FLOAT16_RELATIVE_TOL`` of its largest value."""
    errors = result.errors(relative=True)
    assert max(errors.values()) < FLOAT16_RELATIVE_TOL, errors


def _err(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want)))


def grads_as_weights(hf_layer: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``hf_layer`` whose parameters hold their gradients, so a weight mapping (a
    linear re-indexing: transposes, splits, concatenations) maps gradients too."""
    twin = copy.deepcopy(hf_layer)
    for (_, p), (_, q) in zip(hf_layer.named_parameters(), twin.named_parameters()):
        q.data = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return twin


def compare(config: TinyConfig, make_module: Callable[[], addons.Module],
            hf_mapping: Callable[[TinyConfig, NamedTensors, torch.nn.Module], Any],
            hf_layer: torch.nn.Module, hf_forward: Callable[..., Sequence[torch.Tensor]],
            inputs: Sequence[np.ndarray], grad_inputs: Sequence[bool] | None = None,
            seed: int = 0, untrained: Sequence[str] = (),
            replica_inputs: dict[int, np.ndarray] | None = None) -> Result:
    """Run the module ``make_module()`` on ``inputs`` over ``config.tensor_parallel``
    replicas with the weights of ``hf_layer``; ``hf_forward(*torch_inputs)`` gives the HF
    outputs. Floating inputs (or those marked in ``grad_inputs``) get gradients; the output
    gradient seed is random. Variables named in ``untrained`` (constants held per replica
    group) are not compared. ``replica_inputs[i]`` (leading replica axis) replaces what
    replicas are fed for input ``i`` (e.g. indices offset into each replica's vocabulary
    shard); HF gets ``inputs[i]``."""
    tp = config.tensor_parallel
    floating = [np.issubdtype(a.dtype, np.floating) for a in inputs]
    grad_inputs = list(grad_inputs) if grad_inputs is not None else floating
    # HuggingFace, in float32
    t_inputs = [torch.tensor(a, requires_grad=g) for a, g in zip(inputs, grad_inputs)]
    hf_outs = hf_forward(*t_inputs)
    rng = np.random.default_rng(seed)
    seeds = [rng.normal(size=tuple(o.shape)).astype(np.float32) for o in hf_outs]
    torch.autograd.backward(list(hf_outs), [torch.tensor(s) for s in seeds])

    ir = popxl.Ir(replication=tp)
    with ir.main_graph:
        tensors, streams, feeds = [], [], {}
        for i, (a, f) in enumerate(zip(inputs, floating)):
            dtype = config.dtype if f else popxl.int32
            data, stream, t = addons.host_load(a, dtype, name=f"input{i}")
            tensors.append(t)
            streams.append(stream)
            feeds[stream] = np.broadcast_to(data, (tp, *data.shape)) if tp > 1 else data
            if replica_inputs and i in replica_inputs:
                feeds[stream] = replica_inputs[i].astype(data.dtype)
        facts, graph = make_module().create_graph(*tensors)
        variables = facts.init()
        grad_graph = addons.autodiff(graph)
        fwd = graph.bind(variables).call_with_info(*tensors)
        outs = list(fwd.outputs[:len(hf_outs)])
        seed_ts = [popxl.constant(s.astype(config.dtype.as_numpy()), name=f"seed{i}")
                   for i, s in enumerate(seeds)]
        info = grad_graph.grad_graph_info
        call = grad_graph.call_with_info(*seed_ts, args=info.inputs_dict(fwd))
        to_grad = info.fwd_graph_ins_to_grad_parent_outs(call)
        in_grads = [to_grad[graph.graph.inputs[i]] for i, g in enumerate(grad_inputs) if g]
        var_grads = {name: to_grad[t] for name, t in graph.args.to_dict().items()
                     if t in to_grad and name not in untrained}
        out_streams = [addons.host_store(t) for t in outs + in_grads]
        var_streams = {name: addons.host_store(t) for name, t in var_grads.items()}

    weights = hf_mapping(config, variables, hf_layer)
    grad_weights = hf_mapping(config, variables, grads_as_weights(hf_layer))
    session = TaskSession(streams, out_streams, variables, 1, ir, "cpu")
    with session:
        session.write_variables_data(weights)
        got = session.run(feeds)
    per_replica = [np.asarray(got[s], np.float32).reshape(tp, *s.shape) for s in out_streams]
    by_var = {name: variables.to_dict()[name] for name in var_streams}
    return Result(
        outputs=per_replica[:len(outs)], input_grads=per_replica[len(outs):],
        var_grads={n: np.asarray(got[s], np.float32).reshape(tp, *s.shape)
                   for n, s in var_streams.items()},
        want_outputs=[o.detach().numpy() for o in hf_outs],
        want_input_grads=[t.grad.numpy() for t, g in zip(t_inputs, grad_inputs) if g],
        want_var_grads={n: np.asarray(grad_weights[v]) for n, v in by_var.items()},
        groups={n: (v.replica_grouping.num_groups if v.replica_grouping is not None else 1)
                for n, v in by_var.items()},
    )
