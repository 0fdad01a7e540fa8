import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))

# The numpy backend is the reference every test compares against; tests of the compiled backend
# ask for it explicitly (``Session(..., backend="numba")``), so the suite compiles few kernels.
os.environ.setdefault("XLGRAPH_BACKEND", "numpy")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_web_downloads(monkeypatch):
    """Tests never reach the network: dataset web downloads fail as if it were unreachable."""
    import xlgraph.datasets.sources

    def offline(url, output, name):
        raise OSError(f"no network in tests ({url})")

    monkeypatch.setattr(xlgraph.datasets.sources, "_http_get", offline)


@pytest.fixture
def unverified_data(monkeypatch):
    """Synthetic datasets are not the originals: skip the SHA-256 check, as a user with data of
    their own would (``XLGRAPH_DATA_VERIFY=0``)."""
    monkeypatch.setenv("XLGRAPH_DATA_VERIFY", "0")


@pytest.fixture
def popart_records(monkeypatch):
    """The records of PopART's logger (``popart``, which PopXL logs through) at INFO and above
    during a test, as a program that adds its own handler to it sees them."""
    import logging

    monkeypatch.setenv("POPART_LOG_LEVEL", "INFO")  # the level PopART's log starts at
    log = logging.getLogger("popart")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    yield records
    log.removeHandler(handler)
    log.setLevel(level)


@pytest.fixture
def no_compiles_running() -> None:
    """Wait for the kernel threads that earlier tests' Sessions left compiling in the background:
    a test that measures process-wide state (tracemalloc's count of every thread's allocations,
    the BLAS libraries loaded) must not see a compile that is not its own."""
    for thread in threading.enumerate():
        if thread.name == "xlgraph-kernels":
            thread.join()
