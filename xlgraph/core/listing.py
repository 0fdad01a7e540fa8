"""Readable views of programs: op listings of graphs and Irs, and Graphviz DOT export.

``str(graph)`` prints one op per line (``%y:f32[8,32] = matmul %x %W``); a call, repeat or
conditional also names the parent tensors its callee changes (``modifies=[%W, %b]``) and the
by-value inputs it writes only a copy of (``writes_copy_of=[%x]``).
``str(ir)`` lists every graph. ``graph.to_dot()`` and ``ir.to_dot()`` give DOT text, rendered to
SVG or PNG by Graphviz's ``dot`` when it is installed; in Jupyter a graph or an Ir shows that
drawing (``display_bundle``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from xlgraph.core.dispatch import provide
from xlgraph.core.graph import Graph
from xlgraph.core.trampoline import Nested, run

if TYPE_CHECKING:
    from xlgraph.core.ir import Ir
    from xlgraph.core.op import Op
    from xlgraph.core.tensor import Tensor

__all__ = ["printable", "format_listing", "format_ir", "modified_inputs", "graph_dot", "ir_dot",
           "write_dot", "display_bundle", "DRAW_LIMIT"]

_SITE_ATTRS = ("graph", "then_graph", "else_graph", "modified", "n_then")


def printable(text: str) -> str:
    """``text`` on one line: characters that are not printable (newlines, NUL, line separators)
    become their ``repr`` escapes. Names are user text; this is how they reach generated source
    comments and DOT files as data."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def callee_sites(op: Op) -> Iterator[tuple[Graph, int, set[int]]]:
    """For a call-like op: each called graph, the index of ``op.inputs`` feeding its first
    input, and the indices (of ``op.inputs``) the call site marked modified."""
    marked = set(op.attrs.get("modified", ()))
    if "graph" in op.attrs:
        yield op.attrs["graph"], 0, marked
    elif "then_graph" in op.attrs:
        yield op.attrs["then_graph"], 1, marked
        yield op.attrs["else_graph"], 1 + op.attrs["n_then"], marked


def modified_inputs(graph: Graph, _memo: dict[int, set[Tensor]] | None = None) -> set[Tensor]:
    """The inputs of ``graph`` that running it writes in place.

    A write counts when an in-place op changes the input or an in-place view of it, or when a
    callee that shares the input (``by_ref``, or marked modified at the call site) writes it.
    """
    return run(_modified(graph, {} if _memo is None else _memo))


def _modified(graph: Graph, memo: dict[int, set[Tensor]]) -> Nested[set[Tensor]]:
    if id(graph) in memo:
        return memo[id(graph)]
    memo[id(graph)] = set()  # a graph that calls itself adds nothing new
    source: dict[Tensor, Tensor] = {t: t for t in graph.inputs}
    written: set[Tensor] = set()
    for op in graph.ops:
        d = op.defn
        if d.inplace_of is not None and op.inputs[d.inplace_of] in source:
            src = source[op.inputs[d.inplace_of]]
            source[op.outputs[0]] = src
            if not d.view:
                written.add(src)
        for callee, first, marked in callee_sites(op):
            inner = memo[id(callee)] if id(callee) in memo else (yield _modified(callee, memo))
            for i, t in enumerate(callee.inputs):
                parent = op.inputs[first + i]
                if t in inner and (t.by_ref or first + i in marked) and parent in source:
                    written.add(source[parent])
    memo[id(graph)] = written
    return written


def _site_parts(op: Op) -> list[str]:
    """``modifies=[%W]``: the parent tensors a call-like op changes through its callees, and
    ``writes_copy_of=[%x]``: inputs passed by value that the callee writes (the parent's stay)."""
    shared: dict[int, Tensor] = {}
    copied: dict[int, Tensor] = {}
    for callee, first, marked in callee_sites(op):
        inner = modified_inputs(callee)
        for i, t in enumerate(callee.inputs):
            if t in inner:
                parent = op.inputs[first + i]
                target = shared if t.by_ref or first + i in marked else copied
                target.setdefault(id(parent), parent)
    return [f"{key}=[{', '.join(f'%{t.name}' for t in found.values())}]"
            for key, found in (("modifies", shared), ("writes_copy_of", copied)) if found]


