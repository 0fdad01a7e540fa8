"""Save and load variable values as ``.npz`` files, keyed by variable name.

A model trained in one Ir can be reloaded into another (e.g. an inference Ir) whose variables
carry the same names, as ``nn.Layer.create_variables`` guarantees.

Example:
    >>> checkpoint.save("model.npz", train_session, step.params)
    >>> checkpoint.load_into(test_session, "model.npz")
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from xlgraph.tensor import Variable

__all__ = ["save", "load", "load_into"]

PathLike = str | os.PathLike


def _by_name(session: Any, variables: Mapping[str, Variable] | Iterable[Variable] | None,
             ) -> dict[str, Variable]:
    if variables is None:
        variables = session.ir.main_graph.variables
    if isinstance(variables, Mapping):
        return dict(variables)
    return {v.name: v for v in variables}


def save(path: PathLike, source: Any,
         variables: Mapping[str, Variable] | Iterable[Variable] | None = None) -> None:
    """Write variable values to ``path`` (an uncompressed ``.npz``, one entry per name).

    Args:
        path: the file to write (numpy appends ``.npz`` when missing).
        source: the Session holding the values (synced from the device when attached), or a
            ready ``{name: array}`` mapping.
        variables: ``{name: Variable}``, an iterable of Variables (keyed by ``.name``), or None
            for every variable of the session's Ir; ignored for a mapping source.
    """
    if isinstance(source, Mapping):
        arrays = {name: np.asarray(a) for name, a in source.items()}
    else:
        arrays = {name: source.get_tensor_data(v)
                  for name, v in _by_name(source, variables).items()}
    np.savez(path, **arrays)


def load(path: PathLike) -> dict[str, np.ndarray]:
    """Read a checkpoint written by ``save`` into ``{name: array}``."""
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def load_into(session: Any, source: PathLike | Mapping[str, np.ndarray],
              variables: Mapping[str, Variable] | Iterable[Variable] | None = None,
              strict: bool = True) -> list[str]:
    """Write checkpoint values into the variables of ``session`` with the same names.

    Entries of the checkpoint that match no variable (e.g. optimiser state when loading into an
    inference Ir) are ignored.

    Args:
        session: the target Session (attached or not).
        source: a checkpoint path or a ``{name: array}`` mapping.
        variables: the targets, as for ``save`` (default: every variable of the session's Ir).
        strict: raise when a target has no entry in the checkpoint.

    Returns:
        The names that were loaded.

    Raises:
        KeyError: ``strict`` and some targets are missing. ValueError: a shape differs.
    """
    data = source if isinstance(source, Mapping) else load(source)
    targets = _by_name(session, variables)
    missing = sorted(name for name in targets if name not in data)
    if strict and missing:
        raise KeyError(f"checkpoint has no values for {missing}; it holds {sorted(data)}")
    loaded = []
    for name, v in targets.items():
        if name not in data:
            continue
        arr = np.asarray(data[name])
        if arr.shape != v.shape:
            raise ValueError(f"checkpoint entry {name!r} has shape {arr.shape}, variable {v.spec}")
        session.write_variable_data(v, arr.astype(v.dtype.as_numpy(), copy=False))
        loaded.append(name)
    return loaded
