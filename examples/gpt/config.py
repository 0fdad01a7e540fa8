"""The example's configuration: named presets (``--config tiny``) and the applications'
command-line overrides (``--layers 2 --hidden_size 64 --heads 4 ...``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class GPTConfig:
    layers: int = 2
    hidden_size: int = 64
    heads: int = 4
    sequence_length: int = 32
    vocab_size: int = 0  # 0: the corpus's character count
    micro_batch_size: int = 8
    gradient_accumulation: int = 1
    data_parallel: int = 1
    steps: int = 300
    lr: float = 3e-3
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads


CONFIGS = {
    "tiny": GPTConfig(layers=1, hidden_size=32, heads=4, sequence_length=16, micro_batch_size=4,
                      steps=20),
    "small": GPTConfig(),
}


def parse(argv: list[str] | None, description: str,
          extra: dict[str, dict] | None = None) -> tuple[GPTConfig, argparse.Namespace]:
    """A preset chosen by ``--config``, each field overridable by ``--<field>``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    for f in fields(GPTConfig):
        parser.add_argument(f"--{f.name}", type=type(f.default), default=None)
    for name, kwargs in (extra or {}).items():
        parser.add_argument(name, **kwargs)
    args = parser.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(GPTConfig)
                 if getattr(args, f.name) is not None}
    return replace(CONFIGS[args.config], **overrides), args
