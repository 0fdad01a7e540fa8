"""Small helpers: ``null_context``, ``suffix_graph_name``, ``timer``, ``OrderedDict``,
``WeightsDict``, ``overrides`` and ``duplicate_items``."""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import sys
import time
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

import numpy as np

__all__ = ["null_context", "suffix_graph_name", "timer", "OrderedDict", "WeightsDict",
           "overrides", "duplicate_items"]

logger = logging.getLogger("popxl_addons")


@contextlib.contextmanager
def null_context() -> Iterator[None]:
    """A context manager that does nothing."""
    yield


def suffix_graph_name(name: str, suffix: str) -> str:
    """``name`` without a trailing ``_subgraph(N)``, then ``_<suffix>``.

    >>> suffix_graph_name("fwd_subgraph(3)", "grad")
    'fwd_grad'
    """
    return re.sub(r"_subgraph\(\d+\)$", "", name) + f"_{suffix}"


@contextlib.contextmanager
def timer(title: str | None = None, log_to_wandb: bool = True) -> Iterator[None]:
    """Log the start and the duration (minutes, two decimals) of the block.

    With ``log_to_wandb`` and an active Weights & Biases run (``wandb`` already imported by the
    program), the duration is also recorded in the run summary as
    ``<title lower-cased, spaces as _>_mins``.
    """
    title = title or "timer"
    logger.info(f"Starting: {title}")
    start = time.perf_counter()
    yield
    minutes = (time.perf_counter() - start) / 60
    logger.info(f"Duration: {title}: {minutes:.2f} mins")
    wandb = sys.modules.get("wandb")
    if log_to_wandb and wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.run.summary[f"{title.lower().replace(' ', '_')}_mins"] = minutes


class OrderedDict(collections.OrderedDict):
    """An ordered dict that can also be read by position: ``d.idx(0)`` is the first value."""

    def idx(self, idx: int) -> Any:
        """The value at position ``idx``."""
        return list(self.values())[idx]

    def __repr__(self) -> str:
        if not self:
            return "{}"
        return "{\n" + "".join(f"  {k!r}: {v!r},\n" for k, v in self.items()) + "}"


class WeightsDict(MutableMapping):
    """``{variable: array}`` in insertion order, as ``torch_mapping`` returns it. An array
    must have its variable's dtype and host shape (``shape_on_host``).

    Raises:
        ValueError: on insertion of an array of another dtype or shape.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._data: dict[Any, np.ndarray] = {}
        self.update(*args, **kwargs)

    def __setitem__(self, key: Any, value: Any) -> None:
        arr = np.asarray(value)
        want = key.dtype.as_numpy()
        shape = tuple(getattr(key, "shape_on_host", key.shape))
        if arr.dtype != want:
            raise ValueError(f"WeightsDict[{key.name!r}]: array of dtype {arr.dtype}, the "
                             f"variable is {want}")
        if arr.shape != shape:
            raise ValueError(f"WeightsDict[{key.name!r}]: array of shape {arr.shape}, the "
                             f"variable's host shape is {shape}")
        self._data[key] = arr

    def __getitem__(self, key: Any) -> np.ndarray:
        return self._data[key]

    def __delitem__(self, key: Any) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"WeightsDict({self._data!r})"


def overrides(cls: type, base: type, method: str) -> bool:
    """Whether ``cls`` defines ``method`` differently from ``base``."""
    return getattr(cls, method, None) is not getattr(base, method, None)


def duplicate_items(items: Iterable[Any]) -> list[Any]:
    """The items seen more than once, in first-seen order."""
    seen: set[Any] = set()
    twice: dict[Any, None] = {}
    for item in items:
        if item in seen:
            twice[item] = None
        seen.add(item)
    return list(twice)
