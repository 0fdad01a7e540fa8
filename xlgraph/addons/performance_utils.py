"""FLOP counts of an Ir, as popxl-addons counts them.

Only out-of-place ``Add``, ``Sub``, ``Mul``, ``Div`` (one FLOP per output element), ``MatMul``
(``2 * K`` per output element, ``K`` the lhs's last dimension) and ``GroupNormalization``
(``3a + 2M + 4O``: ``a`` the product of ``x``'s last two dimensions over the groups, ``M`` the
mean entries, ``O`` the output elements; PopXL's layer norm is a group norm of one group)
count. Called graphs count once per call and ``repeat`` bodies once per iteration. Op types
are PopART's (``xlgraph.core.pb_views.op_type``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import xlgraph as popxl
from xlgraph.core.pb_views import op_type

__all__ = ["evaluate_FLOPs", "evaluate_ir_FLOPs", "total_FLOPs", "print_FLOPs",
           "format_flops_scientific"]

_ELEMENTWISE = ("Add", "Sub", "Mul", "Div")
_FORMATS = {"K": 3, "M": 6, "G": 9, "T": 12}


def _op_flops(op: Any, kind: str) -> int | None:
    if not op.outputs:  # host stores, remote stores, ...: not counted
        return None
    out = op.outputs[0]
    if kind in _ELEMENTWISE:
        return int(out.nelms)
    if kind == "MatMul":
        return 2 * int(op.inputs[0].shape[-1]) * int(out.nelms)
    if kind == "GroupNormalization":
        x = op.inputs[0]
        groups = int(op.attrs.get("num_groups", 1))
        means = x.shape[0] * groups
        a = math.prod(x.shape[-2:]) // groups if x.rank >= 2 else int(x.nelms)
        return 3 * a + 2 * means + 4 * int(out.nelms)
    return None


def evaluate_FLOPs(graph: popxl.Graph) -> dict[str, Any]:  # noqa: N802 - the library's name
    """``{op type: {op id: FLOPs, ...}, ..., "TOT": total}`` for ``graph``, ``op id`` being
    PopART's (``graph._pb_graph.getOps()[k].id``). A call or repeat site adds, under each op
    type counted in the called graph, the entry ``"<OpType>_<id>(<graph name>)"`` holding
    that graph's counts of the type (times the trip count for a repeat)."""
    out: dict[str, Any] = {}
    total = 0
    for op in graph.ops:
        kind = op_type(op.defn.name)
        flops = _op_flops(op, kind)
        if flops is not None:
            out.setdefault(kind, {})[op.id] = flops
            total += flops
        for called in op.called_graphs:
            inner = _scaled(evaluate_FLOPs(called), int(op.attrs.get("count", 1)))
            name = re.sub(r"_subgraph\(\d+\)$", "", called.name)
            for inner_kind, counts in inner.items():
                if inner_kind != "TOT":
                    out.setdefault(inner_kind, {})[f"{kind}_{op.id}({name})"] = counts
            total += inner["TOT"]
    out["TOT"] = total
    return out


def _scaled(counts: dict[str, Any], k: int) -> dict[str, Any]:
    return {key: _scaled(v, k) if isinstance(v, dict) else v * k for key, v in counts.items()}


def evaluate_ir_FLOPs(ir: popxl.Ir) -> dict[str, Any]:  # noqa: N802
    """``evaluate_FLOPs`` of the main graph, every count times the replication factor."""
    return _scaled(evaluate_FLOPs(ir.main_graph), int(ir.replication_factor))


def total_FLOPs(ir: popxl.Ir) -> int:  # noqa: N802
    """The FLOPs of one run of ``ir``'s main graph over all replicas."""
    return int(evaluate_ir_FLOPs(ir)["TOT"])


def format_flops_scientific(value: float, numerical_format: str = "nearest3") -> str:
    """``value`` as a 3-decimal mantissa and an ``E±XX`` exponent: ``"nearest3"`` picks a
    multiple of 3 (rounding the exponent up when it is 2 above one), ``"K"``, ``"M"``,
    ``"G"``, ``"T"`` fix it at 3, 6, 9, 12.

    >>> format_flops_scientific(5e5), format_flops_scientific(2.5e4)
    ('0.500E+06', '25.000E+03')
    """
    if numerical_format in _FORMATS:
        exp = _FORMATS[numerical_format]
    elif numerical_format == "nearest3":
        raw = math.floor(math.log10(abs(value))) if value else 0
        exp = raw - raw % 3 + (3 if raw % 3 == 2 else 0)
    else:
        raise ValueError(f"numerical_format must be 'nearest3', 'K', 'M', 'G' or 'T', got "
                         f"{numerical_format!r}")
    return f"{value / 10 ** exp:.3f}E{exp:+03d}"


def _flat(counts: dict[Any, Any], prefix: str = "") -> dict[str, int]:
    """``{"<type>/<op id>" or "<call site>/<type>/<op id>": FLOPs}`` of every counted op."""
    out: dict[str, int] = {}
    for kind, v in counts.items():
        if kind == "TOT":
            continue
        for key, n in v.items():
            if isinstance(n, dict):  # a called graph's counts of this type
                out.update(_flat({kind: n}, f"{prefix}{key}/"))
            else:
                out[f"{prefix}{kind}/{key}"] = n
    return out


def _total(v: Any) -> int:
    return sum(_total(n) for n in v.values()) if isinstance(v, dict) else int(v)


def _by_type(counts: dict[str, Any], into: dict[str, int]) -> dict[str, int]:
    for kind, v in counts.items():
        if kind != "TOT":
            into[kind] = into.get(kind, 0) + _total(v)
    return into


def print_FLOPs(counts: dict[str, Any], mode: str = "type",  # noqa: N802
                numerical_format: str = "nearest3") -> None:
    """Print a table of ``counts`` (from ``evaluate_FLOPs``), largest first: per op type
    (``mode="type"``) or per op (``"flat"``), then the total."""
    if mode not in ("type", "flat"):
        raise ValueError(f"print_FLOPs(mode={mode!r}): expected 'type' or 'flat'")
    rows = _by_type(counts, {}) if mode == "type" else _flat(counts)
    width = max([len(k) for k in rows] + [5])
    for key, n in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(f"{key:<{width}}  {format_flops_scientific(n, numerical_format)}")
    print(f"{'TOTAL':<{width}}  {format_flops_scientific(counts['TOT'], numerical_format)}")
