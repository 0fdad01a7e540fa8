import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# The numpy backend is the reference every test compares against; tests of the compiled backend
# ask for it explicitly (``Session(..., backend="numba")``), so the suite compiles few kernels.
os.environ.setdefault("XLGRAPH_BACKEND", "numpy")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_web_downloads(monkeypatch):
    """Tests never reach the network: dataset web downloads fail as if it were unreachable."""
    import xlgraph.datasets

    def offline(url, timeout=0.0):
        raise OSError(f"no network in tests ({url})")

    monkeypatch.setattr(xlgraph.datasets, "_download", offline)
