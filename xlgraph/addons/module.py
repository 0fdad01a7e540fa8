"""``addons.Module``: a PopXL module that declares its own variables.

``build`` calls ``self.add_variable_input(name, init_fn, dtype)`` for each state tensor;
``create_graph`` builds the subgraph and returns the variable factories and the graph with its
inputs named. Sub-modules stored as attributes and called inside ``build`` add their inputs
under the attribute name (``fc1.weight``), inside a PopXL name scope of that name.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import xlgraph as popxl
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.graph_cache import GraphCache
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

__all__ = ["Module", "NameScopeMeta"]


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

    Args:
        cache: outline sub-modules: a sub-module called inside ``build`` (or this module,
            when called inside another's) becomes a call of a graph made once per module
            class, settings and argument specs, instead of inlined ops. True, or a
            ``GraphCache`` to share between modules.
    """

    def __init__(self, cache: bool | GraphCache = False) -> None:
        self._variable_factories = NamedVariableFactories()
        self._named_inputs = NamedTensors()
        self._name_scope: str | None = None
        if isinstance(cache, GraphCache):
            self._graph_cache: GraphCache | None = cache
        else:
            self._graph_cache = GraphCache() if cache else None

    def _state(self) -> tuple[NamedVariableFactories, NamedTensors]:
        if "_variable_factories" not in self.__dict__:  # a subclass skipped __init__
            Module.__init__(self)
        return self._variable_factories, self._named_inputs

    def _reset(self) -> None:
        self._state()
        self._variable_factories = NamedVariableFactories()
        self._named_inputs = NamedTensors()

    # -- graphs ------------------------------------------------------------------------------
    def create_graph(self, *args: Any, **kwargs: Any,
                     ) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """Build ``build`` as a subgraph of the current Ir.

        Returns:
            ``(factories, graph)``: the factories of the variables ``build`` declared and the
            graph with those inputs named.
        """
        self._reset()
        _building.stack.append(self)
        try:
            graph = popxl.gir().create_graph(self, *args, **kwargs)
        finally:
            _building.stack.pop()
        factories, named = self._state()
        return factories, GraphWithNamedArgs(graph, named)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        parent = _building.stack[-1] if _building.stack else None
        attr = _attribute_name(parent, self) if parent is not None else None
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
        if parent is not None:
            name = attr or type(self).__name__.lower()
            parent_facts, parent_named = parent._state()
            if self._variable_factories.len():
                parent_facts.insert(name, self._variable_factories)
                parent_named.insert(name, self._named_inputs)
        return result

    def _call_cached(self, cache: GraphCache, *args: Any, **kwargs: Any) -> Any:
        """Outline: call the cached graph of this module, its variables becoming inputs of
        the graph being built."""
        facts, graph = cache.create_graph(self, *args, **kwargs)
        inputs = {name: f.create_input() for name, f in facts.to_dict().items()}
        named = NamedTensors.from_dict(inputs)
        self._variable_factories = facts
        self._named_inputs = named
        tensors = [a for a in args if isinstance(a, popxl.Tensor)]
        tensors += [v for v in kwargs.values() if isinstance(v, popxl.Tensor)]
        outs = graph.bind(named).call(*tensors)
        return outs[0] if len(outs) == 1 else outs

    # -- variables ---------------------------------------------------------------------------
    def add_variable_input(self, name: str, data_iter: Any, dtype: popxl.dtype | None = None,
                           by_ref: bool = False,
                           replica_grouping: popxl.ReplicaGrouping | None = None,
                           overwrite: bool = False) -> popxl.Tensor:
        """Declare a graph input named ``name`` whose variable is made from ``data_iter``.

        Args:
            name: the input's (dotted) name.
            data_iter: a callable returning the initial data, an iterator of data, or the data.
            dtype: the dtype (default: the data's).
            by_ref: pass by reference, so in-place updates reach the variable.
            replica_grouping: replicas sharing one value.
            overwrite: replace an input already declared with this name.

        Returns:
            The graph input.
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
        tensor = popxl.graph_input(variable_f.shape_on_replica, variable_f.dtype, name,
                                   by_ref=variable_f.by_ref, meta_shape=variable_f.meta_shape)
        self._insert(name, tensor, variable_f, False)
        return tensor

    def add_variable_inputs(self, name: str, variable_f: NamedVariableFactories,
                            overwrite: bool = False) -> NamedTensors:
        """Declare an input for every factory of ``variable_f``, under ``name.``."""
        inputs = {}
        for key, factory in variable_f.to_dict().items():
            tensor = popxl.graph_input(factory.shape_on_replica, factory.dtype, key,
                                       by_ref=factory.by_ref, meta_shape=factory.meta_shape)
            self._insert(f"{name}.{key}", tensor, factory, overwrite)
            inputs[key] = tensor
        return NamedTensors.from_dict(inputs)

    def _insert(self, name: str, tensor: popxl.Tensor, factory: VariableFactory,
                overwrite: bool) -> None:
        facts, named = self._state()
        facts.insert(name, factory, overwrite)
        named.insert(name, tensor, overwrite)

    def set_name_scope(self, name: str) -> None:
        """Run this module's ``build`` inside ``popxl.name_scope(name)``."""
        self._name_scope = name

    def get(self, key: str) -> Any:
        """The sub-module or attribute at dotted ``key`` (``"layers.0.fc"``)."""
        node: Any = self
        for part in key.split("."):
            node = getattr(node, part)
        return node

    @classmethod
    def from_list(cls, sub_modules: Iterable[Module]) -> Module:
        """A module whose attributes ``"0"``, ``"1"``, ... are ``sub_modules``; its ``build``
        calls them in turn, each output feeding the next."""
        return _Sequence(sub_modules)

    @classmethod
    def from_variable_factories(cls, inputs: NamedVariableFactories) -> Module:
        """A module whose ``build`` declares an input for every factory and returns nothing."""
        return _FromFactories(inputs)


class _Sequence(Module):
    def __init__(self, sub_modules: Iterable[Module]) -> None:
        super().__init__()
        for i, m in enumerate(sub_modules):
            setattr(self, str(i), m)

    def build(self, *args: Any) -> Any:
        i = 0
        while str(i) in self.__dict__:
            out = self.__dict__[str(i)](*args)
            args = out if isinstance(out, tuple) else (out,)
            i += 1
        return args[0] if len(args) == 1 else args


class _FromFactories(Module):
    def __init__(self, inputs: NamedVariableFactories) -> None:
        super().__init__()
        self._factories = inputs

    def build(self) -> None:
        for name, factory in self._factories.to_dict().items():
            self.add_variable_factory(factory, name)


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

