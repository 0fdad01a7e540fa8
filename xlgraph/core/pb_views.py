"""Read-only PopART views of xlgraph's own graphs: ``ir._pb_ir``, ``graph._pb_graph``,
``session._pb_session``.

PopXL programs (and popxl-addons) reach PopART's C++ IR through these handles to list graphs
and ops, read op types, ids, inputs and outputs, and count ops of a type. The views answer
those questions from xlgraph's graphs; they never change them. A PopART call the views
cannot answer raises ``PopartViewError`` (an AttributeError) in one line naming the call and
the support page. Op views are instances of one class per PopART op type (``MatMulOp``,
``ReplicatedAllReduceOp``, ...), which ``popart._internal.ir.op`` hands out for
``isinstance`` checks.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # records above this module, by the members it reads (kinds.py)
    from xlgraph.core.kinds import GraphLike as Graph
    from xlgraph.core.kinds import IrLike as Ir
    from xlgraph.core.kinds import OpLike as Op
    from xlgraph.core.kinds import TensorLike as Tensor

__all__ = ["PopartViewError", "op_type", "op_class", "op_class_named", "PbIrGraphs", "PbGraph",
           "PbOp", "PbTensor", "PbSession", "SUPPORT_PAGE"]

SUPPORT_PAGE = "docs/popxl-compat.md (PopART views)"

# xlgraph op names whose PopART type is not their CamelCase form
_TYPES = {"matmul": "MatMul", "repeat": "Loop", "conditional": "If", "negate": "Neg",
          "group_norm": "GroupNormalization", "layer_norm": "GroupNormalization",
          "nll_loss": "Nll", "geluerf": "GeluErf", "ipu_copy": "IpuCopy",
          "nll_loss_with_softmax_grad": "NlllWithSoftmaxGradDirect"}
# in-place ops whose PopART type names the operand they modify
_INPLACE_TYPES = {"add": "AddLhsInplace", "scaled_add": "ScaledAddLhsInplace",
                  "mul": "MulLhsInplace"}
# PopART types whose C++ class is not ``<type>Op`` (``Sub`` ops are ``SubtractOp``s)
_CLASS_STEMS = {"Sub": "Subtract", "Neg": "Negate", "GroupNormalization": "GroupNorm",
                "BatchNormalization": "BatchNorm", "InstanceNormalization": "InstanceNorm"}
_TYPE_OF_STEM = {stem: type_ for type_, stem in _CLASS_STEMS.items()}
_DTYPES = {"float32": "FLOAT", "float64": "DOUBLE"}
# var-update ops PopART implements as one class, the variant being an attribute
_VAR_UPDATES = {**dict.fromkeys(["accumulate_", "accumulate_square_", "accumulate_mean_",
                                 "accumulate_moving_average_",
                                 "accumulate_moving_average_square_"], "Accumulate"),
                "accumulator_scale_": "AccumulatorScale", "accumulator_zero_": "AccumulatorScale",
                "sparse_accumulate_": "SparseAccumulate"}


class PopartViewError(AttributeError):
    """A PopART call that xlgraph's read-only views cannot answer."""


def _refuse(owner: str, name: str) -> PopartViewError:
    return PopartViewError(f"{owner}.{name}: not answerable from xlgraph's read-only PopART "
                           f"view of its own graphs; see {SUPPORT_PAGE}")


