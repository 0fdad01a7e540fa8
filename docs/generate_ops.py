"""Generate ``docs/ops.md``, the op reference, from ``xlgraph.op.REGISTRY``.

Usage: ``python docs/generate_ops.py`` rewrites docs/ops.md; ``--check`` only compares and exits
with status 1 when the file is out of date.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xlgraph import ops  # noqa: E402
from xlgraph.addons import ops as addons_ops  # noqa: E402
from xlgraph.op import BUILDERS, REGISTRY, OpDef  # noqa: E402

OUTPUT = ROOT / "docs" / "ops.md"
NAMESPACES = {"ops": ops, "ops.var_updates": ops.var_updates, "ops.collectives": ops.collectives}
# popxl-addons' custom ops, at their popxl-addons paths (``popxl_addons.ops.<module>.<name>``)
NAMESPACES.update({f"addons.ops.{name}": getattr(addons_ops, name)
                   for name in addons_ops.__all__
                   if inspect.ismodule(getattr(addons_ops, name)) and name != "streams"})

# PopXL's public op names (popxl.ops, ops.var_updates, ops.collectives; SDK 3.3).
POPXL_OPS = """
abs add add_ argmax argmin average_pool batch_norm_inference call call_with_info cast ceil clamp
clip concat concat_ conditional conditional_with_info conv conv_pow2scaled conv_transpose
conv_transpose_pow2scaled cos cumsum detach detach_ div dropout dynamic_slice dynamic_update
dynamic_update_ equal exp exp_ flatten flatten_ floor fmod gather gelu gelu_ geluerf geluerf_
greater group_norm groupedgather histogram host_load host_store identity increment_mod
increment_mod_ init interpolate io_tile_copy ipu_copy isfinite isinf isnan l1 l2 lamb_square
layer_norm log log2 logical_and logical_not logical_or logsum logsumexp matmul matmul_pow2scaled
max max_pool maximum mean median min mul negate nll_loss nll_loss_with_softmax_grad onehot pow
pow2scale_cast_from_fp8 pow2scale_cast_to_fp8 print_tensor prod random_normal random_uniform
relu relu_ remote_code_load remote_load remote_load_ remote_store rename repeat repeat_with_info
reshape reshape_ roi_align scaled_add scaled_add_ scatter scatter_reduce shaped_dropout sign sin
slice slice_ softmax split split_random_seed sqrt squeeze sub subsample sum sumsquare swish
swish_ tanh tied_gather topk transpose transpose_ where
var_updates.accumulate_ var_updates.accumulate_mean_ var_updates.accumulate_moving_average_
var_updates.accumulate_moving_average_square_ var_updates.accumulate_square_
var_updates.accumulator_scale_ var_updates.accumulator_zero_ var_updates.adam_updater
var_updates.adam_var_update var_updates.adamax_updater var_updates.copy_var_update_
var_updates.lamb_updater var_updates.sparse_accumulate_
collectives.all_reduce collectives.all_reduce_identical_grad_inputs
collectives.all_reduce_identical_inputs collectives.replica_sharded_slice
collectives.replicated_all_gather collectives.replicated_all_reduce
collectives.replicated_all_reduce_ collectives.replicated_reduce_scatter
collectives.replicated_slice
""".split()

# Why an xlgraph op that PopXL lacks exists; ops not listed get a generic note.
EXTRA_NOTES = {
    "sigmoid": "PopXL has no sigmoid; ported code writes it from exp and div.",
    "log_softmax": "PopXL has no log_softmax; ported code writes x - logsumexp(x).",
    "expand": "PopXL has no expand op; it is the gradient of broadcasting here.",
}


class _Shown:
    """A default value as the reference prints it: a module constant (a container) by its
    name, an enum member as ``Enum.member``, a function by its type, anything else by its
    ``repr``."""

    def __init__(self, value: Any, namespace: dict[str, Any]) -> None:
        scalar = isinstance(value, bool | int | float | str | type(None))
        named = [] if scalar else [k for k, v in namespace.items() if v is value and k.isupper()]
        text = repr(value)
        if isinstance(value, enum.Enum):
            text = f"{type(value).__name__}.{value.name}"
        self.text = named[0] if named else type(value).__name__ if " at 0x" in text else text

    def __repr__(self) -> str:
        return self.text


def signature(fn: Callable[..., Any], name: str) -> str:
    """``name(arg, key=default, *args, kw=default, **kwargs)`` without annotations."""
    sig = inspect.signature(fn)
    namespace = getattr(fn, "__globals__", {})
    params = [p.replace(annotation=p.empty, default=p.default if p.default is p.empty
                        else _Shown(p.default, namespace))
              for p in sig.parameters.values()]
    return name + str(sig.replace(parameters=params, return_annotation=sig.empty))


_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")


def first_sentence(doc: str) -> str:
    """The first sentence of the first paragraph of ``doc``, on one line (a full stop inside
    parentheses or ending an abbreviation such as "e.g." does not end it)."""
    text = " ".join(doc.split("\n\n")[0].split())
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        ends = text[i + 1 : i + 2] in (" ", "")
        if ch == "." and depth == 0 and ends and not text[: i + 1].endswith(_ABBREVIATIONS):
            return text[: i + 1]
    return text


def summary(fn: Callable[..., Any]) -> str:
    """The first sentence of ``fn``'s docstring, on one line."""
    return first_sentence(inspect.getdoc(fn) or "(no docstring)")


def _gradient(defn: OpDef) -> str:
    if defn.differentiable:
        return "yes"
    return "via the called graphs" if defn.kind == "conditional" or defn.kind == "call" else "no"


