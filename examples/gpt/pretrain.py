"""Pretrain the small GPT on the shipped corpus (character level), application style: Adam,
gradient accumulation, data parallelism over replicas, TaskSession checkpoints; ``--phased``
keeps the weights in remote buffers and runs the step in phases (``phased.py``).

    python examples/gpt/pretrain.py --config tiny --checkpoint /tmp/gpt-ckpt
    python examples/gpt/pretrain.py --config tiny --phased --gradient_accumulation 2
    python examples/gpt/pretrain.py --steps 300 --checkpoint /tmp/gpt-ckpt
    python examples/gpt/pretrain.py --resume /tmp/gpt-ckpt --steps 100 --checkpoint /tmp/gpt-ckpt
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data  # noqa: E402
from config import GPTConfig, parse  # noqa: E402
from model import GPTLoss  # noqa: E402
from phased import adam, build_phased  # noqa: E402

import xlgraph as popxl  # noqa: E402
import xlgraph.addons as addons  # noqa: E402
from xlgraph import dist as popdist  # noqa: E402
from xlgraph import ops  # noqa: E402
from xlgraph.addons import NamedTensors, TaskSession  # noqa: E402
from xlgraph.addons.optimizers.adam import AdamOptimizerStep  # noqa: E402
from xlgraph.ipu import IPUModel  # noqa: E402


def build(cfg: GPTConfig, device: str, phased: bool = False,
          ) -> tuple[TaskSession, list, popxl.DeviceToHostStream]:
    """The training step: ``gradient_accumulation`` micro-batches forward and backward, the
    gradients averaged over them (and over the data-parallel replicas), one Adam update; in
    phased form with ``phased``."""
    # under poprun the job's replicas are the data-parallel ones, as in the applications
    ir = popxl.Ir(replication="popdist" if popdist.isPopdistEnvSet() else cfg.data_parallel)
    ir.num_host_transfers = cfg.gradient_accumulation
    rows = cfg.micro_batch_size * cfg.sequence_length
    with ir.main_graph:
        words_s = popxl.h2d_stream((rows,), popxl.int32, "words")
        labels_s = popxl.h2d_stream((rows,), popxl.int32, "labels")
        loss_s = popxl.d2h_stream((), popxl.float32, "loss")
        if phased:
            with popxl.in_sequence():
                state = build_phased(cfg, words_s, labels_s, loss_s)
        else:
            state = _plain(cfg, words_s, labels_s, loss_s)
    # the ipu_model device models a whole chip, as the applications' hardware runs
    chip = {"ipu_model": IPUModel.full()} if device == "ipu_model" else {}
    session = TaskSession([words_s, labels_s], [loss_s], NamedTensors.from_dict(state), 1, ir,
                          device, **chip)
    return session, [words_s, labels_s], loss_s


def _plain(cfg: GPTConfig, words_s: popxl.HostToDeviceStream,
           labels_s: popxl.HostToDeviceStream, loss_s: popxl.DeviceToHostStream,
           ) -> dict[str, popxl.Tensor]:
    """The plain step in the current main graph (every weight a variable); the state by name."""
    facts, graph, variables = initial_model(cfg)
    grad_graph = addons.autodiff(graph)
    positions = popxl.constant(np.tile(np.arange(cfg.sequence_length, dtype=np.int32),
                                       cfg.micro_batch_size), name="positions")
    grads: dict[str, popxl.Tensor] = {}
    for _ in range(cfg.gradient_accumulation):
        words, labels = ops.host_load(words_s), ops.host_load(labels_s)
        fwd = graph.bind(variables).call_with_info(words, positions, labels)
        ops.host_store(loss_s, fwd.outputs[0])
        seed = popxl.constant(1.0 / cfg.gradient_accumulation, popxl.float32)
        info = grad_graph.grad_graph_info
        call = grad_graph.call_with_info(seed, args=info.inputs_dict(fwd))
        to_grad = info.fwd_graph_ins_to_grad_parent_outs(call)
        for name, t in graph.args.to_dict().items():
            g = to_grad[t]
            grads[name] = grads[name] + g if name in grads else g
    optimizer = AdamOptimizerStep(cache=True)
    state = dict(variables.to_dict())
    for name, var in variables.to_dict().items():
        state.update(adam(optimizer, cfg, name, var, grads[name]))
    return state


def initial_model(cfg: GPTConfig) -> tuple[addons.NamedVariableFactories,
                                           addons.GraphWithNamedArgs, NamedTensors]:
    """``GPTLoss``'s graph and its variables in the current main graph, drawn from
    ``cfg.seed`` (the layers' initialisers draw from numpy's global generator)."""
    np.random.seed(cfg.seed)
    spec = popxl.TensorSpec((cfg.micro_batch_size * cfg.sequence_length,), popxl.int32)
    facts, graph = GPTLoss(cfg).create_graph(spec, spec, spec)
    return facts, graph, facts.init()


def initial_weights(cfg: GPTConfig) -> dict[str, np.ndarray]:
    """The weights the plain form starts from, by name (the phased form starts from them)."""
    with popxl.Ir().main_graph:
        _, _, variables = initial_model(cfg)
    return {name: t.initial_data for name, t in variables.to_dict().items()}


def main(argv: list[str] | None = None) -> list[float]:
    """Train; returns the loss of every step run."""
    cfg, args = parse(argv, __doc__.splitlines()[0], {
        "--checkpoint": dict(default=None, help="save the weights and state here at the end"),
        "--resume": dict(default=None, help="continue from this checkpoint"),
        "--device": dict(default="cpu", choices=["cpu", "ipu_model"]),
        "--phased": dict(action="store_true", help="weights in remote buffers, run in phases"),
        "--log_every": dict(type=int, default=10)})
    chars, tokens = data.load()
    cfg = replace(cfg, vocab_size=len(chars.chars))
    if popdist.isPopdistEnvSet():
        cfg = replace(cfg, data_parallel=popdist.getNumTotalReplicas())
    instance = popdist.getInstanceIndex()
    first = instance == 0  # only the first instance prints

    def batches(*keys: int) -> np.random.Generator:
        """Each instance reads its own batches."""
        return np.random.default_rng([*keys, instance] if instance else list(keys))

    session, (words_s, labels_s), loss_s = build(cfg, args.device, args.phased)
    rng = batches(cfg.seed)
    local = popdist.getNumLocalReplicas() if popdist.isPopdistEnvSet() else cfg.data_parallel
    per_step = cfg.gradient_accumulation * local * cfg.micro_batch_size
    lead = tuple(n for n in (cfg.gradient_accumulation, local) if n > 1)
    losses: list[float] = []
    with session:
        info = {"config": asdict(cfg), "phased": args.phased}
        session.add_session_state_info(info)
        if args.resume:  # the same names on both sides, or ValueError
            session.load_checkpoint(args.resume, report_missing="error")
            rng = batches(cfg.seed, session.session_state["steps"])
            if first:
                print(f"resumed from {args.resume} at step {session.session_state['steps']}")
            session.add_session_state_info(info)  # this run's, not saved
        elif args.phased:  # the plain form's initial weights
            weights = session.state.to_dict()
            session.write_variables_data({weights[n]: a for n, a in initial_weights(cfg).items()})
        start = time.perf_counter()
        for _ in range(cfg.steps):
            words, labels = data.windows(tokens, rng, per_step, cfg.sequence_length)
            out = session.run({words_s: words.reshape(*lead, -1),
                               labels_s: labels.reshape(*lead, -1)})
            losses.append(float(np.mean(out[loss_s])))
            step = session.session_state["steps"]
            if first and (step % args.log_every == 0 or step == 1):
                print(f"step {step:4d}  loss {losses[-1]:.3f}")
        seconds = time.perf_counter() - start
        rate = per_step * cfg.sequence_length * cfg.steps / seconds
        if first:
            print(f"{cfg.steps} steps in {seconds:.1f} s ({rate:.0f} tokens/s)")
        if args.device == "ipu_model":
            print(session.report())  # the modelled IPU's memory and cycles (estimates)
        if args.checkpoint:
            session.save_checkpoint(args.checkpoint)  # instance 0 writes
            if first:
                print(f"checkpoint: {args.checkpoint}")
    return losses


if __name__ == "__main__":
    main()
