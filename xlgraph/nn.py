"""Neural-network layers on ``xlgraph.Module`` with PyTorch's default initialisations.

A ``Layer`` declares its parameters (name, shape, initialiser) when it is constructed, like a
``torch.nn.Module``. Building it in a subgraph (``ir.create_graph(model, x)``) declares one graph
input per parameter, named by its dotted path (``conv1.weight``); ``create_variables`` makes the
matching variables in the main graph and ``inputs_dict`` wires them to a call site. Building it
directly in the main graph uses the variables themselves.

Example:
    >>> import xlgraph
    >>> from xlgraph import nn, ops
    >>> ir = xlgraph.Ir()
    >>> model = nn.Linear(4, 2)
    >>> graph = ir.create_graph(model, xlgraph.TensorSpec((3, 4), xlgraph.float32))
    >>> with ir.main_graph:
    ...     params = model.create_variables(seed=0)
    ...     x = xlgraph.constant([[1.0] * 4] * 3, name="x")
    ...     (y,) = ops.call(graph, x, inputs_dict=model.inputs_dict(graph, params))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlgraph import dtypes, ops
from xlgraph.context import get_current_graph
from xlgraph.graph import Graph
from xlgraph.module import Module
from xlgraph.tensor import Tensor, TensorSpec, Variable, graph_input, variable

__all__ = [
    "Parameter", "Layer", "Linear", "Conv2d", "MaxPool2d", "GroupNorm", "Dropout", "ReLU",
    "Flatten", "uniform_init", "ones_init", "zeros_init", "kaiming_uniform_bound",
    "log_softmax", "cross_entropy",
]

Init = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def uniform_init(bound: float) -> Init:
    """An initialiser drawing from U(-bound, bound)."""
    return lambda rng, shape: rng.uniform(-bound, bound, shape)


def ones_init(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Initialise with ones."""
    return np.ones(shape)


def zeros_init(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Initialise with zeros."""
    return np.zeros(shape)


def kaiming_uniform_bound(fan_in: int) -> float:
    """The bound of torch's default weight init, ``kaiming_uniform_(a=sqrt(5))``: 1/sqrt(fan_in).

    Torch draws Linear and Conv biases from the same U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    """
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


@dataclass(frozen=True)
class Parameter:
    """A declared parameter: its spec and how to initialise it."""

    spec: TensorSpec
    init: Init


class Layer(Module):
    """A ``Module`` with named parameters and child layers.

    Subclasses call ``super().__init__()``, declare parameters with ``add_parameter`` and child
    layers by attribute assignment, and read parameters in ``build`` with ``self.param(name)``.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_prefix", "")
        object.__setattr__(self, "_bound", {})

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Layer):
            if "_children" not in self.__dict__:
                raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__()")
            self._children[name] = value
            value._set_prefix(f"{self._prefix}{name}.")
        object.__setattr__(self, name, value)

    def _set_prefix(self, prefix: str) -> None:
        object.__setattr__(self, "_prefix", prefix)
        for name, child in self._children.items():
            child._set_prefix(f"{prefix}{name}.")

    # -- declaring and reading parameters ------------------------------------------------------
    def add_parameter(self, name: str, shape: tuple[int, ...], init: Init,
                      dtype: dtypes.dtype = dtypes.float32) -> None:
        """Declare a parameter of this layer (call from ``__init__``)."""
        if name in self._params:
            raise ValueError(f"{type(self).__name__}: parameter {name!r} declared twice")
        self._params[name] = Parameter(TensorSpec(tuple(shape), dtype), init)

    def param(self, name: str) -> Tensor:
        """The tensor of parameter ``name`` in the current graph.

        In a subgraph it is a graph input named by the parameter's dotted path (declared on first
        use); in the main graph it is the variable made by ``create_variables``.

        Raises:
            KeyError: for an undeclared name. RuntimeError: in a main graph without variables.
        """
        spec = self._params[name].spec
        graph = get_current_graph()
        table = self._bound.setdefault(graph, {})
        if name not in table:
            if graph.is_main:
                raise RuntimeError(
                    f"parameter {self._prefix}{name!r} has no variable in this Ir: call "
                    f"model.create_variables() in the main graph before building the model there"
                )
            table[name] = graph_input(spec.shape, spec.dtype, self._prefix + name)
        return table[name]

    # -- the whole model -----------------------------------------------------------------------
    def _layers(self) -> list[Layer]:
        out: list[Layer] = [self]
        for child in self._children.values():
            out.extend(child._layers())
        return out

    def parameters(self) -> dict[str, Parameter]:
        """Every declared parameter of this layer and its children, by dotted name."""
        return {name: layer._params[local] for name, (layer, local) in self._owners().items()}

    def _owners(self) -> dict[str, tuple[Layer, str]]:
        return {layer._prefix[len(self._prefix):] + name: (layer, name)
                for layer in self._layers() for name in layer._params}

    def create_variables(self, seed: int | None = None) -> dict[str, Variable]:
        """Create every parameter as a variable of the current (main) graph.

        Values come from the declared initialisers (PyTorch's defaults for the built-in layers),
        drawn in declaration order from ``numpy.random.default_rng(seed)``.

        Returns:
            ``{dotted name: Variable}``; the variables are also what ``param`` returns when the
            model is built in this main graph.
        """
        rng = np.random.default_rng(seed)
        graph = get_current_graph()
        made: dict[str, Variable] = {}
        for name, (layer, local) in self._owners().items():
            p = layer._params[local]
            data = np.asarray(p.init(rng, p.spec.shape), p.spec.dtype.as_numpy())
            made[name] = variable(data, p.spec.dtype, name=name)
            layer._bound.setdefault(graph, {})[local] = made[name]
        return made

    def named_tensors(self, graph: Graph | None = None) -> dict[str, Tensor]:
        """``{dotted name: tensor}`` of the parameters already used in ``graph`` (default: current).

        For a subgraph these are its parameter inputs; for a main graph, the variables.
        """
        graph = get_current_graph() if graph is None else graph
        return {name: layer._bound[graph][local]
                for name, (layer, local) in self._owners().items()
                if local in layer._bound.get(graph, {})}

    def inputs_dict(self, graph: Graph, variables: Mapping[str, Tensor]) -> dict[Tensor, Tensor]:
        """``{graph input: variable}`` for ``ops.call(graph, ..., inputs_dict=...)``.

        Args:
            graph: a subgraph this model was built in.
            variables: ``{dotted name: tensor}`` as returned by ``create_variables``.
        """
        return {t: variables[name] for name, t in self.named_tensors(graph).items()}


