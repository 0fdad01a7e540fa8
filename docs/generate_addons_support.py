"""Check xlgraph.addons against popxl-addons' public surface and generate
``docs/addons-support.md``.

The table is ``tests/data/popxl_addons_surface.json`` (a copy of the popxl-addons surface: one
row per public class, function, method, property or re-export, with parameters as written in
popxl-addons). ``check(row)`` resolves the row through ``xlgraph.addons`` (``popxl_addons.X``
is ``xlgraph.addons.X``) and returns the differences: kind, parameter names, order and
defaults (through the PopXL surface checker), and the bases the row names. A row that cannot
match is listed in ``DEVIATIONS`` with the reason; ``tests/test_addons_surface.py`` runs every
row and checks that this page is current.

Usage: ``python docs/generate_addons_support.py`` rewrites docs/addons-support.md; ``--check``
only compares and exits with status 1 when the file is out of date.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from addons_reference import BEYOND_TABLE  # noqa: E402
from generate_ops import write_or_check  # noqa: E402
from generate_popxl_surface import check_params  # noqa: E402

TABLE = ROOT / "tests" / "data" / "popxl_addons_surface.json"
OUTPUT = ROOT / "docs" / "addons-support.md"

# Rows xlgraph.addons does not match, with the reason. The test fails when a listed row
# matches (remove it) or an unlisted row differs (fix it).
DEVIATIONS: dict[str, str] = {}

# Rows whose parameters popxl-addons 3.4 extends (the behaviour reference, which wins over the
# 3.1 signature table): checked against these parameters, and the page says so.
EXTENDED: dict[str, str] = {
    "popxl_addons.module.Module": "cache=False, grad_inlining_error='error'",
    "popxl_addons.graph.GraphWithNamedArgs": (
        "graph, args=None, grad_graph_info=None, from_module=None, aux=None, "
        "called_graphs_grad_info=None"),
    "popxl_addons.variable_factory.VariableFactory.create_tensor": (
        "name=None, empty=False, memmap_dir=None, read_only_if_exists=False"),
    "popxl_addons.variable_factory.NamedVariableFactories.init": (
        "prefix=None, empty=False, memmap_dir=None, read_only_if_exists=False"),
    "popxl_addons.variable_factory.VariableFactory.create_remote_tensor": (
        "buffer, entry, name=None, empty=False, memmap_dir=None, read_only_if_exists=False"),
    "popxl_addons.variable_factory.NamedVariableFactories.init_remote": (
        "buffers, entry=0, prefix=None, empty=False, memmap_dir=None, "
        "read_only_if_exists=False"),
    "popxl_addons.array_munging.pad_axis": "x, n, axis, value=0",
    "popxl_addons.task_session.TaskSession.load_checkpoint": (
        "checkpoint_dir, report_missing='warn', skip_memmap=False"),
}

# What a row's section/name says beyond the check (shown on the page).
NOTES: dict[str, str] = {
    "popxl_addons.transforms:.available_memory_proportion": (
        "the module exists and is re-exported; the surface table does not list its contents and "
        "xlgraph.addons defines none (PopXL's `available_memory_proportion` arguments are "
        "accepted by the ops themselves)"),
    "popxl_addons.task_session.TaskSession.wandb_variable_histograms": (
        "refused with one line: xlgraph does not log to Weights & Biases"),
    "popxl_addons.utils.timer": ("logs the minutes; records them in an active W&B run's "
                                 "summary when `wandb` is imported"),
    "popxl_addons.variable_factory.VariableFactory.create_tensor": (
        "a sharded factory (`shard_over > 1`) is refused here with one line pointing to "
        "`init_remote(named_variable_buffers(...))`"),
    "popxl_addons.transforms.pipelining.pipelined_execution": (
        "stages run serialised in a loop of `steps` iterations: the same results as the "
        "overlapped schedule"),
    "popxl_addons.named_replica_grouping.get_ild_size_from_popdist": (
        "reads `ipuLinkDomainSize` from `POPLAR_TARGET_OPTIONS`, else min(replicas, 64)"),
    "popxl_addons.route_tensor.route_tensor_into_graph": (
        "rewires the call and repeat sites already built, as 3.4"),
    "popxl_addons.transforms.autodiff.autodiff_with_accumulation": (
        "accumulates in the gradient graph itself, as 3.4; `expected_outputs` lists only "
        "the gradients still output (3.4 keeps the accumulated ones there too)"),
    "popxl_addons.named_tensors.NamedTensors.remap": (
        "a tensor the mapping lacks is a KeyError naming its key, as 3.4"),
    "popxl_addons.transforms.batch_serialisation.batch_serialise": (
        "`io_mode` places the transfers (IO tiles with copies for \"io\" and "
        "\"io_overlapped\", compute tiles for \"compute\"); the overlap of \"io_overlapped\" "
        "is a schedule the simulator does not time; \"io\" modes need IO tiles as in 3.4"),
    "popxl_addons.variable_factory.VariableFactory": (
        "`shape` is a replica's (one flat shard when `shard_over > 1`), `meta_shape` the "
        "whole, as 3.4"),
}


# popxl-addons' custom ops (native in popxl-addons 3.4, ordinary xlgraph ops here): the surface
# table lists none of them, so their Python entry points are rows of their own.
_CUSTOM_OPS = {
    "cross_entropy_sharded_loss": {"cross_entropy_sharded_loss": (
        "logits, indices, ignore_index=None, replica_grouping=None, reduction='mean', "
        "available_memory_proportion=0.4")},
    "cross_entropy_sharded_wr_loss": {
        "cross_entropy_sharded_wr_loss": "logits, indices, ipus=None"},
    "fp8_mse_scale": {"fp8_mse_scale": "src, dtype=popxl.float8_143"},
    "grad_reduce_square_add": {"grad_reduce_square_add": "t, loss_scaling"},
    "group_quantize_decompress": {
        "group_quantize_decompress": "t, group_scale, group_bias, dim=-1",
        "group_quantize_decompress_numpy": "t, scale, bias, dim",
        "group_quantize_compress_numpy": "t, group_size, dim"},
    "layer_norm_distributed": {
        "layer_norm_distributed": "t, w, b, epsilon=1e-05, group=None"},
    "linear_layout": {"linear_layout": "t, bs=1"},
    "replicated_all_reduce_TP": {
        "replicated_all_reduce_identical_inputs": "t, op='add', group=None",
        "replicated_all_reduce_identical_grad_inputs": "t, op='add', group=None",
        "replicated_all_reduce": "t, op='add', group=None"},
    "replicated_strided_collectives": {
        "replicated_all_reduce_strided": "t, op='add', group=None",
        "replicated_all_reduce_strided_identical_inputs": "t, op='add', group=None",
        "replicated_all_reduce_strided_identical_grad_inputs": "t, op='add', group=None",
        "replicated_all_gather_strided": "t, group=None",
        "replicated_reduce_scatter_strided": (
            "t, op='add', group=None, configure_output_for_replicated_tensor_sharding=False"),
        "replicated_all_reduce_strided_graph": (
            "tensors, op='add', group=None, use_io_tiles=False")},
    "rotary_pos_embed": {
        "rotary_pos_embed": "t, sin, cos, rotary_dim=None",
        "trig_tables": "seq_len, rotary_dim, base=10000, np_dtype='float32'",
        "trig_table_constants": "seq_len, rotary_dim, base=10000, dtype=popxl.float32"},
    "static_sparse_ops": {
        "dense_const_sparse_matmul": "lhs, rhs, output_cols",
        "random_sparse": "dense, density=0.5"},
}
CUSTOM_OP_ROWS = [{"section": "popxl_addons.ops", "kind": "function", "name": "fp8_amax_scale",
                   "params": "src, dtype=popxl.float8_143"}]
CUSTOM_OP_ROWS += [{"section": f"popxl_addons.ops.{module}", "kind": "function", "name": name,
                    "params": params}
                   for module, functions in _CUSTOM_OPS.items()
                   for name, params in functions.items()]


def load_table(path: Path = TABLE) -> list[dict[str, Any]]:
    """The popxl-addons surface rows, then the custom ops' rows."""
    return json.loads(path.read_text()) + CUSTOM_OP_ROWS


