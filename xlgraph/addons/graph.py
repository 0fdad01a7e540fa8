"""``GraphWithNamedArgs`` (a graph plus the names of its state inputs) and ``BoundGraph``
(a graph with some inputs already connected to parent tensors)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import xlgraph as popxl
from xlgraph import ops, transforms
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.ops import CallSiteInfo
from xlgraph.transforms import GradGraphInfo

__all__ = ["BoundGraph", "GraphWithNamedArgs"]

Args = Mapping[popxl.Tensor, popxl.Tensor] | NamedTensors | None


def _as_mapping(named: NamedTensors, args: Args) -> dict[popxl.Tensor, popxl.Tensor]:
    """``args`` as ``{graph input: parent tensor}``; a NamedTensors is matched by name."""
    if args is None:
        return {}
    if isinstance(args, NamedTensors):
        return named.to_mapping(args)
    return dict(args)


class BoundGraph:
    """A graph with inputs bound to parent tensors; ``call`` fills the rest positionally.

    Args:
        graph: the called graph.
        args: ``{graph input: parent tensor}``.
    """

    def __init__(self, graph: popxl.Graph, args: Mapping[popxl.Tensor, popxl.Tensor] | None = None,
                 ) -> None:
        self.graph = graph
        self.args: dict[popxl.Tensor, popxl.Tensor] = dict(args or {})

    def call(self, *targs: Any, args: Mapping[popxl.Tensor, popxl.Tensor] | None = None,
             ) -> tuple[popxl.Tensor, ...]:
        """Call the graph in the current graph; returns its outputs (a tuple)."""
        return tuple(self.call_with_info(*targs, args=args).outputs)

    def call_with_info(self, *targs: Any, args: Mapping[popxl.Tensor, popxl.Tensor] | None = None,
                       ) -> CallSiteInfo:
        """Call the graph; returns the ``CallSiteInfo``. ``args`` add to the bound inputs."""
        return ops.call_with_info(self.graph, *targs, inputs_dict={**self.args, **(args or {})})

    def bind(self, args: Mapping[popxl.Tensor, popxl.Tensor]) -> BoundGraph:
        """A BoundGraph with ``args`` added to (and overriding) these."""
        return BoundGraph(self.graph, {**self.args, **dict(args)})

    def subgraph_io_map(self, *targs: Any, args: Mapping[popxl.Tensor, popxl.Tensor] | None = None,
                        outs: Any = None) -> dict[popxl.Tensor, popxl.Tensor]:
        """``{graph tensor: parent tensor}`` for a call with these inputs; ``outs`` (parent
        tensors) pair with the graph's outputs."""
        mapping = dict(zip(self.graph.inputs, targs))
        mapping.update(self.args)
        mapping.update(args or {})
        if outs is not None:
            outs = [outs] if isinstance(outs, popxl.Tensor) else list(outs)
            mapping.update(zip(self.graph.outputs, outs))
        return mapping

    def __repr__(self) -> str:
        return f"BoundGraph[{self.graph.name} bound={len(self.args)}]"


def called_infos(graph: GraphWithNamedArgs | popxl.Graph,
                 called: Mapping[Any, Any] | None) -> dict[popxl.Graph, GradGraphInfo] | None:
    """The graph's own called-graph gradient info (from ``call_module``) updated by
    ``called`` (the argument wins), keyed by plain graphs, values as ``GradGraphInfo``."""
    own = getattr(graph, "called_graphs_grad_info", None) or {}
    merged = {**own, **(called or {})}
    if not merged and called is None:
        return None
    return {getattr(k, "graph", k): getattr(v, "grad_graph_info", v) if
            isinstance(v, GraphWithNamedArgs) else v for k, v in merged.items()}


def plain_autodiff(graph: GraphWithNamedArgs | popxl.Graph,
                   grads_provided: Iterable[popxl.Tensor] | None = None,
                   grads_required: Iterable[popxl.Tensor] | None = None,
                   called_graphs_grad_info: Mapping[Any, Any] | None = None,
                   ) -> GraphWithNamedArgs:
    """PopXL's autodiff of ``graph`` with its own called-graph info merged in (the work
    behind ``addons.autodiff``)."""
    plain = graph.graph if isinstance(graph, GraphWithNamedArgs) else graph
    info = transforms.autodiff(plain, grads_provided, grads_required,
                               called_infos(graph, called_graphs_grad_info))
    return GraphWithNamedArgs.from_grad_graph(info)


