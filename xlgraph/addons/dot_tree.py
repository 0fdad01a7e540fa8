"""``DotTree``: a tree of leaves addressed by dotted names (``"fc1.weight"``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["DotTree", "sanitise", "to_mapping"]

L = TypeVar("L")


def sanitise(name: str) -> str:
    """``name`` with dots replaced by underscores, so it is one key rather than a path."""
    return name.replace(".", "_")


def to_mapping(key: DotTree, value: DotTree) -> dict[Any, Any]:
    """``{leaf of key: leaf of value}`` for every dotted name the two trees share."""
    values = value.to_dict()
    return {leaf: values[name] for name, leaf in key.to_dict().items() if name in values}


class DotTree(Generic[L]):
    """Leaves stored under dotted names; subtrees are ``DotTree``s of the same class.

    ``tree.fc1.weight`` and ``tree.get("fc1.weight")`` reach the same leaf. Order is insertion
    order.

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
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._map[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no key {name!r}; keys: {list(self._map)}"
            ) from None

    def get(self, key: str) -> Any:
        """The leaf or subtree at dotted ``key``. Raises KeyError."""
        node: Any = self
        for part in str(key).split("."):
            if not isinstance(node, DotTree) or part not in node._map:
                raise KeyError(f"{type(self).__name__} has no key {key!r}")
            node = node._map[part]
        return node

    def __contains__(self, key: object) -> bool:
        try:
            self.get(str(key))
        except KeyError:
            return False
        return True

    def insert(self, key: str, value: Any, overwrite: bool = False) -> None:
        """Put ``value`` (a leaf or a tree) at dotted ``key``, making subtrees on the way.

        Raises:
            ValueError: ``key`` is taken and ``overwrite`` is False.
        """
        parts = str(key).split(".")
        node: DotTree = self
        for part in parts[:-1]:
            child = node._map.get(part)
            if child is None:
                child = type(self)()
                node._map[part] = child
            elif not isinstance(child, DotTree):
                raise ValueError(f"cannot insert {key!r}: {part!r} is a leaf")
            node = child
        last = parts[-1]
        if last in node._map and not overwrite:
            raise ValueError(
                f"{type(self).__name__} already has {key!r}; pass overwrite=True to replace it"
            )
        node._map[last] = value

    def update(self, values: DotTree | Mapping[str, Any], overwrite: bool = False) -> None:
        """Insert every leaf of ``values`` (a tree or a ``{dotted name: leaf}`` mapping)."""
        items = values.to_dict() if isinstance(values, DotTree) else dict(values)
        for key, value in items.items():
            self.insert(key, value, overwrite)

    def pop(self, key: str) -> Any:
        """Remove and return the leaf or subtree at dotted ``key``."""
        parent, _, last = str(key).rpartition(".")
        node = self.get(parent) if parent else self
        if not isinstance(node, DotTree) or last not in node._map:
            raise KeyError(f"{type(self).__name__} has no key {key!r}")
        return node._map.pop(last)

    def copy(self) -> DotTree[L]:
        """A new tree with the same structure and leaves (leaves are not copied)."""
        return type(self).from_dict(self.to_dict())

    def filter_keys(self, keys: Iterable[str]) -> DotTree[L]:
        """A new tree holding only the dotted ``keys`` (leaves or whole subtrees)."""
        out = type(self)()
        for key in keys:
            node = self.get(key)
            out.insert(key, node.copy() if isinstance(node, DotTree) else node)
        return out

    # -- views -------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        """The top-level keys."""
        return list(self._map)

    def values(self) -> list[Any]:
        """The top-level leaves and subtrees."""
        return list(self._map.values())

    def items(self) -> list[tuple[str, Any]]:
        return list(self._map.items())

    def keys_flat(self) -> list[str]:
        """Every leaf's dotted name."""
        return list(self.to_dict())

    def values_flat(self) -> list[L]:
        """Every leaf, in ``keys_flat`` order."""
        return list(self.to_dict().values())

    def len(self) -> int:
        return len(self._map)

    def len_flat(self) -> int:
        return len(self.to_dict())

    def __len__(self) -> int:
        return self.len_flat()

    def to_dict(self) -> dict[str, L]:
        """``{dotted name: leaf}`` for every leaf."""
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
    def from_dict(cls, d: Mapping[str, Any]) -> DotTree:
        """A tree from ``{dotted name: leaf}`` (nested mappings become subtrees)."""
        tree = cls()
        for key, value in d.items():
            if isinstance(value, Mapping) and not isinstance(value, DotTree):
                value = cls.from_dict(value)
            tree.insert(key, value)
        return tree

    def unpack(self) -> tuple[tuple[str, ...], tuple[L, ...]]:
        """``(dotted names, leaves)``; ``pack`` turns them back into a tree."""
        flat = self.to_dict()
        return tuple(flat), tuple(flat.values())

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

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.insert(name, value, overwrite=True)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"{type(self).__name__}({body})"
