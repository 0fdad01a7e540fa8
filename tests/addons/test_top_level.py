"""``import popxl_addons as addons``: the top-level names of popxl-addons 3.4, and
``GIT_COMMIT``."""

from __future__ import annotations

import importlib

import xlgraph.addons as addons
from xlgraph.addons.git_commit import git_commit

TOP_LEVEL = """Module GraphWithNamedArgs BoundGraph NamedTensors NamedVariableFactories
VariableFactory add_variable_input add_replica_sharded_variable_input GraphCache function
cross_entropy cross_entropy_with_grad host_load host_store autodiff autodiff_with_accumulation
set_available_memory_proportion_by_ipu set_graph_available_memory_proportion_by_ipu
batch_serialise batch_serialise_fwd_and_grad batch_serial_buffer RemoteHandle
pipelined_execution recompute_graph disable_fc_pass enable_fc_pass load_remote_graph
store_remote_graph named_buffers named_variable_buffers create_remote_buffer timer OrderedDict
WeightsDict TaskSession write_variables_pb InputStreams OutputStreams seed_variable
route_tensor_into_graph is_subgraph total_FLOPs evaluate_ir_FLOPs evaluate_FLOPs print_FLOPs
format_flops_scientific print_tensor print_text shard unshard_arrays unshard repeat repeat_axis
split2D shard2D unshard2D repeat_shard tensor_parallel_input pad_axis squeeze_safe
handle_negative_axis fp8_amax_scale GIT_COMMIT""".split()


def test_every_top_level_name_of_the_library_is_there():
    missing = [n for n in TOP_LEVEL if not hasattr(addons, n)]
    assert not missing
    assert callable(addons.seed_variable) and callable(addons.repeat)  # functions, not modules
    namespace: dict = {}
    exec("from xlgraph.addons import *", namespace)  # noqa: S102 - a fixed statement
    assert set(TOP_LEVEL) <= set(namespace)


def test_names_that_are_not_top_level():
    for name in ("DotTree", "NamedRemoteBuffers", "Linear", "AdamOptimizerStep",
                 "tensor_parallel_output", "reduce_replica_sharded_graph"):
        assert not hasattr(addons, name), name
    assert addons.layers.Linear and addons.optimizers.AdamOptimizerStep
    assert addons.array_munging.tensor_parallel_output and addons.remote.NamedRemoteBuffers


def test_module_paths_import():
    for path in ("testing_utils", "patterns", "performance_utils", "transforms.use_fc_pass",
                 "transforms.available_memory_proportion", "utils", "array_munging", "debug"):
        importlib.import_module(f"xlgraph.addons.{path}")
    from xlgraph.addons.remote import load_remote, store_remote  # noqa: F401
    from xlgraph.addons.transforms import use_fc_pass

    assert use_fc_pass.disable_fc_pass is addons.disable_fc_pass


def _repo(root, head, refs=None, packed=None):
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head)
    for name, sha in (refs or {}).items():
        (git / name).write_text(sha + "\n")
    if packed:
        (git / "packed-refs").write_text(packed)
    return root


def test_git_commit_reads_the_working_directorys_repository(tmp_path, monkeypatch):
    sha = "0123456789abcdef0123456789abcdef01234567"
    loose = _repo(tmp_path / "a", "ref: refs/heads/main\n", {"refs/heads/main": sha})
    (loose / "sub" / "dir").mkdir(parents=True)
    assert git_commit(loose / "sub" / "dir") == "0123456"  # parents searched
    packed = _repo(tmp_path / "b", "ref: refs/heads/dev\n",
                   packed=f"# pack-refs\n{sha[::-1]} refs/heads/dev\n")
    assert git_commit(packed) == sha[::-1][:7]
    detached = _repo(tmp_path / "c", sha + "\n")
    assert git_commit(detached) == "0123456"
    (tmp_path / "none").mkdir()
    broken = _repo(tmp_path / "d", "ref: refs/heads/missing\n")
    assert git_commit(broken) is None
    monkeypatch.chdir(loose)
    assert git_commit() == "0123456"
    assert addons.GIT_COMMIT is None or len(addons.GIT_COMMIT) == 7


def test_custom_op_reexport():
    assert addons.fp8_amax_scale is addons.ops.fp8_amax_scale