def row_id(row: dict[str, Any]) -> str:
    """``popxl_addons.module.Module.create_graph``-style path of a row (``section:from`` for a
    re-export)."""
    if row["kind"] == "re-export":
        return f"{row['section']}:{row['from']}"
    owner = f".{row['owner']}" if row.get("owner") else ""
    return f"{row['section']}{owner}.{row['name']}"


def module_of(section: str) -> Any:
    return importlib.import_module("xlgraph.addons" + section[len("popxl_addons"):])


def want_params(text: str) -> list[str]:
    """popxl-addons' parameter text as ``name`` / ``name=default`` / ``*args`` / ``**kw``."""
    fn = ast.parse(f"def f({text}): pass").body[0].args
    out: list[str] = []
    positional = fn.posonlyargs + fn.args
    pad = [None] * (len(positional) - len(fn.defaults)) + list(fn.defaults)
    for arg, default in zip(positional, pad):
        out.append(arg.arg + ("" if default is None else "=" + ast.unparse(default)))
    if fn.vararg:
        out.append("*" + fn.vararg.arg)
    for arg, default in zip(fn.kwonlyargs, fn.kw_defaults):
        out.append(arg.arg + ("" if default is None else "=" + ast.unparse(default)))
    if fn.kwarg:
        out.append("**" + fn.kwarg.arg)
    return [w.replace("popxl.", "dtypes.", 1) if "=popxl." in w else w for w in out]


