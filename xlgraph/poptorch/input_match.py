"""Matching each call's inputs against those a PopTorch model was compiled for.

PopTorch compiles once, for the first call's inputs; every later call must give the same
structure, tensor shapes and dtypes, and the same non-tensor values, or ``poptorch.Error`` names
the first difference in PopTorch's words (``Shape mismatch for x: expected torch.Size([4, 4])
but got torch.Size([2, 4]).``). Dicts, and any ``dict`` subclass, are compared as key sets: the
same keys in another order are the same input, fed by key. The ``**kwargs`` of ``forward`` are
one dict named ``named arguments`` whose entries are reported by their bare names.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from xlgraph.errors import user_source_line
from xlgraph.poptorch.arguments import InputMismatchError

__all__ = ["CompiledInputs", "register_dict_types"]

_FIX = ("This error occurred because the inputs passed at runtime don't match the inputs used "
        "to compile the model. To recompile the model for the new inputs create a new "
        "inferenceModel / trainingModel wrapper or call destroy() on the curent one and try "
        "again.")
_NAMED = "named arguments"


@dataclass(frozen=True)
class _Tensor:
    shape: torch.Size
    dtype: torch.dtype


@dataclass(frozen=True)
class _Mapping:
    entries: dict[Any, Any]


@dataclass(frozen=True)
class _Sequence:
    kind: type
    items: tuple[Any, ...]


@dataclass(frozen=True)
class _Node:
    """Another pytree node (a ``registerCustomArgParser`` type): compared by its pytree."""

    spec: Any
    leaves: tuple[tuple[Any, Any], ...]


def _template(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _Tensor(value.shape, value.dtype)
    if isinstance(value, dict):
        return _Mapping({k: _template(v) for k, v in value.items()})
    if type(value) in (list, tuple) or (isinstance(value, tuple) and hasattr(value, "_fields")):
        return _Sequence(type(value), tuple(_template(v) for v in value))
    leaves, spec = pytree.tree_flatten_with_path(value)
    if spec.is_leaf():
        return value
    return _Node(spec, tuple((path, _template(leaf)) for path, leaf in leaves))


def _fail(message: str) -> None:
    raise InputMismatchError(f"{message}\n{_FIX} [called at {user_source_line()}]")


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - values without a plain ==, e.g. arrays
        return a is b


def _entry(where: str, key: Any) -> str:
    return str(key) if where == _NAMED else f"{where}[{key}]"


def _match(template: Any, value: Any, where: str, positional: bool = False) -> Any:
    """``value`` checked against ``template``, with its dicts in the compiled key order."""
    if isinstance(template, _Tensor):
        if not isinstance(value, torch.Tensor):
            _fail(f"Type mismatch for {where}: expected {torch.Tensor} but got {type(value)}.")
        if value.dtype != template.dtype:
            _fail(f"Data type mismatch for {where}: expected {template.dtype} but got "
                  f"{value.dtype}.")
        if value.shape != template.shape:
            _fail(f"Shape mismatch for {where}: expected {template.shape} but got "
                  f"{value.shape}.")
        return value
    if isinstance(template, _Mapping):
        return _match_mapping(template, value, where)
    if isinstance(template, _Sequence):
        if type(value) is not template.kind:
            _fail(f"Type mismatch for {where}: expected {template.kind} but got {type(value)}.")
        if len(value) != len(template.items):
            _fail(f"Number of positional arguments mismatch: expected {len(template.items)} "
                  f"arguments but got {len(value)}." if positional else
                  f"Length mismatch for {where}: expected {len(template.items)} elements but "
                  f"got {len(value)}.")
        items = [_match(t, v, f"{where}[{i}]") for i, (t, v) in
                 enumerate(zip(template.items, value))]
        if all(a is b for a, b in zip(items, value)):
            return value
        return value._make(items) if hasattr(value, "_make") else type(value)(items)
    if isinstance(template, _Node):
        return _match_node(template, value, where)
    if isinstance(value, torch.Tensor) or type(value) is not type(template):
        _fail(f"Type mismatch for {where}: expected {type(template)} but got {type(value)}.")
    if not _same(template, value):
        _fail(f"Value mismatch for {where}: expected {template} but got {value}.")
    return value


def _match_mapping(template: _Mapping, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        _fail(f"Type mismatch for {where}: expected {dict} but got {type(value)}.")
    unexpected = sorted(str(k) for k in value if k not in template.entries)
    missing = sorted(str(k) for k in template.entries if k not in value)
    if unexpected or missing:
        parts = ([f"Unexpected arguments: {', '.join(unexpected)}"] if unexpected else []) + \
            ([f"Missing arguments: {', '.join(missing)}"] if missing else [])
        _fail(f"Keys mismatch for {where}: {'. '.join(parts)}.")
    entries = {k: _match(t, value[k], _entry(where, k)) for k, t in template.entries.items()}
    if list(value) == list(entries) and all(entries[k] is value[k] for k in entries):
        return value
    ordered = copy.copy(value)  # the caller's type and attributes, in the compiled key order
    ordered.clear()
    ordered.update(entries)
    return ordered


def _match_node(template: _Node, value: Any, where: str) -> Any:
    leaves, spec = pytree.tree_flatten_with_path(value)
    if spec.type is not template.spec.type:
        _fail(f"Type mismatch for {where}: expected {template.spec.type} but got "
              f"{type(value)}.")
    if spec != template.spec:
        _fail(f"Value mismatch for {where}: expected {template.spec.context} but got "
              f"{spec.context}.")
    for (path, want), (_, leaf) in zip(template.leaves, leaves):
        _match(want, leaf, where + pytree.keystr(path))
    return value


@dataclass
class CompiledInputs:
    """The arguments a model was compiled for, as ``check`` compares them."""

    templates: dict[str, Any]
    var_positional: str | None = None
    var_keyword: str | None = None

    @classmethod
    def of(cls, bound: dict[str, Any], signature: inspect.Signature | None = None,
           ) -> CompiledInputs:
        kinds = {} if signature is None else {p.kind: p.name for p in
                                                signature.parameters.values()}
        return cls({name: _template(value) for name, value in bound.items()},
                   kinds.get(inspect.Parameter.VAR_POSITIONAL),
                   kinds.get(inspect.Parameter.VAR_KEYWORD))

    def check(self, bound: dict[str, Any]) -> dict[str, Any]:
        """``bound`` with its dicts in the compiled key order.

        Raises:
            InputMismatchError: at the first argument that differs from the compiled ones,
                naming it (``x``, ``xs[1]``, ``batch[x]``), what was compiled and what was given.
        """
        return {name: _match(template, bound.get(name),
                             _NAMED if name == self.var_keyword else name,
                             positional=name == self.var_positional)
                for name, template in self.templates.items()}


def register_dict_types(values: dict[str, Any] | list[Any]) -> None:
    """Make each ``dict`` subclass among ``values`` (arguments by name, or outputs) a torch
    pytree node (values in key order), so that capture flattens it and results of its type
    are rebuilt as that type."""
    pending = list(values.values() if isinstance(values, dict) else values)
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            kind = type(value)
            if kind not in pytree.SUPPORTED_NODES:
                _register(kind)
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)


def _register(kind: type) -> None:
    pytree.register_pytree_node(
        kind, lambda d: (list(d.values()), list(d.keys())),
        lambda values, keys: kind(zip(keys, values)),
        flatten_with_keys_fn=lambda d: ([(pytree.MappingKey(k), v) for k, v in d.items()],
                                        list(d.keys())),
        serialized_type_name=f"{kind.__module__}.{kind.__qualname__}")
