"""Print the max abs error against HuggingFace of every layer family at 1, 2 and 4
tensor-parallel replicas (the largest over outputs, input and variable gradients, and every
replica). Run from the repository root: ``python tests/apps/report.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import xlgraph as popxl  # noqa: E402
from apps import test_bert_pretraining as bert  # noqa: E402
from apps import test_encoder_families as enc  # noqa: E402
from apps import test_gpt_blocks as gpt  # noqa: E402
from apps import test_lm_head as lm  # noqa: E402
from apps import test_phased_layers as phased  # noqa: E402

F16 = popxl.float16

CASES = {
    "GPT-2/GPT-3 block f32": lambda tp: gpt.gpt2_case(tp).errors(),
    "GPT-2/GPT-3 block f16 (relative)": lambda tp: gpt.gpt2_case(tp, popxl.float16).errors(True),
    "GPT-J block f32": lambda tp: gpt.gptj_case(tp).errors(),
    "GPT-J block f16 (relative)": lambda tp: gpt.gptj_case(tp, popxl.float16).errors(True),
    "BERT layer f32": lambda tp: enc.bert_case(tp).errors(),
    "BERT layer f16 (relative)": lambda tp: enc.bert_case(tp, F16).errors(True),
    "T5 encoder attention f32": lambda tp: enc.t5_case(tp, False).errors(),
    "T5 encoder attention f16 (relative)": lambda tp: enc.t5_case(tp, False, F16).errors(True),
    "T5 decoder attention f32": lambda tp: enc.t5_case(tp, True).errors(),
    "T5 decoder attention f16 (relative)": lambda tp: enc.t5_case(tp, True, F16).errors(True),
    "T5 encoder block (self+FF) f32": lambda tp: enc.t5_block_case(tp, False).errors(),
    "T5 decoder block (self+cross+FF) f32": lambda tp: enc.t5_block_case(tp).errors(),
    "Bloom ALiBi attention f32": lambda tp: enc.bloom_case(tp).errors(),
    "Bloom ALiBi attention f16 (relative)": lambda tp: enc.bloom_case(tp, F16).errors(True),
    "Bloom block f32": lambda tp: enc.bloom_case(tp, block=True).errors(),
    "Bloom block f16 (relative)": lambda tp: enc.bloom_case(tp, F16, True).errors(True),
    "GPT-2 LM, sharded CE f32": lambda tp: lm.lm_case(tp).errors(),
    "2 GPT-2 layers, phased, remote f32": phased.phased_case,
    "BERT pretraining, sharded CE f32": lambda tp: bert.bert_pretraining_case(tp).errors(),
}


def main() -> None:
    print(f"{'family':38} {'tp=1':>10} {'tp=2':>10} {'tp=4':>10}")
    for name, case in CASES.items():
        errs = [max(case(tp).values()) for tp in (1, 2, 4)]
        print(f"{name:38} " + " ".join(f"{e:10.2e}" for e in errs))


if __name__ == "__main__":
    main()
