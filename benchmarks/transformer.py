"""Benchmark: a GPT-style decoder's training step and generation in xlgraph vs PyTorch, JAX
and HuggingFace.

The decoder (``gpt_model.py``): 4 layers, hidden 256, 4 heads, MLP 1024, vocabulary 8192,
sequence 128, causal attention, pre-LayerNorm, tanh GELU, tied embeddings, learnt positions.
``train_b8``: a training step at batch 8 (forward, cross-entropy, backward, AdamW) in xlgraph
(popxl-addons ``Module``s), PyTorch eager, ``torch.compile`` and JAX ``jit`` (donated,
asynchronous); ``train_b8_half``: the same step in low precision (xlgraph: float16 weights and
activations, float32 loss and moments, loss scaling 1024; torch: bfloat16 autocast, or
float16 with ``--torch-half float16``, the slower on CPUs without float16 arithmetic, and then
torch eager's bfloat16 step beside it as ``torch_bfloat16``; JAX: the forward in bfloat16).
``--contenders`` picks the training contenders. ``generate_b1`` and
``generate_b8``: 128 greedy tokens after an 8-token prompt with a KV cache, xlgraph
(``gpt_generate.py``: the prompt in one run, then a run per token) against HuggingFace
``generate`` on the same weights. ``peak_rss_bytes``: the peak resident memory of
a fresh process that builds one contender and runs 3 training steps (imports included).
Every contender is made once and timed in one process in interleaved rounds (medians), at each
thread count of ``--threads``; ``best`` keeps each one's faster setting.

``--size small``: GPT-2 small's shape (12 layers, hidden 768, 12 heads, MLP 3072, vocabulary
50,257, sequence 128): ``train_small`` at batch 4 against the same peers, timed beside numpy
running the step's own matrix products (``roofline.py``): ``gemm_fraction`` is the step's
FLOPs over its time as a fraction of that GEMM rate. ``generate_small_b1`` against
HuggingFace, timed beside a memory copy: ``bandwidth_fraction`` is the weight bytes every
token reads over the time per token, as a fraction of the copy bandwidth; and beside numpy
running each token's vector products alone (``roofline.gemv_step``): ``gemv_fraction`` is that
time over the contender's, 1 for a decode step that only streams its weights.

Run: ``PYTHONPATH=. python benchmarks/transformer.py [--quick] [--threads 1 2] [--size small]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_generate  # noqa: E402
import gpt_model as gm  # noqa: E402
import gpt_peers  # noqa: E402
import roofline  # noqa: E402
from harness import interleaved, machine, xlgraph_blas  # noqa: E402
from mlp import best_setting, summary, with_threads  # noqa: E402

import xlgraph as popxl  # noqa: E402

TRAIN = ("xlgraph", "torch", "torch_compile", "jax")
SIZES = {"round5": (gm.FULL, 8), "small": (gm.SMALL, 4)}  # decoder and training batch
PROMPT, NEW = 8, 128
COMPILE_S: dict[str, float] = {}


def xlgraph_train(cfg: gm.Config, weights: dict[str, np.ndarray], batch: int,
                  half: bool = False) -> tuple[Callable[[np.ndarray], Any], popxl.Session]:
    ir, tok_s, loss_s, named = gm.build_train(cfg, batch, half=half)
    session = popxl.Session(ir, blas_threads=None)  # BLAS at the benchmark's setting
    gm.load(session, named, weights)
    session.wait_for_kernels()
    session.__enter__()
    return (lambda tokens: session.run({tok_s: tokens})[loss_s]), session


def make_train(name: str, cfg: gm.Config, weights: dict[str, np.ndarray], batch: int,
               half: bool, data: list[np.ndarray], torch_half: str = "bfloat16",
               ) -> tuple[Callable[[int], Any], Any]:
    """``step(i)`` running contender ``name`` on ``data[i % len(data)]`` (torch's low precision:
    autocast to ``torch_half``), and its Session."""
    session = None
    if name == "xlgraph":
        fn, session = xlgraph_train(cfg, weights, batch, half)
    elif name == "jax":
        fn = gpt_peers.jax_train(cfg, weights, half)
    else:
        fn = gpt_peers.torch_train(cfg, weights, compiled=name == "torch_compile", half=half,
                                   half_dtype=torch_half)
        if name == "torch_compile":  # compile outside the timed loops
            start = time.perf_counter()
            fn(data[0])
            COMPILE_S[f"train_b{batch}{'_half' if half else ''}"] = round(
                time.perf_counter() - start, 1)

    def step(i: int) -> Any:
        return fn(data[i % len(data)])

    if hasattr(fn, "finish"):
        step.finish = fn.finish
    return step, session


def make_generate(name: str, cfg: gm.Config, weights: dict[str, np.ndarray], batch: int,
                  ) -> tuple[Callable[[int], Any], Any]:
    new = min(NEW, cfg.positions - PROMPT)
    prompt = gm.token_batches(cfg, batch, 1, seed=2)[0][:, :PROMPT]
    session = None
    if name == "xlgraph":
        fn = session = gpt_generate.Generator(cfg, weights, batch, PROMPT, new, blas_threads=None)
        session.wait_for_kernels()  # compiled outside the timed loops, as for training
    else:
        fn = gpt_peers.hf_generate(cfg, weights, new)
    return (lambda i: fn(prompt)), session


def time_set(makers: dict[str, Callable[[], tuple[Any, Any]]], threads: list[int], calls: int,
             rounds: int) -> dict[int, dict[str, dict[str, float]]]:
    """Make each contender once (skipping those whose package is missing), then time them all
    at each thread count."""
    steps, sessions, out = {}, [], {}
    try:
        for name, make in makers.items():
            try:
                steps[name], session = make()
            except ImportError:
                continue
            sessions.append(session)
        for n in threads:
            with with_threads(n):
                out[n] = interleaved(steps, calls, rounds=rounds, warmup=1)
    finally:
        for session in sessions:
            if session is not None:
                session.__exit__(None, None, None)
    return out


def peak_rss(name: str, cfg: gm.Config, batch: int, steps: int = 3) -> int:
    """Peak resident bytes of this process after making contender ``name`` and running
    ``steps`` training steps."""
    data = gm.token_batches(cfg, batch)
    step, _ = make_train(name, cfg, gm.initial_weights(cfg), batch, False, data)
    for i in range(steps):
        step(i)
    if hasattr(step, "finish"):
        step.finish()
    try:  # this program's high-water mark (ru_maxrss keeps the forking parent's after exec)
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_in_fresh_process(name: str, tiny: bool) -> int | None:
    cmd = [sys.executable, __file__, "--rss-of", name] + (["--tiny"] if tiny else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode != 0:
        return None
    return int(done.stdout.strip().splitlines()[-1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="BLAS and torch thread counts to time")
    parser.add_argument("--quick", action="store_true", help="short loops (3 rounds)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds per case (default: 3 with --quick, else 5); "
                             "more rounds make the medians steadier on a noisy machine")
    parser.add_argument("--size", choices=SIZES, default="round5",
                        help="round5: the 4-layer decoder at batch 8 (float32 and float16 "
                             "steps, memory, generation at batch 1 and 8); small: GPT-2 small "
                             "at batch 4 (float32 step and generation at batch 1, each beside "
                             "the machine's GEMM rate and copy bandwidth)")
    parser.add_argument("--tiny", action="store_true",
                        help="the tiny decoder of the tests (a smoke run, not a figure)")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["train", "half", "generate", "rss"], help="parts not to run")
    parser.add_argument("--torch-half", default="bfloat16", choices=["bfloat16", "float16"],
                        help="torch's autocast dtype in the low-precision step (bfloat16 is "
                             "the faster on CPUs without float16 arithmetic); with float16, "
                             "torch eager's bfloat16 step is timed beside it (torch_bfloat16)")
    parser.add_argument("--contenders", nargs="+", default=list(TRAIN), choices=TRAIN,
                        help="the training contenders to time (xlgraph's ratios are to these)")
    parser.add_argument("--rss-of", choices=TRAIN, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def train_case(key: str, cfg: gm.Config, weights: dict[str, np.ndarray], batch: int,
               half: bool, args: argparse.Namespace, roof: bool) -> dict[str, Any]:
    """Time the training contenders (``roof``: beside ``roofline.gemm_step`` on the step's own
    products) and return ``{"threads_<n>": timings}`` and the best setting's summary."""
    data = gm.token_batches(cfg, batch)
    makers = {n: (lambda n=n: make_train(n, cfg, weights, batch, half, data, args.torch_half))
              for n in TRAIN if n in args.contenders}
    if half and args.torch_half == "float16" and "torch" in args.contenders:
        # torch's bfloat16 autocast beside its float16 one (another arithmetic, not a target)
        makers["torch_bfloat16"] = lambda: make_train("torch", cfg, weights, batch, half, data,
                                                      "bfloat16")
    products = roofline.step_products(cfg, batch)
    if roof:
        makers["gemm"] = lambda: (roofline.gemm_step(products), None)
    timings = time_set(makers, args.threads, calls=1, rounds=args.rounds)
    best = best_setting({n: {key: t} for n, t in timings.items()}, key, args.threads)
    gemm = best.pop("gemm", None)
    out = summary(best, batch)
    if gemm is not None:  # FLOPs over time, as a fraction of numpy's rate on the same products
        step_flops = roofline.flops(products)
        out["step_gflop"] = round(step_flops / 1e9, 2)
        out["gemm_gflop_per_s"] = round(step_flops / gemm["median"] / 1e3, 1)
        out["gemm_blas"] = xlgraph_blas()
        out["gemm_fraction"] = {n: round(gemm["median"] / t["median"], 3)
                                for n, t in best.items()}
    return {**{f"threads_{n}": t for n, t in timings.items()}, "best": out}


