"""Session options are real booleans and counts; a huge stream names itself; the popxl alias
uninstalls around foreign entries (issue 36, D18, D19, D22).

Before the fixes: ``Session(ir, compile_in_background="no")`` (and ``fuse_steps``, ``optimize``,
``weights_to_host_on_exit``) acted as True, ``blas_threads="lots"`` raised a bare ``int()``
error and ``-1`` was accepted, and ``loader.prefetch = "no"`` turned prefetching on (D18); a
stream too large for memory raised numpy's ``MemoryError`` from ``lower/codegen.py`` without
the stream's name (D19); ``popxl_compat.uninstall()`` raised ``AttributeError`` on a ``None``
entry under ``popxl.*`` (D22).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import xlgraph as popxl
from xlgraph import ops, popxl_compat
from xlgraph.errors import ArgumentError, DeviceMemoryError


def _ir(shape: tuple[int, ...] = (2,), dtype: popxl.dtype = popxl.float32) -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream(shape, dtype, "big_input")
        out = popxl.d2h_stream(shape, dtype, "out")
        ops.host_store(out, ops.host_load(x))
    return ir


# -- D18 ------------------------------------------------------------------------------------------
_FLAGS = ["compile_in_background", "fuse_steps", "optimize", "weights_to_host_on_exit",
          "check_numerics"]


@pytest.mark.parametrize("name", _FLAGS)
@pytest.mark.parametrize("value", ["no", "False", 0, 1, None])
def test_session_flags_are_real_booleans(name: str, value: object) -> None:
    with pytest.raises(ArgumentError, match=rf"Session {name} must be True or False, got "
                                            rf"{value!r} \[at test_reliability_round3_core"):
        popxl.Session(_ir(), **{name: value})


def test_numpy_booleans_are_flags_too() -> None:
    session = popxl.Session(_ir(), optimize=np.False_, fuse_steps=np.True_)
    assert type(session.executable).__name__ == "InterpretedExecutable"


@pytest.mark.parametrize("name,value", [("blas_threads", "lots"), ("blas_threads", -1),
                                        ("blas_threads", 0), ("blas_threads", 2.5),
                                        ("blas_threads", True), ("chunk_threads", 0),
                                        ("chunk_threads", None), ("chunk_threads", "4")])
def test_thread_counts_are_auto_or_whole_numbers(name: str, value: object) -> None:
    with pytest.raises(ArgumentError, match=rf"Session {name} must be \"auto\", a whole number "
                                            rf">= 1.*, got {value!r} \[at "):
        popxl.Session(_ir(), **{name: value})
    popxl.Session(_ir(), blas_threads=None, chunk_threads=2)  # the documented forms still work


def test_the_poptorch_prefetch_flag_is_a_real_boolean() -> None:
    torch = pytest.importorskip("torch")
    import xlgraph.poptorch as poptorch

    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = poptorch.DataLoader(poptorch.Options(), data, batch_size=2)
    loader.prefetch = "no"
    with pytest.raises(ArgumentError, match="poptorch.DataLoader.prefetch must be True or False, "
                                            "got 'no'"):
        iter(loader)
    loader.prefetch = False
    assert [b.tolist() for (b,) in loader] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


# -- D19 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])  # 4 EiB; 8 EiB, past numpy's sizes
def test_a_stream_too_large_for_memory_is_named(backend: str, dtype: str) -> None:
    with pytest.raises(DeviceMemoryError, match=rf"cannot allocate .* GiB for a {dtype} buffer "
                                                rf"of shape .*, the data of stream 'big_input' "
                                                rf"loaded by host_load.* \[created at test_reli"):
        popxl.Session(_ir((2**30, 2**30), getattr(popxl, dtype)), backend=backend)


def test_the_interpreter_makes_no_stream_sized_array_up_front() -> None:
    """The stream's data is the caller's to allocate: the Session itself needs no copy."""
    session = popxl.Session(_ir((2**29, 2**29)), optimize=False)
    assert session.expected_inputs()


# -- D22 ------------------------------------------------------------------------------------------
def test_uninstall_leaves_foreign_entries_alone() -> None:
    sys.modules["popxl.fake"] = None  # blocks that import, as Python documents
    try:
        popxl_compat.install()
        import popxl  # noqa: F401 - the alias

        popxl_compat.uninstall()
        assert "popxl" not in sys.modules and sys.modules["popxl.fake"] is None
    finally:
        sys.modules.pop("popxl.fake", None)
        popxl_compat.uninstall()
    assert not [n for n in sys.modules if n == "popxl" or n.startswith("popxl.")]