_KINDS = {"classmethod": classmethod, "staticmethod": staticmethod, "property": property}


def _bases(note: str | None) -> list[Any]:
    """The bases a row's note names that resolve in xlgraph (others are typing details)."""
    known = {"type": type, "popxl.Module": "xlgraph.Module", "popxl.Session": "xlgraph.Session",
             "addons.Module": "xlgraph.addons.Module", "DotTree": "xlgraph.addons.dot_tree.DotTree"}
    out = []
    for part in (note or "").removeprefix("bases: ").split(", "):
        target = known.get(part.split("[", 1)[0])
        if isinstance(target, str):
            mod, _, name = target.rpartition(".")
            target = getattr(importlib.import_module(mod), name)
        if target is not None:
            out.append(target)
    return out


def check(row: dict[str, Any]) -> list[str]:
    """Differences between xlgraph.addons and one surface row."""
    where = row_id(row)
    if where in EXTENDED:
        row = {**row, "params": EXTENDED[where]}
    try:
        module = module_of(row["section"])
    except ImportError as exc:
        return [f"{where}: module missing ({exc})"]
    if row["kind"] == "re-export":
        source = importlib.import_module(module.__name__ + row["from"])
        names = getattr(source, "__all__", [])
        missing = [n for n in names if not hasattr(module, n)]
        return [f"{where}: not re-exported: {missing}"] if missing else []
    owner = getattr(module, row["owner"], None) if row.get("owner") else module
    if owner is None:
        return [f"{where}: {row['owner']} missing"]
    if not hasattr(owner, row["name"]):
        return [f"{where}: missing"]
    obj = getattr(owner, row["name"])
    static = inspect.getattr_static(owner, row["name"]) if row.get("owner") else obj
    kind = row["kind"]
    if kind == "class":
        if not inspect.isclass(obj):
            return [f"{where}: not a class"]
        wrong = [b.__name__ for b in _bases(row.get("note")) if not issubclass(obj, b)]
        if wrong:
            return [f"{where}: not a subclass of {wrong}"]
        if row["params"] is None:
            return []
        return [f"{where}: {d}" for d in check_params(obj.__init__, want_params(row["params"]),
                                                      True)]
    if kind in _KINDS and not isinstance(static, _KINDS[kind]):
        return [f"{where}: not a {kind}"]
    if kind == "property":
        return []
    if kind == "method" and isinstance(static, property):  # popxl-addons' setter row
        if static.fset is None:
            return [f"{where}: property has no setter"]
        fn = static.fset
    else:
        fn = static.__func__ if isinstance(static, classmethod | staticmethod) else obj
    if not callable(fn):
        return [f"{where}: not callable"]
    skip = kind in ("method", "classmethod") or fn is getattr(static, "fset", None)
    return [f"{where}: {d}" for d in check_params(fn, want_params(row["params"] or ""), skip)]


