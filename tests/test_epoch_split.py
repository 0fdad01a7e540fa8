"""``cli.EpochSplit``, the examples' timer: an epoch's wall time split into the training steps,
the waits for batches and the rest."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "mnist"))
import cli  # noqa: E402


class Slow:
    """Three batches, each ``delay`` seconds to load."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        for i in range(3):
            time.sleep(self.delay)
            yield i


def test_the_parts_add_up_and_the_first_epoch_names_the_compiling_step():
    split = cli.EpochSplit()
    for epoch in range(2):
        batches = split.batches(Slow(0.02))
        assert len(batches) == 3
        seen = []
        for i in batches:
            with split.step():
                time.sleep(0.05 if epoch == 0 and i == 0 else 0.01)
            time.sleep(0.005)  # the rest of the loop body
            seen.append(i)
        assert seen == [0, 1, 2]
        assert split.data_s >= 0.06 and split.steps_s >= 0.03
        other = split.wall_s - split.steps_s - split.data_s
        assert other >= 0.015 and split.wall_s >= split.steps_s + split.data_s
        text = split.summary()
        assert text.startswith(f"{split.wall_s:.2f} s: steps {split.steps_s:.2f} s, data ")
        assert ("compiled the model" in text) == (epoch == 0)
    assert split.first_step_s >= 0.05
