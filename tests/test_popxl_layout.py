"""PopXL's module layout, the opt-in ``popxl`` alias, and the dtype helpers."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xlgraph
from xlgraph import dtypes

ROOT = Path(__file__).resolve().parent.parent

# module path -> names PopXL defines there (popxl-reference.md §2 and PopXL's package layout)
LAYOUT = {
    "context": ["get_current_graph", "gcg", "gmg", "gir", "in_sequence", "name_scope", "io_tiles"],
    "dtypes": ["dtype", "float8_143", "float8_152", "float16", "complex64", "as_dtype"],
    "errors": [],
    "fp8_utils": ["host_pow2scale_cast_to_fp8", "host_pow2scale_cast_from_fp8"],
    "graph": ["Graph"],
    "ir": ["Ir"],
    "module": ["Module"],
    "random_seed": ["create_seeds", "two_uint32_to_uint64", "uint64_to_two_uint32"],
    "replica_grouping": ["ReplicaGrouping"],
    "remote_buffer": ["RemoteBuffer", "remote_buffer"],
    "session": ["Session", "h2dStreamBufferMaps", "d2hStreamBufferMaps"],
    "streams": ["HostToDeviceStream", "DeviceToHostStream", "h2d_stream", "d2h_stream"],
    "tensor": ["Tensor", "Variable", "Constant", "variable", "constant", "graph_input"],
    "tensorlocation": ["TensorLocation", "TensorStorage", "ReplicatedTensorSharding", "TileSet",
                       "ExecutionContext"],
    "testing": ["run_once"],
    "transforms": ["autodiff", "decompose_sum", "merge_exchange", "io_tile_exchange"],
    "transforms.autodiff": ["autodiff"],
    "transforms.decompose_sum": ["decompose_sum"],
    "transforms.merge_exchange": ["merge_exchange", "io_tile_exchange"],
    "typing_": ["TensorByRef"],
    "utils": ["to_numpy", "table_to_string"],
    "ops": ["call", "matmul", "io_tile_copy", "remote_code_load"],
    "ops.call": ["call", "call_with_info"],
    "ops.collectives": [],
    "ops.var_updates": ["accumulate_"],
}
TOP_LEVEL = ("dtype bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 half float8_143 "
             "float8_152 float16 float float32 double float64 complex64 complex128 Graph Ir "
             "Module create_seeds HostToDeviceStream DeviceToHostStream h2d_stream d2h_stream "
             "Tensor variable constant graph_input graph_output TensorByRef TensorSpec "
             "TensorStorage TensorLocation ReplicatedTensorSharding TileSet ExecutionContext "
             "Session get_current_graph get_main_graph get_ir gcg gmg gir in_sequence name_scope "
             "io_tiles ipu ReplicaGrouping RemoteBuffer remote_buffer remote_variable "
             "replica_sharded_variable").split()


@pytest.mark.parametrize("path", sorted(LAYOUT))
def test_every_popxl_module_path_imports_with_its_names(path: str) -> None:
    module = importlib.import_module(f"xlgraph.{path}")
    missing = [n for n in LAYOUT[path] if not hasattr(module, n)]
    assert not missing, f"xlgraph.{path} lacks {missing}"


def test_popxl_top_level_names() -> None:
    assert [n for n in TOP_LEVEL if not hasattr(xlgraph, n)] == []
    importlib.import_module("xlgraph.remote_buffer")  # the module path and the function coexist
    assert callable(xlgraph.remote_buffer) and callable(xlgraph.ops.call)


def test_importing_xlgraph_pulls_no_extras() -> None:
    code = ("import sys, xlgraph; import xlgraph.popxl_compat; "
            "print(sorted(m for m in ('torch', 'ml_dtypes', 'matplotlib', 'numba', 'mpi4py') "
            "if m in sys.modules)); print('popxl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "False"]  # the alias is never active by default


PROGRAM = textwrap.dedent("""
    import sys
    import numpy as np
    import popxl
    import popxl.ops as ops
    import popxl.ops.call
    import popxl.transforms.merge_exchange
    from popxl.tensorlocation import TileSet
    from popxl.random_seed import create_seeds
    from popxl.transforms import autodiff
    import xlgraph

    assert popxl is xlgraph and popxl.ops is xlgraph.ops
    assert callable(popxl.ops.call) and not isinstance(popxl.ops.call, type(sys))
    assert sys.modules["popxl.ops.call"] is sys.modules["xlgraph.ops.call"]
    ir = popxl.Ir()
    with ir.main_graph:
        def double(x):
            return x + x
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        s = popxl.d2h_stream((3,), popxl.float32, "s")
        (y,) = ops.call(ir.create_graph(double, x), x)
        ops.host_store(s, y)
    with popxl.Session(ir, "ipu_model") as session:
        print(session.run()[s].tolist(), sys.argv[1:])