# -- layers ------------------------------------------------------------------------------------
def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


class Linear(Layer):
    """``y = x @ weight.T + bias`` with torch's layout ``weight: (out, in)`` and default init."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        bound = kaiming_uniform_bound(in_features)
        self.add_parameter("weight", (out_features, in_features), uniform_init(bound))
        self.has_bias = bias
        if bias:
            self.add_parameter("bias", (out_features,), uniform_init(bound))

    def build(self, x: Tensor) -> Tensor:
        y = x @ self.param("weight").T
        return y + self.param("bias") if self.has_bias else y


class Conv2d(Layer):
    """2-D convolution over NCHW input, torch's ``nn.Conv2d`` layout and default init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        kh, kw = _pair(kernel_size)
        self.stride, self.dilation, self.groups = _pair(stride), _pair(dilation), groups
        ph, pw = _pair(padding)
        self.padding = (ph, pw, ph, pw)
        bound = kaiming_uniform_bound(in_channels // groups * kh * kw)
        self.add_parameter("weight", (out_channels, in_channels // groups, kh, kw),
                           uniform_init(bound))
        self.has_bias = bias
        if bias:
            self.add_parameter("bias", (out_channels,), uniform_init(bound))

    def build(self, x: Tensor) -> Tensor:
        y = ops.conv(x, self.param("weight"), stride=self.stride, padding=self.padding,
                     dilation=self.dilation, groups=self.groups)
        if self.has_bias:
            y = y + self.param("bias").reshape((1, -1, 1, 1))
        return y


class MaxPool2d(Layer):
    """Max pooling as torch's ``nn.MaxPool2d``: ``stride`` defaults to ``kernel_size``.

    (``ops.max_pool`` follows PopXL, whose stride defaults to 1; this layer passes it explicitly.)
    """

    def __init__(self, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0) -> None:
        super().__init__()
        self.kernel_size = _pair(kernel_size)
        self.stride = self.kernel_size if stride is None else _pair(stride)
        ph, pw = _pair(padding)
        self.padding = (ph, pw, ph, pw)

    def build(self, x: Tensor) -> Tensor:
        return ops.max_pool(x, kernel_size=self.kernel_size, stride=self.stride,
                            padding=self.padding)


class GroupNorm(Layer):
    """Group normalisation over ``(N, C, ...)`` input; weight ones, bias zeros as in torch."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels {num_channels} is not divisible by {num_groups}")
        self.num_groups, self.eps = num_groups, eps
        self.add_parameter("weight", (num_channels,), ones_init)
        self.add_parameter("bias", (num_channels,), zeros_init)

    def build(self, x: Tensor) -> Tensor:
        return ops.group_norm(x, self.param("weight"), self.param("bias"),
                              num_groups=self.num_groups, eps=self.eps)


class Dropout(Layer):
    """Zero elements with probability ``p`` and scale survivors by ``1/(1-p)``.

    ``build(x, seed)``: with ``seed=None`` (evaluation) it is the identity; in training pass a
    ``uint32[2]`` seed tensor that changes every step.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def build(self, x: Tensor, seed: Tensor | None = None) -> Tensor:
        if seed is None or self.p == 0.0:
            return x
        return ops.dropout(x, seed, self.p)


class ReLU(Layer):
    """``max(x, 0)``."""

    def build(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class Flatten(Layer):
    """Flatten every dimension after the first (the batch)."""

    def build(self, x: Tensor) -> Tensor:
        return x.reshape((x.shape[0], -1))


# -- losses ------------------------------------------------------------------------------------
def log_softmax(t: Tensor, axis: int = -1) -> Tensor:
    """``log(softmax(t))`` along ``axis``, computed stably."""
    return ops.log_softmax(t, axis)


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of integer ``labels`` under ``logits`` (torch's ``F.cross_entropy``)."""
    return ops.nll_loss(log_softmax(logits, -1), labels, log_prob=True)
