"""The machinery of ``benchmarks/transformer.py --size small`` (the step's matrix products and
the weight bytes a token reads, against torch's and HuggingFace's own counts) and of
``benchmarks/scale_out.py`` (two xlgraph instances equal one process of two replicas bit for
bit; PyTorch DDP trains alike). Nothing here is timed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpt_model as gm  # noqa: E402
import roofline  # noqa: E402
import scale_out  # noqa: E402

import xlgraph as popxl  # noqa: E402

CFG, BATCH = gm.TINY, 2


def test_the_small_size_is_gpt2_small() -> None:
    transformers = pytest.importorskip("transformers")
    import transformer

    conf = transformers.GPT2Config()  # the defaults are GPT-2 small's
    cfg, batch = transformer.SIZES[transformer.parse_args(["--size", "small"]).size]
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.vocab, cfg.positions) == (
        conf.n_layer, conf.n_embd, conf.n_head, conf.vocab_size, conf.n_positions)
    assert (cfg.mlp, cfg.seq, batch) == (4 * conf.n_embd, 128, 4)
    assert transformer.parse_args([]).size == "round5"


def test_step_products_are_the_products_torch_counts() -> None:
    torch = pytest.importorskip("torch")
    import gpt_peers
    from torch.utils.flop_counter import FlopCounterMode

    products = roofline.step_products(CFG, BATCH)
    step = gpt_peers.torch_train(CFG, gm.initial_weights(CFG))
    with FlopCounterMode(display=False) as counter:  # its CPU attention is not counted: mm only
        step(gm.token_batches(CFG, BATCH)[0])
    assert counter.get_total_flops() == roofline.flops([p for p in products if not p[0]])

    shape = (BATCH, CFG.heads, CFG.seq, CFG.head_dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as counter:  # attention as two batched products
        (torch.softmax(q @ k.transpose(-1, -2), -1) @ v).sum().backward()
    assert counter.get_total_flops() * CFG.layers == roofline.flops([p for p in products if p[0]])


def test_gemm_step_runs_each_product() -> None:
    products = [((), 3, 4, 5), ((2,), 3, 5, 4), ((), 3, 4, 5)]
    step = roofline.gemm_step(products)
    step(0)
    a, b, out = step.operands[1]
    np.testing.assert_array_equal(out, a @ b)
    assert [o[2].shape for o in step.operands] == [(3, 5), (2, 3, 4), (3, 5)]
    assert roofline.flops(products) == 2 * (60 + 2 * 60 + 60)


def test_a_token_reads_every_weight_but_the_position_table() -> None:
    pytest.importorskip("transformers")
    import gpt_peers

    weights = gm.initial_weights(CFG)
    model = gpt_peers.hf_model(CFG, weights)
    params = sum(p.numel() for p in model.parameters())  # the head is tied: counted once
    assert roofline.token_weight_bytes(weights) == 4 * (params - (CFG.positions - 1) * CFG.hidden)


def test_the_gemv_floor_reads_what_a_token_reads() -> None:
    weights = gm.initial_weights(CFG)
    step = roofline.gemv_step(weights, 2)
    step(0)
    x, head, out = step.operands[-1]
    np.testing.assert_array_equal(out, x @ weights["wte"].T)  # the tied head
    assert len(step.operands) == 6 * CFG.layers + 1
    vectors = sum(w.nbytes for w in weights.values() if w.ndim == 1)  # biases, LayerNorms
    read = sum(w.nbytes for _, w, _ in step.operands) + weights["wpe"][0].nbytes + vectors
    assert read == roofline.token_weight_bytes(weights)


def test_copy_step_copies() -> None:
    step = roofline.copy_step(1 << 12, 3)
    assert step.steps == 3
    assert roofline.copy_bandwidth(1 << 12, 1.0) == 2 * 4096 * 1e6


def replicated_run(steps: int = 2) -> tuple[list[float], str]:
    """One process, two replicas: instance i's batches as replica i's."""
    ir, tok_s, loss_s, named = gm.build_train(CFG, scale_out.BATCH, replicas=2)
    session = popxl.Session(ir)
    gm.load(session, named, gm.initial_weights(CFG))
    data = [gm.token_batches(CFG, scale_out.BATCH, count=4, seed=1 + r) for r in (0, 1)]
    with session:
        losses = [float(session.run({tok_s: np.stack([d[i] for d in data])})[loss_s][0])
                  for i in range(steps)]
        return losses, session.get_tensor_data(named["wte"]).tobytes().hex()


def test_two_instances_train_as_one_process_of_two_replicas() -> None:
    pytest.importorskip("mpi4py")
    job = scale_out.run_job("xlgraph", 2, 2, tiny=True, check=True)
    losses, wte = replicated_run()
    assert job["losses"][0] == losses[0]  # the same forward pass, bit for bit
    np.testing.assert_allclose(job["losses"], losses, rtol=1e-6)
    # one process sums its replicas' weight gradients inside one product (the all-reduce folded
    # into the matmul), the instances add their own products: the sums round differently
    theirs = np.frombuffer(bytes.fromhex(job["wte"]), np.float32)
    np.testing.assert_allclose(theirs, np.frombuffer(bytes.fromhex(wte), np.float32),
                               rtol=1e-5, atol=1e-7)
    alone = scale_out.run_job("xlgraph", 1, 2, tiny=True, check=True)
    assert alone["losses"][0] == losses[0] and alone["losses"][1] != losses[1]


def test_torch_ddp_trains_as_xlgraph_instances() -> None:
    pytest.importorskip("torch")
    ddp = scale_out.run_job("torch", 2, 2, tiny=True, check=True)
    losses, wte = replicated_run()
    np.testing.assert_allclose(ddp["losses"], losses, rtol=2e-5)
    theirs = np.frombuffer(bytes.fromhex(ddp["wte"]), np.float32)
    ours = np.frombuffer(bytes.fromhex(wte), np.float32)
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-7)
    assert not np.array_equal(ours, gm.initial_weights(CFG)["wte"].ravel())



def one_replica_run(seed: int, steps: int = 2) -> list[float]:
    """One process of one replica on the batches of ``seed``."""
    ir, tok_s, loss_s, named = gm.build_train(CFG, scale_out.BATCH)
    session = popxl.Session(ir)
    gm.load(session, named, gm.initial_weights(CFG))
    data = gm.token_batches(CFG, scale_out.BATCH, count=4, seed=seed)
    with session:
        return [float(session.run({tok_s: data[i]})[loss_s]) for i in range(steps)]


def test_a_ceiling_job_runs_independent_lone_processes() -> None:
    first, second = scale_out.run_alone("xlgraph", 2, 2, tiny=True, check=True)
    assert first["losses"] == one_replica_run(1)  # each trains alone on its own batches
    assert second["losses"] == one_replica_run(2)
    assert first["wte"] != second["wte"]
    # each in a session of its own (the kernel shares a busy machine's cores between sessions)
    assert len({first["session"], second["session"], os.getsid(0)}) == 3
