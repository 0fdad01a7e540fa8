"""The base of ``poptorch.Options`` and its sub-objects: ``OptionsDict`` (PopTorch's setters that
chain and read back as snake_case, checked against the default's type, frozen once given to a
wrapper) and ``Attribute``, with ``ConfigFileError`` for options files.
"""

from __future__ import annotations

from typing import Any

from xlgraph.poptorch.support import unknown

__all__ = ["ConfigFileError", "OptionsDict", "Attribute"]


class ConfigFileError(Exception):
    """An options file (``Options.loadFromFile``) that cannot be applied."""


class OptionsDict:
    """A dict of named options read back as attributes; frozen once handed to a wrapper.

    Example:
        >>> d = OptionsDict(size=1)
        >>> d.set(size=4).size
        4
    """

    def __init__(self, **default_values: Any) -> None:
        object.__setattr__(self, "_values", dict(default_values))
        object.__setattr__(self, "_frozen", False)

    def __repr__(self) -> str:
        """``ClassName(option=value, ...)``, values by their ``repr`` (PopTorch's form)."""
        return f"{type(self).__name__}(" + ", ".join(
            f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise unknown(type(self).__name__.lstrip("_"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            self.checkIsFrozen(name)
        object.__setattr__(self, name, value)

    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)
        for value in self.__dict__.values():
            if isinstance(value, OptionsDict):
                value._freeze()

    def _unfreeze(self) -> None:
        object.__setattr__(self, "_frozen", False)
        for value in self.__dict__.values():
            if isinstance(value, OptionsDict):
                value._unfreeze()

    def checkIsFrozen(self, option: str | None = None) -> None:  # noqa: N802
        """Raise ``AttributeError`` when these options are frozen."""
        if self._frozen:
            raise AttributeError("Can't modify frozen Options")

    def set(self, **kwargs: Any) -> OptionsDict:
        """Change existing options; a value's type must match the current one's."""
        self.checkIsFrozen()
        for name, value in kwargs.items():
            assert self.exists(name), f"Invalid option {name}, valid options are {self._values}"
            current = self._values[name]
            assert current is None or isinstance(value, type(current)) or (
                type(current) is float and isinstance(value, int)), (
                f"Unexpected type {type(value).__name__} for option {name}: "
                f"expected {type(current).__name__}")
            self._values[name] = value
        return self

    def createOrSet(self, **kwargs: Any) -> OptionsDict:  # noqa: N802
        """Set options, creating the ones that do not exist yet."""
        self.checkIsFrozen()
        self._values.update(kwargs)
        return self

    def exists(self, option: str) -> bool:
        """Whether ``option`` is set."""
        return option in self._values

    def deleteIfExists(self, option: str) -> None:  # noqa: N802
        """Remove ``option`` if it is set."""
        self.checkIsFrozen()
        self._values.pop(option, None)

    def update(self, other: dict[str, Any]) -> None:
        """Set every ``{option: value}`` of ``other`` (created if missing)."""
        self.createOrSet(**other)

    def toDict(self) -> dict[str, Any]:  # noqa: N802
        """A plain dict of the options (sub-objects as nested dicts)."""
        out = {k: v.toDict() if isinstance(v, OptionsDict) else v
               for k, v in self._values.items()}
        for k, v in self.__dict__.items():
            if isinstance(v, OptionsDict):
                out[k.lstrip("_")] = v.toDict()
        return out

    def _set(self, name: str, value: Any) -> Any:
        self.set(**{name: value})
        return self


class Attribute:
    """Keyword attributes attached to an op (``MultiConv`` settings, custom op attributes)."""

    def __init__(self, **kwargs: Any) -> None:
        self._values = dict(kwargs)

    def __enter__(self) -> Attribute:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