def attr_text(op: Op) -> str:
    """The attributes of ``op`` as ``{k=v, ...}`` (arrays left out, graphs by name)."""
    parts = []
    for k, v in op.attrs.items():
        if isinstance(v, np.ndarray) or (k in _SITE_ATTRS and not isinstance(v, Graph)):
            continue
        parts.append(f"{k}={v.name if isinstance(v, Graph) else v}")
    parts += _site_parts(op)
    return f" {{{', '.join(parts)}}}" if parts else ""


def op_text(op: Op, attrs: bool = True) -> str:
    """One op as a listing line: ``%y:f32[8,32] = matmul %x %W {attrs}``."""
    outs = ", ".join(f"%{t.name}:{t.spec}" for t in op.outputs)
    ins = " ".join(f"%{t.name}" for t in op.inputs)
    lhs = f"{outs} = " if outs else ""
    return f"{lhs}{op.defn.name} {ins}{attr_text(op) if attrs else ''}".rstrip()


def format_listing(graph: Graph) -> str:
    """A readable listing of a graph, one op per line: ``%y:f32[8,32] = matmul %x %W``."""
    head = ", ".join(f"%{t.name}:{t.spec}{' by_ref' if t.by_ref else ''}" for t in graph.inputs)
    lines = [f"graph {graph.name}({head}) {{"]
    for c in graph.constants:
        lines.append(f"  %{c.name}:{c.spec} = constant")
    for v in graph.variables:
        lines.append(f"  %{v.name}:{v.spec} = variable")
    for op in graph.ops:
        lines.append(f"  {op_text(op)}")
    outs = ", ".join(f"%{t.name}" for t in graph.outputs)
    lines.append(f"  return {outs}")
    lines.append("}")
    return "\n".join(lines)


def format_ir(ir: Ir) -> str:
    """Every graph of ``ir``, the main graph first, under a line with the Ir's settings."""
    head = (f"Ir[id={ir.id}] num_host_transfers={ir.num_host_transfers} "
            f"replication_factor={ir.replication_factor}")
    return "\n\n".join([head, *(format_listing(g) for g in ir.graphs)])


