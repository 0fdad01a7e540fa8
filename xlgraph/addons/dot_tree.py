"""``DotTree``: a tree of leaves addressed by dotted names (``"fc1.weight"``).

As in popxl-addons: keys are identifiers or all-digit strings (ints are stored as strings);
``insert`` refuses a key whose first segment exists unless ``overwrite=True`` (then subtrees
merge); ``t.x``, ``t["x"]``, ``t[0]`` and ``t[-1]`` (the largest numeric key) read a child.
A tree has no ``len()``, ``==`` or ``__setitem__``: use ``len()``/``len_flat()`` methods,
``to_dict()`` and ``insert``. ``for x in tree`` reads ``tree[0]``, ``tree[1]``, ... and ends
with ``KeyError`` at the first missing index, as the library does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["DotTree", "sanitise", "to_mapping"]

L = TypeVar("L")
_SEGMENT = re.compile(r"[A-Za-z_]\w*|\d+")


def sanitise(name: str) -> str:
    """``name`` usable as one key: non-word characters and a leading digit become ``_``.

    >>> sanitise("fc1.weight"), sanitise("0abc")
    ('fc1_weight', '_abc')
    """
    return re.sub(r"\W|^\d", "_", name)


def to_mapping(key: DotTree, value: DotTree) -> dict[Any, Any]:
    """``{leaf of key: leaf of value}`` for every dotted name the two trees share."""
    values = value.to_dict()
    return {leaf: values[name] for name, leaf in key.to_dict().items() if name in values}


def _segments(key: str | int, negative_ok: bool = False) -> list[str]:
    """The segments of a dotted ``key`` (an int is one segment)."""
    if isinstance(key, int) and not isinstance(key, bool):
        if key < 0 and not negative_ok:
            raise ValueError(f"DotTree key {key}: negative integers are not keys")
        return [str(key)]
    parts = str(key).split(".")
    for part in parts:
        if not _SEGMENT.fullmatch(part):
            raise ValueError(f"DotTree key {key!r}: segment {part!r} must be an identifier "
                             f"or all digits")
    return parts


class DotTree(Generic[L]):
    """Leaves stored under dotted names; subtrees are ``DotTree``s of the same class.

    ``tree.fc1.weight``, ``tree["fc1"]["weight"]`` and ``tree.get("fc1.weight")`` reach the
    same leaf. Order is insertion order; ``to_dict()`` flattens it depth first.

    Example:
        >>> t = DotTree.from_dict({"fc1.weight": 1, "fc1.bias": 2, "fc2.weight": 3})
        >>> t.fc1.bias, t.keys_flat()
        (2, ['fc1.weight', 'fc1.bias', 'fc2.weight'])
    """

    def __init__(self, **kwargs: Any) -> None:
        object.__setattr__(self, "_map", {})
        for key, value in kwargs.items():
            self.insert(key, value)

    # -- access ------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_map":
            raise AttributeError(name)
        try:
            return self._map[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no key {name!r}; keys: {list(self._map)}"
            ) from None

    def _child(self, part: str | int, whole: Any) -> Any:
        if isinstance(part, int) and not isinstance(part, bool) and part < 0:
            numeric = [int(k) for k in self._map if k.isdigit()]
            if not numeric:
                raise ValueError(f"{type(self).__name__}[{part}]: no numeric keys to count "
                                 f"back from; keys: {list(self._map)}")
            part = max(numeric) + 1 + part
        try:
            return self._map[str(part)]
        except KeyError:
            raise KeyError(f"{type(self).__name__} has no key {whole!r}; keys: "
                           f"{list(self._map)}") from None

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, int) and not isinstance(key, bool):
            return self._child(key, key)
        return self.get(key)

    def get(self, key: str | int) -> Any:
        """The leaf or subtree at dotted ``key``.

        Raises:
            KeyError: no such key (or the path runs through a leaf).
            ValueError: a negative int with no numeric key to count back from.
        """
        if isinstance(key, int) and not isinstance(key, bool):
            return self._child(key, key)
        node: Any = self
        for part in str(key).split("."):
            if not isinstance(node, DotTree):
                raise KeyError(f"{type(self).__name__} has no key {key!r}: the path runs "
                               f"through a leaf")
            node = node._child(part, key)
        return node

    def __contains__(self, key: object) -> bool:
        try:
            self.get(key)  # type: ignore[arg-type]
        except (KeyError, ValueError):
            return False
        return True

    def insert(self, key: str | int, value: Any, overwrite: bool = False) -> None:
        """Put ``value`` (a leaf or a tree) at dotted ``key``, making subtrees on the way.

        Raises:
            ValueError: the key's first segment exists and ``overwrite`` is False (even when
                the rest of the path is new), a segment is not an identifier or digits, or
                the key is a negative int.
        """
        parts = _segments(key)
        first = parts[0]
        if len(parts) > 1:
            value = type(self)._nest(parts[1:], value)
        if first in self._map and not overwrite:
            raise ValueError(f"{type(self).__name__} already has {first!r} (inserting "
                             f"{key!r}); pass overwrite=True to merge or replace")
        existing = self._map.get(first)
        if isinstance(existing, DotTree) and isinstance(value, DotTree):
            existing._merge(value)
        else:
            self._map[first] = value

    @classmethod
    def _nest(cls, parts: list[str], value: Any) -> DotTree:
        tree = cls()
        node = tree
        for part in parts[:-1]:
            child = cls()
            node._map[part] = child
            node = child
        node._map[parts[-1]] = value
        return tree

    def _merge(self, other: DotTree) -> None:
        """Merge ``other`` into this tree: subtrees merge, leaves are replaced. Checked first,
        so a failure changes nothing."""
        plan: list[tuple[DotTree, str, Any]] = []

        def collect(dst: DotTree, src: DotTree) -> None:
            for k, v in src._map.items():
                old = dst._map.get(k)
                if isinstance(old, DotTree) and isinstance(v, DotTree):
                    collect(old, v)
                else:
                    plan.append((dst, k, v))

        collect(self, other)
        for dst, k, v in plan:
            dst._map[k] = v

    def _insert_path(self, key: str, value: Any) -> None:
        """Insert at dotted ``key`` making or entering subtrees on the way (``from_dict``'s
        rule); the full key itself must be new."""
        parts = _segments(key)
        node: DotTree = self
        for part in parts[:-1]:
            child = node._map.get(part)
            if child is None:
                child = type(self)()
                node._map[part] = child
            elif not isinstance(child, DotTree):
                raise ValueError(f"cannot insert {key!r}: {part!r} is a leaf")
            node = child
        if parts[-1] in node._map:
            raise ValueError(f"{type(self).__name__} already has {key!r}")
        node._map[parts[-1]] = value

    def update(self, values: DotTree | Mapping[str, Any], overwrite: bool = False) -> None:
        """Insert every top-level entry of a copy of ``values`` (a tree, or a mapping read as
        ``from_dict``)."""
        other = values.copy() if isinstance(values, DotTree) else type(self).from_dict(values)
        for key, value in other._map.items():
            self.insert(key, value, overwrite)

    def pop(self, key: str | int) -> Any:
        """Remove and return the leaf or subtree at dotted ``key``."""
        parent, _, last = str(key).rpartition(".")
        node = self.get(parent) if parent else self
        if not isinstance(node, DotTree) or last not in node._map:
            raise KeyError(f"{type(self).__name__} has no key {key!r}")
        return node._map.pop(last)

    def copy(self) -> DotTree[L]:
        """A new tree with the same structure; the leaves are shared, not copied."""
        out = type(self)()
        for key, value in self._map.items():
            out._map[key] = value.copy() if isinstance(value, DotTree) else value
        return out

    def filter_keys(self, keys: Iterable[str | int]) -> DotTree[L]:
        """A new tree holding only the dotted ``keys`` (leaves or whole subtrees).

        Raises:
            ValueError: a key is given twice.
        """
        keys = [str(k) for k in keys]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"filter_keys: duplicate keys {twice}")
        out = type(self)()
        for key in keys:
            node = self.get(key)
            out._insert_path(key, node.copy() if isinstance(node, DotTree) else node)
        return out

    def _clear(self) -> None:
        """Remove every leaf, recursively, keeping the subtree objects (shared containers
        stay valid)."""
        for key in list(self._map):
            value = self._map[key]
            if isinstance(value, DotTree):
                value._clear()
            else:
                del self._map[key]

    # -- views -------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        """The top-level keys."""
        return list(self._map)

    def values(self) -> list[Any]:
        """The top-level leaves and subtrees."""
        return list(self._map.values())

    def items(self) -> list[tuple[str, Any]]:
        """The top-level ``(key, leaf or subtree)`` pairs."""
        return list(self._map.items())

    def keys_flat(self) -> list[str]:
        """Every leaf's dotted name (depth first, insertion order)."""
        return list(self.to_dict())

    def values_flat(self) -> list[L]:
        """Every leaf, in ``keys_flat`` order."""
        return list(self.to_dict().values())

    def len(self) -> int:
        """The number of top-level entries."""
        return len(self._map)

    def len_flat(self) -> int:
        """The number of leaves."""
        return len(self.to_dict())

    def to_dict(self) -> dict[str, L]:
        """``{dotted name: leaf}`` for every leaf, depth first in insertion order."""
        out: dict[str, Any] = {}
        for key, value in self._map.items():
            if isinstance(value, DotTree):
                out.update({f"{key}.{k}": v for k, v in value.to_dict().items()})
            else:
                out[key] = value
        return out

    def to_mapping(self, values: DotTree) -> dict[Any, Any]:
        """``{leaf here: leaf of values}`` for the dotted names both trees have."""
        return to_mapping(self, values)

    @classmethod
    def from_dict(cls, d: Mapping[Any, Any]) -> DotTree:
        """A tree from ``{dotted name: leaf}``; int keys become strings, dotted keys and nested
        mappings become subtrees of this class."""
        tree = cls()
        for key, value in d.items():
            if isinstance(value, Mapping) and not isinstance(value, DotTree):
                value = cls.from_dict(value)
            tree._insert_path(str(key), value)
        return tree

    def unpack(self) -> tuple[Any, Any]:
        """``(dotted names, leaves)`` sorted by name as strings (``"10"`` before ``"2"``);
        ``([], [])`` when empty. ``pack`` turns them back into a tree."""
        items = sorted(self.to_dict().items(), key=lambda kv: kv[0])
        if not items:
            return [], []
        keys, values = zip(*items)
        return keys, values

    @classmethod
    def pack(cls, keys: Iterable[str], values: Iterable[Any]) -> DotTree:
        """A tree from parallel sequences of dotted names and leaves."""
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise ValueError(f"pack: {len(keys)} keys but {len(values)} values")
        return cls.from_dict(dict(zip(keys, values)))

    def map(self, fn: Callable[[L], Any]) -> DotTree:
        """A tree of the same shape with ``fn`` applied to every leaf."""
        return type(self).from_dict({k: fn(v) for k, v in self.to_dict().items()})

    __hash__ = object.__hash__  # identity, as in the library (no __eq__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"
