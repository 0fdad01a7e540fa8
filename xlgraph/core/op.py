"""Op records (``OpDef``), the registry, op nodes and the builder that appends them to graphs."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xlgraph.core import context
from xlgraph.core.dispatch import provided
from xlgraph.core.graph import Graph
from xlgraph.core.tensor import Tensor, TensorSpec, constant
from xlgraph.errors import (
    ArgumentError,
    DTypeError,
    GraphMismatchError,
    ShapeError,
    XlgraphError,
    user_source_line,
)

__all__ = ["OpDef", "Op", "Sample", "REGISTRY", "BUILDERS", "register", "explained"]

Infer = Callable[..., "TensorSpec | tuple[TensorSpec, ...]"]


@dataclass(frozen=True)
class Sample:
    """Test inputs for an op: arrays become graph inputs, everything else passes through.

    ``grad=False`` skips the finite-difference check for this sample (e.g. at a kink).
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    grad: bool = True


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything xlgraph knows about one op, registered once.

    Attributes:
        name: registry key and listing name.
        infer: ``infer(*input_specs, **attrs)`` -> output spec(s); raises ShapeError/DTypeError.
        kernel: ``kernel(*arrays, **attrs)`` -> array(s). In-place ops write into input
            ``inplace_of`` and return it.
        grad: VJP rule ``grad(g, *dys)`` -> one gradient Tensor (or None) per input.
        kernel_out: ``kernel_out(*arrays, out=buffer, **attrs)`` writing into ``out`` with the
            same bits as ``kernel`` (see docs/lowering.md: optional ``scratch=`` buffers, and
            for in-place ops ``out`` may be a spare array rather than the input).
        elementwise: output element i depends only on input elements i (fusable).
        side_effect: never removed as dead code.
        inplace_of: index of the input this op modifies in place (its output aliases it).
        view: the output aliases input 0 without modifying it (reshape, slice, ...).
        kind: "kernel", or how the lowering runs a non-kernel op ("call", "repeat",
            "conditional", "host_load", "host_store").
        samples: ``samples(rng)`` -> list of Sample with valid input domains.
        ref: an independent reference implementation for tests.
        tol: relative tolerance for float32 tests.
        loop: ``loop(input_specs, **attrs)`` -> ``(fn, extra)`` or None: a loop form of
            ``kernel_out`` for the compiled backend, ``fn(*inputs, *outputs, *extra)`` over
            C-contiguous arrays (see ``xlgraph.ops.loops``); None where it does not apply.
        cost: ``cost(in_specs, out_specs, **attrs)`` -> ``xlgraph.cost.Cost``; None takes the
            family default (``xlgraph.cost.default_cost``).
        scratch: number of scratch arrays (each of the output's spec) ``kernel_out`` takes.
        layout: for views, ``layout(in_spec, **attrs)`` -> the output's layout when the
            viewed input is C-contiguous, whatever the values of any other inputs (offsets):
            ``"C"``, ``"D"`` (dense, other axis order) or ``"?"`` (None).
        region: for in-place ops that write only part of input ``inplace_of``:
            ``region(*inputs, **attrs)`` -> the index of that part. A variable written only
            by such ops is not snapshotted whole before each run: each write first saves the
            part it overwrites (``xlgraph.lower.undo``).
        threaded: the kernel runs its batch in chunks through ``ops.window.map_chunks``, on
            several threads when the Session enables them (``xlgraph.runtime.threads``).
        replicated: ``replicated(ctx, *arrays, **attrs)`` -> outputs for arrays with a leading
            replica axis, all replicas in one call (``xlgraph.ops.replicas``), or None where
            it does not apply; without it the runtime loops ``kernel`` over replicas
            (elementwise ops need none). Collectives exchange data through ``ctx``.
        replica: how results relate across replicas (``xlgraph.lower.replica_forms``): ``"local"``
            (each replica computes its own from its inputs), ``"collective"`` (the members of
            a group combine their values; the ``group`` attribute names it) or
            ``"per_replica"`` (results differ per replica even from identical inputs: slices
            by position, per-replica memory). The last two always run ``replicated``.
        all_reduce: the op reduces its input over each group's members with ``attrs["op"]``
            and gives every member the result, so instances may exchange it in a bucket with
            others (``xlgraph.lower.buckets``).
        widen_half: float16 inputs are computed in float32 and each float16 result is rounded
            once on store, as the IPU's AMP units do (``xlgraph.ops.half``); for ops whose
            kernels do arithmetic (the ``unary``, ``binary``, ``reduction`` families set it).
        half_exact: ``half_exact(attrs)`` -> whether each result is one of the inputs' elements
            or a zero (a NaN quieted at most) for these attributes: on float16 values held in
            float32 the result is a float16 value already, so wide storage
            (``xlgraph.lower.wide_half``) leaves out its rounding step; None: never.
        half_registers: the kernel itself computes float16 operands in float32 registers and
            rounds on store (``matmul``), so wide storage may hand it float16 values held in
            float32 without ``widen_half``.
        half_view: a view whose elements are its one input's whatever their dtype, so a
            float16 value held in float32 by wide storage stays so through it.
        c_contiguous: ``kernel`` always returns fresh C-contiguous arrays (the lowering's
            layouts then need no copy for consumers that want C order).
        out_may_be_input: an elementwise op's ``kernel_out`` may write into one of its inputs
            (element i reads input element i before writing it), so the output may take the
            buffer of an input that dies there, as numpy's ufuncs allow.
    """

    name: str
    infer: Infer
    kernel: Callable[..., Any] | None
    grad: Callable[..., Any] | None = None
    kernel_out: Callable[..., Any] | None = None
    elementwise: bool = False
    side_effect: bool = False
    inplace_of: int | None = None
    view: bool = False
    kind: str = "kernel"
    samples: Callable[[np.random.Generator], list[Sample]] | None = None
    ref: Callable[..., Any] | None = None
    tol: float | None = None
    loop: Callable[..., tuple[Callable[..., Any], tuple[Any, ...]] | None] | None = None
    cost: Callable[..., Any] | None = None
    scratch: int = 0
    layout: Callable[..., str] | None = None
    region: Callable[..., Any] | None = None
    threaded: bool = False
    replicated: Callable[..., Any] | None = None
    replica: str = "local"
    all_reduce: bool = False
    widen_half: bool = False
    half_exact: Callable[[dict[str, Any]], bool] | None = None
    half_registers: bool = False
    half_view: bool = False
    c_contiguous: bool = False
    out_may_be_input: bool = False

    @property
    def differentiable(self) -> bool:
        return self.grad is not None

    @property
    def modifies_input(self) -> bool:
        return self.inplace_of is not None and not self.view

    def derived(self, **changes: Any) -> OpDef:
        """A copy with ``changes`` (a form the lowering derives: replicated, float16, ...). A
        new ``kernel`` or ``kernel_out`` makes none of the old one's promises
        (``c_contiguous``, ``out_may_be_input``) unless ``changes`` makes them again."""
        if "kernel" in changes:
            changes.setdefault("c_contiguous", False)
        if "kernel_out" in changes:
            changes.setdefault("out_may_be_input", False)
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


REGISTRY: dict[str, OpDef] = {}
BUILDERS: dict[str, Callable[..., Any]] = {}


_BUILD_ERRORS = (XlgraphError, TypeError, ValueError, IndexError, KeyError, ZeroDivisionError)


def _explained(op_name: str, builder: Callable[..., Any]) -> Callable[..., Any]:
    """``builder``, whose argument errors name the op and the user's line like ``infer``'s do
    (an error raised before the op exists: a bad axis, size, dtype name or attribute)."""

    @functools.wraps(builder)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return builder(*args, **kwargs)
        except _BUILD_ERRORS as exc:
            if "[created at " in str(exc) or "[at " in str(exc):
                raise  # already explained (by ``apply``, or by a builder called inside)
            kind = (type(exc) if isinstance(exc, XlgraphError)
                    else DTypeError if isinstance(exc, TypeError) else ArgumentError)
            message = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)
            if not message.startswith(f"{op_name}: "):
                message = f"{op_name}: {message}"
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
            if tensors:
                message += f" (inputs: {', '.join(f'{t.id} {t.spec}' for t in tensors)})"
            raise kind(f"{message} [at {user_source_line()}]") from exc

    return checked


def explained(op_name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for builders of composite ops (not registered): errors name ``op_name`` and
    the user's line, as for registered builders."""
    return lambda builder: _explained(op_name, builder)


def register(defn: OpDef) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``defn`` and the public builder function decorated with this."""
    if defn.name in REGISTRY:
        raise ValueError(f"op {defn.name!r} is registered twice")
    REGISTRY[defn.name] = defn

    def wrap(builder: Callable[..., Any]) -> Callable[..., Any]:
        checked = _explained(defn.name, builder)
        BUILDERS[defn.name] = checked
        return checked

    return wrap


class Op:
    """One node of a graph: an OpDef applied to input tensors with attributes."""

    __slots__ = ("defn", "graph", "inputs", "outputs", "attrs", "created_at", "index", "region",
                 "hints", "id")

    def __init__(
        self, defn: OpDef, graph: Graph, inputs: list[Tensor], attrs: dict[str, Any], where: str
    ) -> None:
        self.defn = defn
        self.graph = graph
        self.inputs = inputs
        self.outputs: list[Tensor] = []
        self.attrs = attrs
        self.created_at = where
        self.index = len(graph.ops)
        self.region = context.sequence_region()
        self.hints = context.current_hints()  # device facts that do not change values
        self.id: int = next(graph.ir.op_ids)  # unique in the Ir, never reused (PopART's)

    @property
    def name(self) -> str:
        return f"{self.defn.name}.{self.index}"

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        return tuple(v for v in self.attrs.values() if isinstance(v, Graph))

    def cost(self) -> Any:
        """The declared cost of one execution of this op, an ``xlgraph.cost.Cost``."""
        return provided("op_cost")(self.defn, [t.spec for t in self.inputs],
                                   [t.spec for t in self.outputs], self.attrs)

    def describe(self) -> str:
        ins = ", ".join(f"{t.id} {t.spec}" for t in self.inputs)
        return f"{self.name}({ins}) [created at {self.created_at}]"

    def __repr__(self) -> str:
        return f"Op[{self.name} in {self.graph.name}]"


def check_same_graph(op_name: str, graph: Graph, tensors: Sequence[Tensor], where: str) -> None:
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{op_name}: expected a Tensor, got {type(t).__name__} [at {where}]")
        if t.graph is not graph and t.graph.ir is not graph.ir:
            raise GraphMismatchError(
                f"{op_name}: tensor {t.id} {t.spec} belongs to graph {t.graph.name!r} of another "
                f"Ir than graph {graph.name!r}, where the op is being added; build each tensor in "
                f"the Ir that uses it [created at {where}]"
            )
        if t.graph is not graph:
            raise GraphMismatchError(
                f"{op_name}: tensor {t.id} {t.spec} is not in the current Graph: it belongs to "
                f"graph {t.graph.name!r} but the op is being added to graph {graph.name!r}; "
                f"there is no implicit capture, pass it "
                f"in as a graph input [created at {where}]"
            )


def apply(
    defn: OpDef, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None,
    name: str | None = None, hints: dict[str, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Append ``defn`` applied to ``inputs`` to the current graph; return its outputs.

    ``attrs`` reach ``infer``, the kernel and the gradient rule; ``hints`` (PopXL planning
    arguments such as ``available_memory_proportion``; None values dropped) only reach
    ``op.hints``, beside those of enclosing ``context.op_hints`` blocks.
    """
    graph = context.get_current_graph()
    where = user_source_line()
    attrs = attrs or {}
    inputs = list(inputs)
    check_same_graph(defn.name, graph, inputs, where)
    try:
        specs = defn.infer(*(t.spec for t in inputs), **attrs)
    except XlgraphError as exc:
        specs_text = ", ".join(f"{t.id} {t.spec}" for t in inputs)
        raise type(exc)(f"{defn.name}: {exc} (inputs: {specs_text}) [created at {where}]") from None
    if isinstance(specs, TensorSpec):
        specs = (specs,)
    op = Op(defn, graph, inputs, attrs, where)
    if hints:
        op.hints.update({k: v for k, v in hints.items() if v is not None})
    base = name or defn.name
    op.outputs = [graph.add_tensor(s, base, op) for s in specs]
    graph.append_op(op)
    return tuple(op.outputs)


def apply1(defn: OpDef, inputs: Sequence[Tensor], attrs: dict[str, Any] | None = None,
           name: str | None = None, hints: dict[str, Any] | None = None) -> Tensor:
    """``apply`` for ops with exactly one output."""
    return apply(defn, inputs, attrs, name, hints)[0]


def as_tensor(value: Any, like: Tensor) -> Tensor:
    """``value`` if it is a Tensor, else a constant of ``like``'s dtype in the current graph."""
    if isinstance(value, Tensor):
        return value
    arr = np.asarray(value)
    if arr.size == 0:
        raise ValueError(f"cannot combine {like.id} with an empty value")
    return constant(arr, like.dtype)


def same_dtype(*specs: TensorSpec) -> None:
    """Raise DTypeError unless all specs share one dtype."""
    first = specs[0].dtype
    for s in specs[1:]:
        if s.dtype is not first:
            raise DTypeError(
                f"dtypes differ: {', '.join(str(s) for s in specs)}; cast one with ops.cast"
            )



# -- shape helpers used by infer functions ------------------------------------------------------
def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of ``shapes``; ShapeError when they cannot broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(
            f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together"
        ) from None


def normalize_axes(axis: Any, rank: int) -> tuple[int, ...]:
    """Axes as sorted non-negative ints (all axes for None); ShapeError when out of range."""
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ShapeError(f"axis {a} is out of range for rank {rank}")
        out.append(int(a) % max(rank, 1))
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(out))


# -- infer helpers ------------------------------------------------------------------------------
def same_spec(*specs: TensorSpec, **_: Any) -> TensorSpec:
    """Infer for ops whose output has their first input's spec."""
    return specs[0]