# -- Graphviz DOT ------------------------------------------------------------------------------
def _quote(text: str) -> str:
    """A DOT string that shows ``text`` as written (see ``printable``), quotes and backslashes
    escaped."""
    text = printable(text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _graph_body(graph: Graph, prefix: str, callees: dict[int, str],
                calls: list[str]) -> list[str]:
    """Node and edge lines of one graph (node ids start with ``prefix``); edges from call-like
    ops to the nodes in ``callees`` go to ``calls``, to be written outside every cluster."""
    lines = []
    node: dict[Tensor, str] = {}
    for i, t in enumerate(graph.inputs):
        node[t] = f"{prefix}in{i}"
        lines.append(f"{node[t]} [shape=ellipse, label={_quote(f'%{t.name}  {t.spec}')}];")
    for kind, tensors in (("variable", graph.variables), ("constant", graph.constants)):
        for i, t in enumerate(tensors):
            node[t] = f"{prefix}{kind[0]}{i}"
            style = "shape=cylinder" if kind == "variable" else "shape=note"
            lines.append(f"{node[t]} [{style}, label={_quote(f'%{t.name}  {t.spec}')}];")
    for j, op in enumerate(graph.ops):
        name = f"{prefix}op{j}"
        lines.append(f"{name} [shape=box, style=rounded, label="
                     f"{_quote(op.defn.name + attr_text(op))}];")
        for t in op.inputs:
            if t in node:
                lines.append(f"{node[t]} -> {name} [label={_quote(f'%{t.name}')}];")
        for t in op.outputs:
            node[t] = name
        for callee, _, _ in callee_sites(op):
            if id(callee) in callees:
                calls.append(f"{name} -> {callees[id(callee)]} [style=dashed, "
                             f"lhead=cluster_{callees[id(callee)]}, label=calls];")
    for i, t in enumerate(graph.outputs):
        out = f"{prefix}out{i}"
        lines.append(f"{out} [shape=plaintext, label={_quote(f'output {i}')}];")
        lines.append(f"{node[t]} -> {out} [label={_quote(f'%{t.name}  {t.spec}')}];")
    return lines


def _anchor(graph: Graph, prefix: str) -> str:
    """A node of ``graph`` that call edges point at (its first input, op or output)."""
    if graph.inputs:
        return f"{prefix}in0"
    return f"{prefix}op0" if graph.ops else f"{prefix}out0"


def graph_dot(graph: Graph) -> str:
    """DOT text of one graph: inputs, variables, constants and ops, edges named by tensor."""
    body = _graph_body(graph, "n", {}, [])
    return "\n".join([f"digraph {_quote(graph.name)} {{", "rankdir=TB;",
                      *("  " + line for line in body), "}"]) + "\n"


def ir_dot(ir: Ir) -> str:
    """DOT text of every graph of ``ir``, one cluster each, with dashed call edges."""
    prefixes = {id(g): f"g{i}_" for i, g in enumerate(ir.graphs)}
    anchors = {id(g): _anchor(g, prefixes[id(g)]) for g in ir.graphs}
    lines = [f"digraph {_quote(f'Ir {ir.id}')} {{", "compound=true;", "rankdir=TB;"]
    calls: list[str] = []
    for g in ir.graphs:
        prefix = prefixes[id(g)]
        lines.append(f"  subgraph cluster_{anchors[id(g)]} {{")
        lines.append(f"    label={_quote(g.name)};")
        lines += ["    " + line for line in _graph_body(g, prefix, anchors, calls)]
        lines.append("  }")
    lines += ["  " + line for line in calls]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _graphviz(dot: str, fmt: str, purpose: str, path: Path | None = None) -> str:
    """Run Graphviz's ``dot -T<fmt>`` on ``dot`` (into ``path``, else returning its output).

    Raises:
        RuntimeError: ``dot`` is not on PATH, fails (its first error line) or takes over a
            minute; the message begins with ``purpose``.
    """
    import shutil  # with subprocess: rendering alone needs them
    import subprocess

    program = shutil.which("dot")
    if program is None:
        raise RuntimeError(f"{purpose} needs Graphviz's `dot` program, which is not on PATH "
                           "(apt-get install graphviz)")
    out = ["-o", str(path)] if path is not None else []
    try:
        done = subprocess.run([program, f"-T{fmt}", *out], input=dot, text=True, check=True,
                              capture_output=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        first = (exc.stderr or "").strip().splitlines()[:1] or [f"exit status {exc.returncode}"]
        raise RuntimeError(f"{purpose}: Graphviz's `dot` failed: {first[0]}") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{purpose}: Graphviz's `dot` took over a minute") from None
    return "" if path is not None else done.stdout


def write_dot(dot: str, path: str | Path | None) -> str:
    """Return ``dot``; with a ``path``, also write it (``.dot``/``.gv``) or render it with
    Graphviz (``.svg``, ``.png``, ``.pdf``: needs the ``dot`` program on PATH)."""
    if path is None:
        return dot
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt in ("dot", "gv", ""):
        path.write_text(dot)
        return dot
    try:
        _graphviz(dot, fmt, f"rendering {path.name}", path)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; write a .dot file instead") from None
    return dot


DRAW_LIMIT = 2000
"""Ops beyond which a notebook lists a program rather than drawing it (Graphviz's layout takes
seconds to minutes for such graphs)."""


def display_bundle(program: Graph | Ir) -> dict[str, str]:
    """Jupyter's view of a graph or an Ir (``_repr_mimebundle_``): its drawing as SVG when
    Graphviz's ``dot`` draws it, else its listing and a one-line hint saying why not."""
    ops = sum(len(g.ops) for g in getattr(program, "graphs", [program]))
    kind = type(program).__name__.lower()
    if ops > DRAW_LIMIT:
        why = (f"{ops:,} ops are too many to draw inline; {kind}.to_dot('{kind}.svg') draws "
               "them into a file")
    else:
        try:
            svg = _graphviz(program.to_dot(), "svg", f"drawing this {kind}")
            # scaled down to the output's width (dot gives a viewBox), never up
            svg = svg.replace("<svg ", '<svg style="max-width: 100%; height: auto" ', 1)
            return {"image/svg+xml": svg, "text/plain": repr(program)}
        except RuntimeError as exc:
            why = str(exc)
    return {"text/plain": f"{program}\n(no drawing: {why})"}


# ``str(graph)``, ``str(ir)`` and their ``to_dot`` print through these (the graph and ir modules
# cannot import this one, which imports them); ``import xlgraph`` loads it.
provide(format_listing=format_listing, graph_dot=graph_dot, write_dot=write_dot,
        format_ir=format_ir, ir_dot=ir_dot, display_bundle=display_bundle)
