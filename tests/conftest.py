import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# The numpy backend is the reference every test compares against; tests of the compiled backend
# ask for it explicitly (``Session(..., backend="numba")``), so the suite compiles few kernels.
os.environ.setdefault("XLGRAPH_BACKEND", "numpy")
