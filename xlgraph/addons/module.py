"""``addons.Module``: a PopXL module that declares its own variables.

``build`` calls ``self.add_variable_input(name, init_fn, dtype)`` for each state tensor;
``create_graph`` builds the subgraph and returns the variable factories and the graph with its
inputs named. Sub-modules stored as attributes and called inside ``build`` add their inputs
under the attribute name (``fc1.weight``), inside a PopXL name scope of that name.

Over 400 lines: ``Module`` is one class with popxl-addons' surface (building, variable
inputs, graphs, gradients through ``module_grad.py``, sub-module naming); its gradient
graph already lives apart.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import xlgraph as popxl
from xlgraph.addons import module_tree
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.graph_cache import GraphCache
from xlgraph.addons.module_grad import Aux, VarGrad
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.utils import overrides
from xlgraph.addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)
from xlgraph.transforms import GradGraphInfo

__all__ = ["Module", "NameScopeMeta", "Aux", "VarGrad"]

_INLINING = ("error", "warning", "none")


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[popxl.Tensor]:
    """The tensor arguments of a call, positional then keyword."""
    return [a for a in [*args, *kwargs.values()] if isinstance(a, popxl.Tensor)]


class _Building(threading.local):
    def __init__(self) -> None:
        self.stack: list[Module] = []


_building = _Building()


def _scoped_build(build: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(build)
    def run(self: Module, *args: Any, **kwargs: Any) -> Any:
        scope = self.__dict__.get("_name_scope")
        pushed = not _building.stack or _building.stack[-1] is not self
        if pushed:  # built by plain ``ir.create_graph(module)``: sub-modules still report here
            _building.stack.append(self)
        try:
            with popxl.name_scope(scope) if scope else contextlib.nullcontext():
                return build(self, *args, **kwargs)
        finally:
            if pushed:
                _building.stack.pop()

    return run


class NameScopeMeta(type):
    """Runs each subclass's ``build`` inside the module's name scope (``set_name_scope``)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
        if "build" in namespace:
            namespace["build"] = _scoped_build(namespace["build"])
        return super().__new__(mcs, name, bases, namespace)