""")


def test_python_m_popxl_compat_runs_a_popxl_script(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    done = subprocess.run([sys.executable, "-m", "xlgraph.popxl_compat", str(script), "--flag"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0.0, 2.0, 4.0] ['--flag']"


def test_install_and_uninstall_in_process() -> None:
    from xlgraph import popxl_compat

    popxl_compat.install()
    try:
        popxl = importlib.import_module("popxl")
        call_module = importlib.import_module("popxl.ops.call")
        assert popxl is xlgraph and call_module is sys.modules["xlgraph.ops.call"]
        assert popxl.ops.call is xlgraph.ops.call and callable(popxl.ops.call)
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("popxl.no_such_module")
    finally:
        popxl_compat.uninstall()
    assert "popxl" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("popxl")


# -- dtypes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (np.float16, dtypes.float16), (np.dtype("int8"), dtypes.int8), ("uint32", dtypes.uint32),
    (float, dtypes.float32), (int, dtypes.int32), (bool, dtypes.bool),
    (np.complex64, dtypes.complex64), (dtypes.float64, dtypes.float64),
])
def test_as_dtype(value: object, expected: dtypes.dtype) -> None:
    assert dtypes.as_dtype(value) is expected
    assert xlgraph.dtype.from_name(expected.name) is expected


def test_as_dtype_rejects_unknown_values() -> None:
    with pytest.raises(TypeError, match="cannot convert"):
        dtypes.as_dtype(object())
    with pytest.raises(ValueError, match="unknown dtype name"):
        dtypes.as_dtype("float13")


def test_dtype_properties() -> None:
    f8 = dtypes.float8_143
    assert f8.is_floating_point and f8.is_signed and f8.is_fp8 and not f8.is_int
    assert dtypes.uint8.is_int and not dtypes.uint8.is_signed
    assert dtypes.complex64.is_complex and not dtypes.float32.is_complex
    assert dtypes.float32.as_numpy() == np.float32 and xlgraph.half is dtypes.float16
    assert repr(dtypes.float8_152) == "xlgraph.dtypes.float8_152"


def test_torch_dtypes_both_ways() -> None:
    torch = pytest.importorskip("torch")
    for name in ("float32", "float16", "int8", "int32", "uint8", "bool", "float64"):
        dt = dtypes.dtype.from_name(name)
        assert dtypes.as_dtype(getattr(torch, name)) is dt
        assert dt.as_torch() is getattr(torch, name)
    assert dtypes.as_dtype(torch.half) is dtypes.float16
    assert dtypes.float8_143.as_torch() is torch.float8_e4m3fnuz
    assert dtypes.as_dtype(torch.float8_e5m2fnuz) is dtypes.float8_152
    with pytest.raises(TypeError, match="bfloat16"):
        dtypes.as_dtype(torch.bfloat16)


def test_fp8_dtypes_map_to_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert dtypes.float8_143.as_numpy() == np.dtype(ml_dtypes.float8_e4m3fnuz)
    assert dtypes.as_dtype(ml_dtypes.float8_e5m2fnuz) is dtypes.float8_152


def test_missing_fp8_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # makes `import ml_dtypes` fail
    fresh = dtypes.dtype("float8_test", "float8_e4m3fnuz", "f8t", "f")
    try:
        with pytest.raises(ImportError, match=r"^fp8 dtypes need ml_dtypes: pip install "):
            fresh.as_numpy()
    finally:
        del dtypes.dtype._by_name["float8_test"]