def resolve(path: str) -> Any:
    """The object at ``path`` under ``xlgraph.addons`` (``layers.linear_fp8.LinearFP8``),
    importing sub-modules on the way; None when absent."""
    node: Any = importlib.import_module("xlgraph.addons")
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part in getattr(node, "__annotations__", {}):  # an instance attribute
            return part
        if not hasattr(node, part):
            try:
                node = importlib.import_module("xlgraph.addons." + ".".join(parts[:i + 1]))
                continue
            except ImportError:
                return None
        node = getattr(node, part)
    return node


def _beyond() -> list[str]:
    lines = ["", "## Beyond the table: popxl-addons 3.4", "",
             "Names the behaviour reference of popxl-addons 3.4 lists that the 3.1 table does "
             "not, with what xlgraph does and the tests that show it. The custom ops of "
             "`popxl_addons.ops` are listed in docs/addons.md.", "",
             "| name | status | tested in |", "|---|---|---|"]
    for path, note, test in BEYOND_TABLE:
        status = "provided" if resolve(path) is not None else "**missing**"
        lines.append(f"| `popxl_addons.{path}` | {status}{'; ' + note if note else ''} | "
                     f"`{test}` |")
    return lines


def _signature(row: dict[str, Any]) -> str:
    if row["kind"] == "re-export":
        return f"`from {row['from']} import *`"
    params = row.get("params")
    name = f"{row['owner']}.{row['name']}" if row.get("owner") else row["name"]
    return f"`{name}({params})`" if params is not None else f"`{name}`"


def render() -> str:
    """The support page."""
    rows = load_table()
    lines = [
        "# popxl-addons support",
        "",
        "<!-- generated by docs/generate_addons_support.py from "
        "tests/data/popxl_addons_surface.json; do not edit -->",
        "",
        "Every public name of popxl-addons (the version Graphcore's PopXL tutorials pin) and "
        "how `xlgraph.addons` provides it. `tests/test_addons_surface.py` checks each row: the "
        "name exists under the same module path, with the same kind, parameter names, order "
        "and defaults, and the same bases. Behaviour is tested in `tests/test_addons_*.py`; "
        "docs/addons.md walks through a program. The custom ops (`popxl_addons.ops.<op>`, "
        "native in popxl-addons) are ordinary xlgraph ops, listed at the end with their "
        "records on docs/ops.md.",
        "",
    ]
    matched = sum(1 for r in rows if row_id(r) not in DEVIATIONS)
    lines += [f"{matched} of {len(rows)} rows match; {len(DEVIATIONS)} differ (listed with "
              f"the reason).", ""]
    section = None
    for row in rows:
        if row["section"] != section:
            section = row["section"]
            lines += ["", f"## `{section}`", "", "| name | kind | status |", "|---|---|---|"]
        rid = row_id(row)
        status = f"differs: {DEVIATIONS[rid]}" if rid in DEVIATIONS else "matches"
        if rid in EXTENDED:
            status += f"; 3.4 takes `({EXTENDED[rid]})`"
        if rid in NOTES:
            status += f"; {NOTES[rid]}"
        lines.append(f"| {_signature(row)} | {row['kind']} | {status} |")
    lines += _beyond()
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render(), OUTPUT, argv, "generate_addons_support.py")


if __name__ == "__main__":
    sys.exit(main())