class Module(popxl.Module, metaclass=NameScopeMeta):
    """A module whose graph inputs carry dotted names and variable factories.

    While ``build`` runs, the module records its variable factories and named inputs, ``aux``
    (auxiliary tensors and values for a custom gradient), ``var_grad`` (filled by
    ``build_grad``) and the gradient info of the graphs it called through ``call_module``.
    Every graph creation starts from, and leaves, an empty record.

    Args:
        cache: outline sub-modules: a sub-module called inside ``build`` (or this module,
            when called inside another's) becomes a call of a graph made once per module
            class, settings and argument specs, instead of inlined ops. True, or a
            ``GraphCache`` to share between modules.
        grad_inlining_error: what calling a module that overrides ``build_grad`` inline
            (rather than through ``create_graph`` / ``call_module``) does: ``"error"``
            (an exception), ``"warning"`` (a UserWarning) or ``"none"``; inline, its
            gradient is autodiff's.

    Raises:
        ValueError: ``cache`` with a ``build_grad`` override, or an unknown
            ``grad_inlining_error``.
    """

    aux: dict[str, Any]  # written in build, read in build_grad (Aux)
    var_grad: dict[str, popxl.Tensor]  # variable gradients set by build_grad (VarGrad)
    # What Module keeps for itself (records, links, options that never change a graph): the
    # rest of a module's attributes are its settings, which key its graphs (cache_key).
    _record_attributes = frozenset({
        "grad_inlining_error", "_name_scope", "_graph_cache", "_links", "_variable_factories",
        "_named_inputs", "_called_graphs_grad_info", "aux", "var_grad"})

    def __init__(self, cache: bool | GraphCache = False,
                 grad_inlining_error: str = "error") -> None:
        if cache and self.implements_grad_graph:
            raise ValueError(f"You cannot use graph caching if you have implemented "
                             f"`build_grad` ({type(self).__name__})")
        if grad_inlining_error not in _INLINING:
            raise ValueError(f"grad_inlining_error should be one of 'error', 'warning', "
                             f"'none'. Not: {grad_inlining_error!r}")
        self.grad_inlining_error = grad_inlining_error
        self._name_scope: str | None = None
        if isinstance(cache, GraphCache):
            self._graph_cache: GraphCache | None = cache
        else:
            self._graph_cache = GraphCache() if cache else None
        self._reset()

    @property
    def implements_grad_graph(self) -> bool:
        """Whether this module's class overrides ``build_grad`` (a custom gradient)."""
        return overrides(type(self), Module, "build_grad")

    def build_grad(self, *grads: popxl.Tensor) -> Any:
        """Override to give the module its own gradient: take the gradients of the forward
        outputs (positionally), read ``self.aux`` for forward values, set
        ``self.var_grad[name]`` for every variable, and return the gradients of the other
        inputs in ``grads_required`` order."""
        raise NotImplementedError(f"{type(self).__name__} does not override build_grad")

    def _state(self) -> tuple[NamedVariableFactories, NamedTensors]:
        if "_variable_factories" not in self.__dict__:  # a subclass skipped __init__
            Module.__init__(self)
        return self._variable_factories, self._named_inputs

    def _reset(self) -> None:
        """Empty the record in place (factories, named inputs, aux, var_grad, called-graph
        info), linked sub-modules' too, keeping the links."""
        self.__dict__.setdefault("grad_inlining_error", "error")
        self.__dict__.setdefault("_name_scope", None)
        self.__dict__.setdefault("_graph_cache", None)
        module_tree.reset(self)

    def __setattr__(self, key: str, value: Any) -> None:
        """Assigning a module links its record under ``key`` (see ``module_tree``)."""
        if isinstance(value, Module):
            self._state()
            value._state()
            module_tree.link(self, key, value)
        super().__setattr__(key, value)

    # -- graphs ------------------------------------------------------------------------------
    def create_graph(self, *args: Any, **kwargs: Any,
                     ) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """Build ``build`` as a subgraph of the current Ir.

        Tensor (and TensorSpec) arguments become positional graph inputs; the variables
        ``build`` declares become named inputs.

        Returns:
            ``(factories, graph)``: the factories of the variables ``build`` declared and the
            graph with those inputs named; the graph keeps this module (``from_module``), a
            copy of ``aux`` and the gradient info of the graphs ``build`` called.
        """
        self._reset()
        _building.stack.append(self)
        try:
            graph = popxl.gir().create_graph(self, *args, **kwargs)
        finally:
            _building.stack.pop()
        if self.implements_grad_graph:  # autodiff of a caller must use build_grad's graph
            graph.recursively_autodiffable = False
        factories, named = (tree.copy() for tree in self._state())
        result = GraphWithNamedArgs(graph, named, from_module=self, aux=dict(self.aux),
                                    called_graphs_grad_info=module_tree.called_infos(self))
        self._reset()
        return factories, result

    def create_grad_graph(self, fwd_graph: GraphWithNamedArgs,
                          grads_provided: Iterable[popxl.Tensor] | None = None,
                          grads_required: Iterable[popxl.Tensor] | None = None,
                          ) -> GraphWithNamedArgs:
        """The gradient graph of ``fwd_graph`` built by this module's ``build_grad`` (usually
        reached through ``fwd_graph.autodiff()``). Every tensor in the forward ``aux``
        becomes a forward output; apply once per forward graph.

        Raises:
            ValueError: a provided tensor is not a forward output, a required one is not a
                forward input, duplicates, a variable without ``var_grad``, or a wrong number
                or shape of returned gradients.
        """
        from xlgraph.addons.module_grad import create_grad_graph

        return create_grad_graph(self, fwd_graph, grads_provided, grads_required)

    def create_grad_graph_info(self, grad_graph: popxl.Graph,
                               fwd_graph: GraphWithNamedArgs | popxl.Graph,
                               fwd_tensors: Mapping[popxl.Tensor, popxl.Tensor] | None = None,
                               grads_provided: Iterable[popxl.Tensor] | None = None,
                               grads_required: Iterable[popxl.Tensor] | None = None,
                               ) -> GradGraphInfo:
        """Describe a hand-built gradient graph of ``fwd_graph`` for autodiff and
        ``GradGraphInfo``'s helpers.

        Args:
            grad_graph: the gradient graph.
            fwd_graph: its forward graph.
            fwd_tensors: ``{gradient-graph input: forward tensor}`` for the inputs that take a
                forward value (the ``aux`` reads); every other input, in order, takes the
                gradient of the next forward output of ``grads_provided``.
            grads_provided: the forward outputs whose gradients feed in (default: all).
            grads_required: the forward inputs whose gradients ``grad_graph`` outputs, in
                output order (default: all).

        Raises:
            ValueError: the counts of gradient inputs or outputs do not match.
        """
        from xlgraph.addons.module_grad import grad_graph_info

        fwd = fwd_graph.graph if isinstance(fwd_graph, GraphWithNamedArgs) else fwd_graph
        return grad_graph_info(grad_graph, fwd, dict(fwd_tensors or {}), grads_provided,
                               grads_required)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.implements_grad_graph:
            self._inlined()
        parent = _building.stack[-1] if _building.stack else None
        linked = parent is not None and module_tree.reaches(parent, self)
        attr = _attribute_name(parent, self) if parent is not None and not linked else None
        self._reset()
        scope = popxl.name_scope(attr) if attr else contextlib.nullcontext()
        _building.stack.append(self)
        try:
            with scope:
                cache = self._graph_cache or (parent._graph_cache if parent else None)
                if cache is not None:
                    result = self._call_cached(cache, *args, **kwargs)
                else:
                    result = self.build(*args, **kwargs)
        finally:
            _building.stack.pop()
        if parent is not None and not linked:  # held outside a module attribute
            name = attr or type(self).__name__.lower()
            parent_facts, parent_named = parent._state()
            if self._variable_factories.len_flat():
                parent_facts._insert_path(name, self._variable_factories.copy())
                parent_named._insert_path(name, self._named_inputs.copy())
            for g, info in module_tree.called_infos(self).items():
                parent._called_graphs_grad_info.setdefault(g, info)
        return result

    def _inlined(self) -> None:
        text = (f"`build_grad` has been implemented for {type(self).__name__}, but it is "
                f"called inline, so autodiff differentiates its ops instead: build it with "
                f"create_graph (or call_module) to use build_grad")
        if self.__dict__.get("grad_inlining_error", "error") == "error":
            raise RuntimeError(text + "; Module(grad_inlining_error='warning' or 'none') "
                               "allows it")
        if self.grad_inlining_error == "warning":
            warnings.warn(text, UserWarning, stacklevel=3)

    def _call_cached(self, cache: GraphCache, *args: Any, **kwargs: Any) -> Any:
        """Outline: call the cached graph of this module, its variables becoming inputs of
        the graph being built."""
        facts, graph = cache.create_graph(self, *args, **kwargs)
        inputs = {name: f.create_input() for name, f in facts.to_dict().items()}
        named = NamedTensors.from_dict(inputs)
        module_tree.refill(self._variable_factories, facts)
        module_tree.refill(self._named_inputs, named)
        outs = graph.bind(named).call(*_tensors(args, kwargs))
        return outs[0] if len(outs) == 1 else outs

    def call_module(self, module: Module, name: str | None = None, autodiff: str = "auto",
                    grads_provided: Callable[[GraphWithNamedArgs], Any] | None = None,
                    grads_required: Callable[[GraphWithNamedArgs], Any] | None = None,
                    ) -> Callable[..., Any]:
        """A function that, called inside ``build`` with ``module``'s arguments, creates
        ``module``'s graph, declares its variables under ``name`` (default: the class name),
        optionally makes its gradient graph (registered for the autodiff of this module's
        graph) and calls it, returning only the forward outputs. The function keeps
        ``.graph`` and ``.var_factories`` after the call.

        Args:
            module: the sub-module.
            name: where its variables go.
            autodiff: ``"auto"`` (its ``build_grad`` when it overrides one), ``"build_grad"``,
                ``"autodiff"`` or ``"none"``.
            grads_provided, grads_required: callables taking the new graph, for the gradient.
        """
        if autodiff not in ("auto", "build_grad", "autodiff", "none"):
            raise ValueError(f"call_module(autodiff={autodiff!r}): expected 'auto', "
                             f"'build_grad', 'autodiff' or 'none'")

        def call(*args: Any, **kwargs: Any) -> tuple[popxl.Tensor, ...]:
            facts, graph = module.create_graph(*args, **kwargs)
            n_out = len(graph.graph.outputs)
            for g, info in graph.called_graphs_grad_info.items():  # always inherited
                self._called_graphs_grad_info.setdefault(g, info)
            mode = autodiff
            if mode == "auto":
                mode = "build_grad" if module.implements_grad_graph else "none"
            if mode != "none":
                grad = graph.autodiff(grads_provided(graph) if grads_provided else None,
                                      grads_required(graph) if grads_required else None,
                                      method=mode)
                self._called_graphs_grad_info[graph.graph] = grad.grad_graph_info
            inputs = self.add_variable_inputs(name or type(module).__name__, facts)
            call.graph, call.var_factories = graph, facts  # type: ignore[attr-defined]
            return graph.bind(inputs).call(*_tensors(args, kwargs))[:n_out]

        return call

    # -- variables ---------------------------------------------------------------------------
    def add_variable_input(self, name: str, data_iter: Any, dtype: popxl.dtype | None = None,
                           by_ref: bool = False,
                           replica_grouping: popxl.ReplicaGrouping | None = None,
                           overwrite: bool = False) -> popxl.Tensor:
        """Declare a graph input named ``name`` (dotted names nest) whose variable is made
        from ``data_iter``.

        Args:
            name: the input's (dotted) name.
            data_iter: a callable returning the initial data, or an iterable of data.
            dtype: the dtype (default: the data's).
            by_ref: pass by reference, so in-place updates reach the variable.
            replica_grouping: replicas sharing one value.
            overwrite: replace an input already declared with this name.

        Returns:
            The graph input.

        Raises:
            ValueError: ``name`` is taken and ``overwrite`` is False.
        """
        tensor, factory = add_variable_input(name, data_iter, dtype, by_ref, replica_grouping)
        self._insert(name, tensor, factory, overwrite)
        return tensor

    def add_replica_sharded_variable_input(self, name: str, data_iter: Any,
                                           dtype: popxl.dtype | None = None, by_ref: bool = False,
                                           replica_grouping: popxl.ReplicaGrouping | None = None,
                                           shard_over: int | None = None) -> popxl.Tensor:
        """As ``add_variable_input`` for a variable split over ``shard_over`` replicas: the
        input is one flat shard (``meta_shape`` is the whole shape)."""
        tensor, factory = add_replica_sharded_variable_input(
            name, data_iter, dtype, by_ref, replica_grouping, shard_over)
        self._insert(name, tensor, factory, False)
        return tensor

    def add_variable_factory(self, variable_f: VariableFactory, name: str | None = None,
                             ) -> popxl.Tensor:
        """Declare a graph input for an existing factory; returns the input."""
        name = name or variable_f.name
        if not name:
            raise ValueError("add_variable_factory: the factory has no name; pass name=")
        tensor = variable_f.create_input_named(name)
        self._insert(name, tensor, variable_f, False)
        return tensor

    def add_variable_inputs(self, name: str | int, variable_f: NamedVariableFactories,
                            overwrite: bool = False) -> NamedTensors:
        """Declare an input for every factory of ``variable_f``, under ``name.`` (an int name
        must be >= 0); returns them as a NamedTensors keyed like ``variable_f``."""
        if isinstance(name, int) and name < 0:
            raise ValueError(f"add_variable_inputs: name {name} must be >= 0")
        inputs = {}
        for key, factory in variable_f.to_dict().items():
            tensor = factory.create_input_named(key)
            self._insert(f"{name}.{key}", tensor, factory, overwrite)
            inputs[key] = tensor
        return NamedTensors.from_dict(inputs)

    def _insert(self, name: str, tensor: popxl.Tensor, factory: VariableFactory,
                overwrite: bool) -> None:
        facts, named = self._state()
        if overwrite and name in facts:
            facts.pop(name)
            named.pop(name)
        facts._insert_path(name, factory)
        named._insert_path(name, tensor)

    def set_name_scope(self, name: str) -> None:
        """Run this module's ``build`` inside ``popxl.name_scope(name)``."""
        self._name_scope = name

    def get(self, key: str | int) -> Any:
        """The sub-module or attribute at dotted ``key`` (``"layers.0.fc"``; ints become
        strings)."""
        node: Any = self
        for part in str(key).split("."):
            node = getattr(node, part)
        return node

    def __getitem__(self, key: str | int) -> Any:
        return self.get(key)

    def __iter__(self) -> Iterator[Module]:
        if not self.__dict__.get("_from_list"):
            raise AttributeError(f"{type(self).__name__} is not iterable: only modules made "
                                 f"by from_list are")
        count = 0
        while str(count) in self.__dict__:
            count += 1
        return iter([self.__dict__[str(i)] for i in range(count)])

    @classmethod
    def from_list(cls, sub_modules: Iterable[Module]) -> Module:
        """A module (of this class, made with no arguments) whose attributes ``"0"``,
        ``"1"``, ... are ``sub_modules``; it can be iterated. ``Module.from_list`` itself
        gives a module whose ``build`` calls them in turn, each output feeding the next."""
        module = _Sequence() if cls is Module else cls()
        for i, m in enumerate(sub_modules):
            setattr(module, str(i), m)
        module._from_list = True
        return module

    @classmethod
    def from_variable_factories(cls, inputs: Iterable[VariableFactory] | NamedVariableFactories,
                                ) -> Module:
        """A module (of this class, made with no arguments) holding one graph input per
        factory, made at once in the graph being built: ``module[i]`` is the i-th input,
        declared as variable ``"<i>"`` (call it inside ``build`` and assign the module to an
        attribute, so the inputs are named ``<attribute>.<i>``)."""
        factories = inputs.values_flat() if isinstance(inputs, NamedVariableFactories) \
            else list(inputs)
        module = cls()
        for i, factory in enumerate(factories):
            setattr(module, str(i), module.add_variable_factory(factory, name=str(i)))
        return module


class _Sequence(Module):
    def build(self, *args: Any) -> Any:
        i = 0
        while str(i) in self.__dict__:
            out = self.__dict__[str(i)](*args)
            args = out if isinstance(out, tuple) else (out,)
            i += 1
        return args[0] if len(args) == 1 else args


def _attribute_name(parent: Module, child: Module) -> str | None:
    """The name under which ``parent`` holds ``child`` (directly, or in a list/tuple/dict
    attribute as ``attr.index``)."""
    for name, value in vars(parent).items():
        if value is child:
            return name
        if isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if item is child:
                    return f"{name}.{i}"
        if isinstance(value, dict):
            for k, item in value.items():
                if item is child:
                    return f"{name}.{k}"
    return None

