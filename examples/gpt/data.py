"""The shipped character corpus (``corpus.txt``) as integer tokens, and random training
windows from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().with_name("corpus.txt")


class Characters:
    """Characters of the corpus <-> token ids (sorted, so the mapping is stable)."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.ids = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> np.ndarray:
        unknown = sorted(set(text) - set(self.ids))
        if unknown:
            raise ValueError(f"characters not in the corpus: {''.join(unknown)!r}")
        return np.array([self.ids[c] for c in text], np.int32)

    def decode(self, ids: np.ndarray) -> str:
        return "".join(self.chars[int(i)] for i in np.ravel(ids))


def load() -> tuple[Characters, np.ndarray]:
    """The corpus's characters and its tokens."""
    text = CORPUS.read_text()
    chars = Characters(text)
    return chars, chars.encode(text)


def windows(tokens: np.ndarray, rng: np.random.Generator, count: int,
            length: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random windows of ``length`` tokens and the token after each, flattened to
    ``(count * length,)`` each (the applications' 2-D activations)."""
    starts = rng.integers(0, len(tokens) - length - 1, count)
    words = np.stack([tokens[s:s + length] for s in starts])
    labels = np.stack([tokens[s + 1:s + length + 1] for s in starts])
    return words.reshape(-1), labels.reshape(-1)