class _View:
    """Refuses, in one line, any PopART name it does not define."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _refuse(type(self).__name__, name)


def op_type(name: str) -> str:
    """The PopART op type of an xlgraph op name: ``matmul`` -> ``MatMul``, ``add_`` ->
    ``AddLhsInplace``, ``relu_`` -> ``ReluInplace``, ``replicated_all_reduce`` ->
    ``ReplicatedAllReduce``; every ``accumulate*_`` op -> ``Accumulate``."""
    if name in _VAR_UPDATES:
        return _VAR_UPDATES[name]
    base = name.rstrip("_")
    if name.endswith("_") and base in _INPLACE_TYPES:
        return _INPLACE_TYPES[base]
    camel = _TYPES.get(base) or "".join(p[:1].upper() + p[1:] for p in base.split("_"))
    return camel + ("Inplace" if name.endswith("_") else "")


class PbOp(_View):
    """One op (``graph._pb_graph.getOps()`` gives them in schedule order)."""

    def __init__(self, op: Op, op_id: int) -> None:
        self._op = op
        self.id = op_id
        self.opid = _OperatorIdentifier(op_type(op.defn.name))

    def opType(self) -> str:  # noqa: N802 - PopART's name
        return self.opid.type

    def getName(self) -> str:  # noqa: N802
        return self._op.name

    def name(self) -> str:
        return self._op.name

    def debugName(self) -> str:  # noqa: N802
        return f"{self.opid.type}({self.id})"

    def str(self) -> str:
        return f"{self.id} ({self.opid.domain}.{self.opid.type}:{self.opid.version})"

    def getGraph(self) -> PbGraph:  # noqa: N802
        return PbGraph(self._op.graph)

    def inTensorCount(self) -> int:  # noqa: N802
        return len(self._op.inputs)

    def outTensorCount(self) -> int:  # noqa: N802
        return len(self._op.outputs)

    def inTensor(self, index: int) -> PbTensor:  # noqa: N802
        return PbTensor(self._op.inputs[index])

    def outTensor(self, index: int) -> PbTensor:  # noqa: N802
        return PbTensor(self._op.outputs[index])

    def inId(self, index: int) -> str:  # noqa: N802
        return self._op.inputs[index].id

    def outId(self, index: int) -> str:  # noqa: N802
        return self._op.outputs[index].id

    def hasInput(self, index: int) -> bool:  # noqa: N802
        return 0 <= index < len(self._op.inputs)

    def hasOutput(self, index: int) -> bool:  # noqa: N802
        return 0 <= index < len(self._op.outputs)

    def getInputTensors(self) -> list[PbTensor]:  # noqa: N802
        return [PbTensor(t) for t in self._op.inputs]

    def getOutputTensors(self) -> list[PbTensor]:  # noqa: N802
        return [PbTensor(t) for t in self._op.outputs]

    def getCalledGraphs(self) -> list[PbGraph]:  # noqa: N802
        return [PbGraph(g) for g in self._op.called_graphs]

    def isInplaceViewChange(self) -> bool:  # noqa: N802
        return bool(self._op.defn.view)

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self.debugName()}]"


class _OperatorIdentifier:
    def __init__(self, type_: str) -> None:
        self.type = type_
        self.domain = "ai.graphcore"
        self.version = 1

    def __repr__(self) -> str:
        return f"OperatorIdentifier({self.domain}.{self.type}:{self.version})"


_CLASSES: dict[str, type[PbOp]] = {}


def op_class(type_name: str) -> type[PbOp]:
    """The view class of PopART op type ``type_name``, named as PopART's C++ class
    (``"MatMul"`` -> ``MatMulOp``, ``"Sub"`` -> ``SubtractOp``, ``"GroupNormalization"`` ->
    ``GroupNormOp``), made once; every op view of that type is an instance."""
    if not re.fullmatch(r"[A-Za-z]\w*", type_name):
        raise ValueError(f"not a PopART op type: {type_name!r}")
    if type_name not in _CLASSES:
        name = f"{_CLASS_STEMS.get(type_name, type_name)}Op"
        _CLASSES[type_name] = type(name, (PbOp,), {"__module__": __name__})
    return _CLASSES[type_name]


def op_class_named(class_name: str) -> type[PbOp]:
    """The view class PopART calls ``class_name`` (``"SubtractOp"``; the type's own name,
    ``"SubOp"``, gives the same class)."""
    stem = class_name[:-2]
    return op_class(_TYPE_OF_STEM.get(stem, stem))


def _op_view(op: Op, op_id: int) -> PbOp:
    return op_class(op_type(op.defn.name))(op, op_id)


class _TensorInfo(_View):
    def __init__(self, t: Tensor) -> None:
        self._t = t

    def shape(self) -> list[int]:
        return list(self._t.shape)

    def metaShape(self) -> list[int]:  # noqa: N802
        return list(self._t.meta_shape or ())

    def nelms(self) -> int:
        return int(self._t.nelms)

    def rank(self) -> int:
        return len(self._t.shape)

    def dataType(self) -> str:  # noqa: N802
        name = self._t.dtype.name
        return _DTYPES.get(name, name.upper())


class PbTensor(_View):
    """One tensor: ``id``, ``info`` (shape, dtype), producer and type."""

    def __init__(self, t: Tensor) -> None:
        self._t = t
        self.id = t.id
        self.info = _TensorInfo(t)

    def tensorType(self) -> str:  # noqa: N802
        kind = type(self._t).__name__
        return {"Variable": "Variable", "Constant": "Const"}.get(kind, "ActGrad")

    def hasProducer(self) -> bool:  # noqa: N802
        return self._t.producer is not None

    def getProducer(self) -> PbOp:  # noqa: N802
        if self._t.producer is None:
            raise _refuse("Tensor", f"getProducer() of {self.id}, which has no producer")
        return PbGraph(self._t.graph)._view_of(self._t.producer)

    def getGraph(self) -> PbGraph:  # noqa: N802
        return PbGraph(self._t.graph)

    def __repr__(self) -> str:
        return f"Tensor[{self.id}]"


class _GraphId:
    def __init__(self, name: str) -> None:
        self._name = name

    def str(self) -> str:
        return self._name

    def __eq__(self, other: object) -> bool:
        return str(other) == self._name if isinstance(other, str) else \
            isinstance(other, _GraphId) and other._name == self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def __str__(self) -> str:
        return self._name


class PbGraph(_View):
    """One graph: ``id``, ``getOps()`` in schedule (creation) order, inputs and outputs."""

    def __init__(self, graph: Graph) -> None:
        self._graph = graph
        self.id = _GraphId(graph.id)

    def _view_of(self, op: Op) -> PbOp:
        return _op_view(op, op.id)

    def getOps(self) -> list[PbOp]:  # noqa: N802
        return [self._view_of(op) for op in self._graph.ops]

    def getOpSchedule(self, *_: Any) -> list[PbOp]:  # noqa: N802
        return self.getOps()

    def getInputIds(self) -> list[str]:  # noqa: N802
        return [t.id for t in self._graph.inputs]

    def getOutputIds(self) -> list[str]:  # noqa: N802
        return [t.id for t in self._graph.outputs]

    def getInputId(self, index: int) -> str:  # noqa: N802
        return self._graph.inputs[index].id

    def getOutputId(self, index: int) -> str:  # noqa: N802
        return self._graph.outputs[index].id

    def getInputIndex(self, tensor_id: str) -> int:  # noqa: N802
        return self.getInputIds().index(tensor_id)

    def getOutputIndex(self, tensor_id: str) -> int:  # noqa: N802
        return self.getOutputIds().index(tensor_id)

    def getTensor(self, tensor_id: str) -> PbTensor:  # noqa: N802
        for t in self._graph.tensors:
            if t.id == tensor_id or t.name == tensor_id:
                return PbTensor(t)
        raise _refuse("Graph", f"getTensor({tensor_id!r}): no such tensor in "
                               f"{self._graph.name!r}")

    def getTensorIds(self) -> list[str]:  # noqa: N802
        return [t.id for t in self._graph.tensors]

    def getCalledGraphs(self) -> list[PbGraph]:  # noqa: N802
        return [PbGraph(g) for g in self._graph.called_graphs]

    def getGraphString(self) -> str:  # noqa: N802
        return str(self._graph)

    def __repr__(self) -> str:
        return f"Graph[{self.id}]"


class PbIrGraphs:
    """The graph and op listing part of ``ir._pb_ir`` (its session options are
    ``xlgraph.options.PbIr``'s)."""

    _ir: Ir

    def getAllGraphs(self) -> list[PbGraph]:  # noqa: N802
        return [PbGraph(g) for g in self._ir.graphs]

    def getMainGraph(self) -> PbGraph:  # noqa: N802
        return PbGraph(self._ir.main_graph)

    def getGraph(self, graph_id: Any) -> PbGraph:  # noqa: N802
        for g in self._ir.graphs:
            if g.id == str(graph_id):
                return PbGraph(g)
        raise _refuse("Ir", f"getGraph({graph_id!s}): no such graph")

    def hasGraph(self, graph_id: Any) -> bool:  # noqa: N802
        return any(g.id == str(graph_id) for g in self._ir.graphs)

    def getAllOps(self) -> list[PbOp]:  # noqa: N802
        return [op for g in self.getAllGraphs() for op in g.getOps()]

    def getReplicationFactor(self) -> int:  # noqa: N802
        return int(self._ir.replication_factor)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _refuse("Ir", name)


class PbSession(_View):
    """``session._pb_session``: ``setEngineIsLoaded`` records the flag (the simulator has no
    engine to load, so it changes nothing else)."""

    def __init__(self) -> None:
        self._engine_loaded = False

    def setEngineIsLoaded(self, loaded: bool) -> None:  # noqa: N802
        self._engine_loaded = bool(loaded)

    def getEngineIsLoaded(self) -> bool:  # noqa: N802
        return self._engine_loaded
