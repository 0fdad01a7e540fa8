"""The benchmark scripts parse their flags (``--help`` must not start a measurement)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import blas_threads  # noqa: E402


def test_blas_threads_flags(capsys) -> None:
    opts = blas_threads.parse_args(["--batch-sizes", "8", "80", "--threads", "1", "--idle-only"])
    assert (opts.batch_sizes, opts.threads, opts.idle_only) == ([8, 80], [1], True)
    defaults = blas_threads.parse_args([])
    assert defaults.batch_sizes == list(blas_threads.BATCHES) and not defaults.idle_only
    with pytest.raises(SystemExit):
        blas_threads.parse_args(["--help"])
    assert "(default: [1, 2])" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        blas_threads.parse_args(["--no-such-flag"])


def test_scaling_times_a_program_as_users_build_it() -> None:
    import scaling

    times = scaling.phases(2, collect=False, background=True)
    assert set(times["cpu"]) == set(scaling.PHASES)  # no forced collection was timed
    collected = scaling.phases(2)
    assert set(collected["cpu"]) == {*scaling.PHASES, "collect"}
