"""``benchmarks/half.py``: each case's float16 program trains the network its float32 program
trains, and ``--quick`` prints the figures it promises (correctness only, not timings)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import half  # noqa: E402
from harness import interleaved  # noqa: E402


@pytest.mark.parametrize("case", half.CASES)
def test_float16_program_follows_the_float32_one(case: str) -> None:
    if case == "poptorch_cnn":
        pytest.importorskip("torch")
    got = half.losses(case, steps=3, tiny=True)
    assert all(np.isfinite(got[d]).all() for d in half.DTYPES)
    assert got["float32"][0] != got["float32"][-1]  # it trains
    np.testing.assert_allclose(got["float16"], got["float32"], rtol=2e-2, err_msg=case)


def test_quick_prints_each_case_in_both_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    result = half.main(["--quick", "--tiny", "--cases", "transformer", "--cpu"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["best"] == result["best"] and printed["timer"] == "thread_time"
    for case in ("transformer",):
        times = printed["best"][case]["us_per_step"]
        assert set(times) == {"float32", "float16"} and min(times.values()) > 0
        ratio = printed["best"][case]["float16/float32"]
        assert ratio == round(times["float16"] / times["float32"], 3)
    assert "cpu_flags" in printed["machine"] and "load_avg_1m" in printed["machine"]


def test_flags() -> None:
    opts = half.parse_args(["--cases", "poptorch_cnn", "--threads", "2"])
    assert opts.cases == ["poptorch_cnn"] and opts.threads == 2 and not opts.quick
    assert not opts.cpu  # wall time unless asked
    with pytest.raises(SystemExit):
        half.parse_args(["--cases", "no_such_case"])


def test_interleaved_times_with_the_given_clock() -> None:
    ticks = itertools.count()
    times = interleaved({"a": lambda i: i, "b": lambda i: i}, calls=4, rounds=3, warmup=0,
                        timer=lambda: float(next(ticks)))
    assert times == {n: {"median": 250000.0, "min": 250000.0} for n in "ab"}  # 1 tick / 4 calls
