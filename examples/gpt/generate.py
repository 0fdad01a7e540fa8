"""Generate text with a pretrained checkpoint: one token per step, keys and values kept in
a cache that each step updates in place (``dynamic_update_``), greedy decoding.

    python examples/gpt/generate.py --checkpoint /tmp/gpt-ckpt --prompt "the "
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data  # noqa: E402
from config import GPTConfig, parse  # noqa: E402
from model import GPTDecodeStep  # noqa: E402

import xlgraph as popxl  # noqa: E402
from xlgraph import ops  # noqa: E402
from xlgraph.addons import NamedTensors, TaskSession  # noqa: E402


def saved_config(checkpoint: str) -> GPTConfig:
    """The configuration the checkpoint was trained with (its session_info.json)."""
    info = json.loads((Path(checkpoint) / "session_info.json").read_text())
    names = {f.name for f in fields(GPTConfig)}
    return GPTConfig(**{k: v for k, v in info["config"].items() if k in names})


def main(argv: list[str] | None = None) -> str:
    _, args = parse(argv, __doc__.splitlines()[0], {
        "--checkpoint": dict(required=True, help="a folder written by pretrain.py"),
        "--prompt": dict(default="the "),
        "--tokens": dict(type=int, default=0, help="how many to generate (0: to the end of "
                                                   "the model's sequence length)"),
        "--device": dict(default="cpu", choices=["cpu", "ipu_model"])})
    cfg = saved_config(args.checkpoint)
    chars, _ = data.load()
    prompt = chars.encode(args.prompt)
    room = cfg.sequence_length - len(prompt)
    if room <= 0:
        raise SystemExit(f"the prompt has {len(prompt)} characters; the model sees "
                         f"{cfg.sequence_length}")
    count = min(args.tokens or room, room)
    ir = popxl.Ir()
    with ir.main_graph:
        word_s = popxl.h2d_stream((1,), popxl.int32, "word")
        position_s = popxl.h2d_stream((), popxl.int32, "position")
        next_s = popxl.d2h_stream((1,), popxl.int32, "next")
        facts, graph = GPTDecodeStep(cfg).create_graph(
            popxl.TensorSpec((1,), popxl.int32), popxl.TensorSpec((), popxl.int32))
        variables = facts.init()
        logits, = graph.bind(variables).call(ops.host_load(word_s), ops.host_load(position_s))
        ops.host_store(next_s, ops.cast(ops.argmax(logits, dim=-1), popxl.int32))
    weights = {k: t for k, t in variables.to_dict().items() if "_cache" not in k}
    session = TaskSession([word_s, position_s], [next_s], NamedTensors.from_dict(weights), 1,
                          ir, args.device)
    out = list(prompt)
    with session:
        # a training checkpoint also holds the optimizer state: compare the weights only
        saved = {p.stem for p in Path(args.checkpoint, "model").glob("*.npz")}
        if set(weights) - saved:
            raise ValueError(f"{args.checkpoint} lacks weights {sorted(set(weights) - saved)}")
        session.load_checkpoint(args.checkpoint, report_missing="none")
        for position in range(len(prompt) + count - 1):
            step = session.run({word_s: np.array([out[position]], np.int32),
                                position_s: np.array(position, np.int32)})
            if position >= len(prompt) - 1:
                out.append(int(step[next_s][0]))
    text = chars.decode(np.array(out))
    print(text)
    return text


if __name__ == "__main__":
    main()