def generate_case(key: str, cfg: gm.Config, weights: dict[str, np.ndarray], batch: int,
                  args: argparse.Namespace, roof: bool) -> dict[str, Any]:
    """Time generation (``roof``: beside ``roofline.copy_step`` and ``roofline.gemv_step``)
    and return its timings and the best setting's tokens per second (and fractions of the copy
    bandwidth and of the weight-streaming floor)."""
    makers = {n: (lambda n=n: make_generate(n, cfg, weights, batch)) for n in ("xlgraph", "hf")}
    copy_bytes = 1 << 27
    new = min(NEW, cfg.positions - PROMPT)
    runs = new  # passes over the weights: the prompt's (one run), then a run per token after
    if roof:
        makers["copy"] = lambda: (roofline.copy_step(copy_bytes, 8), None)
        makers["gemv"] = lambda: (roofline.gemv_step(weights, runs), None)
    timings = time_set(makers, args.threads, calls=1, rounds=args.rounds)
    best = best_setting({n: {key: t} for n, t in timings.items()}, key, args.threads)
    copy, gemv = best.pop("copy", None), best.pop("gemv", None)
    tps = {n: round(batch * new / (t["median"] / 1e6), 1) for n, t in best.items()}
    out: dict[str, Any] = {"tokens_per_s": tps,
                           "us_per_generate": {n: t["median"] for n, t in best.items()}}
    if len(tps) == 2:
        out["ratio_xlgraph_over_hf"] = round(tps["xlgraph"] / tps["hf"], 3)
    if copy is not None:
        bandwidth = roofline.copy_bandwidth(copy_bytes, copy["median"])
        per_token = roofline.token_weight_bytes(weights)
        out["copy_gb_per_s"] = round(bandwidth / 1e9, 2)
        out["weight_mb_per_token"] = round(per_token / 1e6, 1)
        out["bandwidth_fraction"] = {
            n: round(per_token * runs / (t["median"] * 1e-6) / bandwidth, 3)
            for n, t in best.items()}
    if gemv is not None:  # numpy's products alone over the contender's time: 1 at the floor
        out["gemv_gb_per_s"] = round(roofline.token_weight_bytes(weights) * runs
                                     / gemv["median"] / 1e3, 2)
        out["gemv_fraction"] = {n: round(gemv["median"] / t["median"], 3)
                                for n, t in best.items()}
    return {**{f"threads_{n}": t for n, t in timings.items()}, "best": out}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cfg, batch = SIZES[args.size]
    if args.tiny:
        cfg = gm.TINY
    if args.rss_of:
        print(peak_rss(args.rss_of, cfg, batch))
        return
    weights = gm.initial_weights(cfg)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    result: dict[str, Any] = {"benchmark": "transformer", "size": args.size, "machine": machine(),
                              "config": cfg.__dict__, "torch_half": args.torch_half, "best": {}}
    small = args.size == "small"
    cases = [("train_small", False)] if small else [("train_b8", False), ("train_b8_half", True)]
    for key, half in cases:
        if ("half" if half else "train") in args.skip:
            continue
        result[key] = train_case(key, cfg, weights, batch, half, args, roof=small)
        result["best"][key] = result[key].pop("best")
        print(json.dumps({key: result["best"][key]}), file=sys.stderr, flush=True)  # progress
    if "rss" not in args.skip and not small:
        names = ("xlgraph", "torch") if args.quick else TRAIN
        result["best"].setdefault("train_b8", {})["peak_rss_bytes"] = {
            n: rss_in_fresh_process(n, args.tiny) for n in names}
    if "generate" not in args.skip:
        for b in (1,) if small else (1, 8):
            key = f"generate_small_b{b}" if small else f"generate_b{b}"
            result[key] = generate_case(key, cfg, weights, b, args, roof=small)
            result["best"][key] = result[key].pop("best")
            print(json.dumps({key: result["best"][key]}), file=sys.stderr, flush=True)
    result["torch_compile_first_call_s"] = COMPILE_S
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))

if __name__ == "__main__":
    main()