def _section_title(module_name: str) -> str:
    module = importlib.import_module(module_name)
    title = first_sentence(inspect.getdoc(module) or module_name).split(":")[0].rstrip(".")
    return f"{title} (`{module_name.replace('.', '/')}.py`)"


def _home_modules() -> dict[int, str]:
    """``id(function)`` -> the ``xlgraph.ops`` submodule that defines it (binds it by other
    means than an import)."""
    homes: dict[int, str] = {}
    for info in sorted(pkgutil.iter_modules(ops.__path__), key=lambda i: i.name):
        name = f"xlgraph.ops.{info.name}"
        module = importlib.import_module(name)
        tree = ast.parse(inspect.getsource(module))
        imported = {a.asname or a.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) for a in node.names}
        for attr, obj in vars(module).items():
            if inspect.isfunction(obj) and attr not in imported:
                homes.setdefault(id(obj), name)
    return homes


def _all_builders() -> dict[str, Callable[..., Any]]:
    """Every public function by its dotted name (registered builders and composites)."""
    out: dict[str, Callable[..., Any]] = {}
    for prefix, module in NAMESPACES.items():
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                out.setdefault(f"{prefix}.{name}", obj)
    return out


def _entry(path: str, fn: Callable[..., Any], defn: OpDef | None,
           builders: dict[str, Callable[..., Any]], aliases: list[str]) -> str:
    facts = [f"alias: `{a}`" for a in aliases]
    if defn is not None:
        facts.append(f"gradient: {_gradient(defn)}")
        if defn.inplace_of is not None:
            facts.append("aliases its input (view)" if defn.view else "modifies its input in place")
        if defn.kind != "kernel":
            facts.append(f"lowered as `{defn.kind}`")
    if path + "_" in builders:
        facts.append(f"in-place variant: `{path}_`")
    if path.startswith("addons."):
        facts.append(f"popxl-addons op: `popxl_{path}`")
    elif path.removeprefix("ops.") not in POPXL_OPS:
        short = path.split(".")[-1]
        facts.append("**xlgraph extra**: " + EXTRA_NOTES.get(short, "not in PopXL."))
    lines = [f"- `{signature(fn, path)}`: {summary(fn)}"]
    if facts:
        lines.append(f"  ({'; '.join(facts)})")
    return "\n".join(lines)


def render() -> str:
    """The full text of docs/ops.md."""
    builders = _all_builders()
    paths: dict[int, list[str]] = {}
    for path, fn in sorted(builders.items()):
        paths.setdefault(id(fn), []).append(path)
    path_of = {k: next((p for p in v if p.endswith("." + builders[p].__name__)), v[0])
               for k, v in paths.items()}
    aliases = {k: [p for p in v if p != path_of[k]] for k, v in paths.items()}
    homes = _home_modules()
    sections: dict[str, list[str]] = {}
    internal: list[str] = []
    for name in sorted(REGISTRY):
        defn, fn = REGISTRY[name], BUILDERS[name]
        if id(fn) in path_of:
            entry = _entry(path_of[id(fn)], fn, defn, builders, aliases[id(fn)])
            sections.setdefault(homes.get(id(fn), "xlgraph.ops"), []).append(entry)
        else:
            internal.append(f"- `{signature(fn, name)}`: {summary(fn)} "
                            f"(gradient: {_gradient(defn)})")
    registered = {id(BUILDERS[n]) for n in REGISTRY}
    composite = []
    for path, fn in sorted(builders.items()):
        if id(fn) in registered or path != path_of[id(fn)]:
            continue
        entry = _entry(path, fn, None, builders, aliases[id(fn)])
        home = homes.get(id(fn))
        if home in sections:  # with its family (ops.call and ops.repeat with the graph calls)
            sections[home] = sorted([*sections[home], entry])
        else:
            composite.append(entry)
    available = {path.removeprefix("ops.") for path in builders}
    missing = [n for n in POPXL_OPS if n not in available]
    out = [
        "# Op reference",
        "",
        "Generated by `python docs/generate_ops.py` from `xlgraph.op.REGISTRY`; do not edit by "
        "hand (`tests/test_ops_docs.py` fails when this file is out of date). Names, argument "
        "names and defaults follow PopXL. \"gradient: yes\" means autodiff differentiates the "
        "op; the registry tests check it against finite differences on the op's samples.",
        "",
    ]
    for module_name in sorted(sections):
        out += [f"## {_section_title(module_name)}", "", *sections[module_name], ""]
    if composite:
        out += ["## Composite builders", "",
                "Public functions built from the registered ops, with no op record of their own "
                "and no family above.", "", *composite, ""]
    out += ["## Internal ops", "",
            "Registered helpers used by gradient rules and builders; not part of the public "
            "API.", "", *internal, ""]
    out += ["## PopXL ops not in xlgraph", "",
            "These PopXL ops have no xlgraph counterpart yet: "
            + (", ".join(f"`{n}`" for n in missing) if missing else "none") + ".", ""]
    return "\n".join(out)


def write_or_check(text: str, output: Path, argv: list[str] | None, script: str) -> int:
    """Write ``text`` to ``output``; with ``--check`` in ``argv`` only compare (1: stale)."""
    parser = argparse.ArgumentParser(description=f"Generate {output.name}")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {output} is stale")
    args = parser.parse_args(argv)
    if args.check:
        if not output.exists() or output.read_text() != text:
            print(f"{output} is out of date; run `python docs/{script}`", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render(), OUTPUT, argv, "generate_ops.py")


if __name__ == "__main__":
    sys.exit(main())