class GraphWithNamedArgs:
    """A graph whose state inputs have dotted names (``args``), as ``Module.create_graph`` and
    ``autodiff`` return it.

    Args:
        graph: the graph.
        args: its named inputs.
        grad_graph_info: for a gradient graph, how it meets its forward graph.
        from_module: the module whose ``build`` made it (for ``build_grad``).
        aux: a copy of the module's ``aux`` after ``build``.
        called_graphs_grad_info: gradient info of graphs called inside, for ``autodiff``.
    """

    def __init__(self, graph: popxl.Graph, args: NamedTensors | None = None,
                 grad_graph_info: GradGraphInfo | None = None, from_module: Any = None,
                 aux: Mapping[str, Any] | None = None,
                 called_graphs_grad_info: Mapping[popxl.Graph, GradGraphInfo] | None = None,
                 ) -> None:
        self.graph = graph
        self.args = args if args is not None else NamedTensors()
        self._grad_graph_info = grad_graph_info
        self.from_module = from_module
        self.aux = dict(aux or {})
        self.called_graphs_grad_info = dict(called_graphs_grad_info or {})
        self.autodiff_applied = False

    @classmethod
    def from_grad_graph(cls, grad_graph_info: GradGraphInfo, args: NamedTensors | None = None,
                        ) -> GraphWithNamedArgs:
        """The gradient graph of ``grad_graph_info`` with ``args`` as its named inputs."""
        return cls(grad_graph_info.graph, args, grad_graph_info)

    @property
    def grad_graph_info(self) -> GradGraphInfo:
        """How this gradient graph meets its forward graph (autodiff's ``GradGraphInfo``).

        Raises:
            AttributeError: on a forward graph.
        """
        if self._grad_graph_info is None:
            raise AttributeError(f"graph {self.graph.name!r} is not a gradient graph")
        return self._grad_graph_info

    @grad_graph_info.setter
    def grad_graph_info(self, grad_graph_info: GradGraphInfo) -> None:
        self._grad_graph_info = grad_graph_info

    def bind(self, args: Args = None) -> BoundGraph:
        """Connect the named inputs to ``args``: a NamedTensors is matched by flat name (names
        only one side has are ignored), a mapping is ``{graph input: parent tensor}``."""
        return BoundGraph(self.graph, _as_mapping(self.args, args))

    def call(self, *targs: Any, args: Args = None) -> tuple[popxl.Tensor, ...]:
        """Call the graph with ``targs`` positionally and ``args`` by name; returns the outputs."""
        return self.bind(args).call(*targs)

    def call_with_info(self, *targs: Any, args: Args = None) -> CallSiteInfo:
        """As ``call``, returning the ``CallSiteInfo``."""
        return self.bind(args).call_with_info(*targs)

    def autodiff(self, grads_provided: Iterable[popxl.Tensor] | None = None,
                 grads_required: Iterable[popxl.Tensor] | None = None,
                 called_graphs_grad_info: Mapping[popxl.Graph, Any] | None = None,
                 method: str = "auto", force: bool = False) -> GraphWithNamedArgs:
        """The gradient graph of this forward graph.

        Args:
            grads_provided: outputs whose gradients are inputs (default: all).
            grads_required: inputs whose gradients are outputs (default: all).
            called_graphs_grad_info: gradient info to reuse for called graphs.
            method: ``"auto"`` (the module's ``build_grad`` when it overrides one, else
                ``addons.autodiff``), ``"build_grad"`` or ``"autodiff"``.
            force: differentiate again a graph already differentiated.

        Raises:
            ValueError: an unknown ``method``.
            RuntimeError: a second autodiff without ``force`` ("Autodiff has already been
                applied"), or ``"build_grad"`` without a module overriding it.
        """
        if method not in ("auto", "build_grad", "autodiff"):
            raise ValueError(f"`method` should be one of 'auto', 'build_grad' or 'autodiff', "
                             f"not {method!r}")
        if self.autodiff_applied and not force:
            raise RuntimeError(f"Autodiff has already been applied to graph "
                               f"{self.graph.name!r} (its gradient changed its outputs); pass "
                               f"force=True to do it again")
        module = self.from_module
        custom = module is not None and module.implements_grad_graph
        if method == "build_grad" and not custom:
            raise RuntimeError(f"autodiff(method='build_grad') of graph {self.graph.name!r} "
                               f"needs a module: only possible if `from_module` is specified "
                               f"and overrides `build_grad`")
        if custom and method != "autodiff":
            result = module.create_grad_graph(self, grads_provided, grads_required)
        else:
            result = plain_autodiff(self, grads_provided, grads_required,
                                    called_graphs_grad_info)
        self.autodiff_applied = True
        return result

    def copy(self) -> GraphWithNamedArgs:
        """A new wrapper of the same graph with a copy of the names and the same gradient
        info (the module, ``aux`` and called-graph info are not kept, as in the library)."""
        return GraphWithNamedArgs(self.graph, self.args.copy(), self._grad_graph_info)

    def print_schedule(self) -> str:
        """The graph's ops in execution order, as text."""
        return str(self.graph)

    def __repr__(self) -> str:
        return f"GraphWithNamedArgs[{self.graph.name} args={self.args.keys_flat()}]"
