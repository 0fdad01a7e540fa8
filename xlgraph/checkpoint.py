"""Save and load variable values as ``.npz`` files, keyed by variable name.

Saving writes a temporary file beside the target and renames it over the target, so a failed
save leaves the previous checkpoint intact. Entries are stored positionally with a list of their
names (JSON text in a byte array, since numpy strings drop trailing NULs), so any name
(``file``, ``allow_pickle``, ``a/b``, ``"x\\0"``) round-trips. Loading into a Session
checks every entry before writing any variable, and refuses casts that change values unless
asked.

A model trained in one Ir can be reloaded into another (e.g. an inference Ir) whose variables
carry the same names, as ``nn.Layer.create_variables`` guarantees.

Example:
    >>> checkpoint.save("model.npz", train_session, step.params)
    >>> checkpoint.load_into(test_session, "model.npz")
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from xlgraph.errors import CheckpointError, DTypeError, ShapeError
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


def _entries(source: Any, variables: Mapping[str, Variable] | Iterable[Variable] | None,
             ) -> dict[str, np.ndarray]:
    """``{name: array}`` to save; refuses names that collide as strings and object arrays."""
    if isinstance(source, Mapping):
        arrays: dict[str, np.ndarray] = {}
        keys: dict[str, Any] = {}
        for key, a in source.items():
            name = str(key)
            if name in keys:
                raise CheckpointError(f"checkpoint entries {keys[name]!r} and {key!r} both become "
                                      f"the name {name!r}; rename one, nothing was written")
            keys[name], arrays[name] = key, np.asarray(a)
    else:
        arrays = {name: source.get_tensor_data(v)
                  for name, v in _by_name(source, variables).items()}
    for name, arr in arrays.items():
        if arr.dtype.hasobject:
            raise CheckpointError(f"checkpoint entry {name!r} holds Python objects ({arr.dtype}); "
                                  f"only numeric and bool arrays can be saved")
    return arrays


def _target(path: PathLike) -> str:
    """The file ``save`` replaces: ``.npz`` appended, a symlink followed (the link stays and its
    target gets the data); refuses an empty path, a directory and a read-only file."""
    path = os.fspath(path)
    if not path:
        raise CheckpointError("checkpoint.save: the path is empty; name a file such as "
                              "'model.npz'")
    if not path.endswith(".npz"):
        path += ".npz"
    real = os.path.realpath(path)
    if os.path.isdir(real):
        raise CheckpointError(f"checkpoint.save: {path} is a directory; name a file in it")
    if os.path.exists(real) and (not os.stat(real).st_mode & 0o222
                                 or not os.access(real, os.W_OK)):
        raise CheckpointError(f"checkpoint.save: {path} is read-only; nothing was written (make "
                              f"it writable or save elsewhere)")
    return real


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path: PathLike, source: Any,
         variables: Mapping[str, Variable] | Iterable[Variable] | None = None) -> None:
    """Write variable values to ``path`` (an uncompressed ``.npz``), replacing it atomically.

    The data goes to a temporary file beside the target, which is flushed to disk (``fsync``)
    before it is renamed over the target; the directory is synced after the rename. A symlink
    is written through (its target is replaced; the link stays).

    Args:
        path: the file to write (``.npz`` is appended when missing, as numpy does).
        source: the Session holding the values (synced from the device when attached), or a
            ready ``{name: array}`` mapping.
        variables: ``{name: Variable}``, an iterable of Variables (keyed by ``.name``), or None
            for every variable of the session's Ir; ignored for a mapping source.

    Raises:
        CheckpointError: an entry is not numeric data (object arrays cannot be loaded back),
            two entries get one name, or the path is empty, a directory or a read-only file.
    """
    import tempfile  # (with zipfile below: 10 modules that `import xlgraph` does not need)

    arrays = _entries(source, variables)
    target = _target(path)
    directory = os.path.dirname(target)
    fd, tmp = tempfile.mkstemp(suffix=".npz.tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, *arrays.values(), **{_NAME_LIST: _names_array(list(arrays))})
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, os.stat(target).st_mode & 0o777 if os.path.exists(target) else 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_directory(directory)


# the entry that lists the names of the positional entries arr_0, arr_1... as JSON bytes;
# files written before it carry a numpy string array under _NAMES (trailing NULs lost)
_NAME_LIST = "__name_list__"
_NAMES = "__names__"


def _names_array(names: list[str]) -> np.ndarray:
    return np.frombuffer(json.dumps(names).encode("ascii"), np.uint8)


def _names(data: Any) -> list[str] | None:
    """The stored names of the positional entries, or None for a keyword-named ``.npz``."""
    if _NAME_LIST in data.files:
        names = json.loads(data[_NAME_LIST].tobytes().decode("ascii"))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{_NAME_LIST} is not a list of names")
        return names
    if _NAMES in data.files:
        return [str(n) for n in data[_NAMES]]
    return None


def load(path: PathLike) -> dict[str, np.ndarray]:
    """Read a checkpoint written by ``save`` into ``{name: array}``.

    Raises:
        FileNotFoundError. CheckpointError: the file is not a readable checkpoint.
    """
    import zipfile

    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            raise CheckpointError(f"{os.fspath(path)} is not a checkpoint: it holds one array "
                                  f"(a .npy file); checkpoints are .npz files written by "
                                  f"checkpoint.save (np.savez files load too)")
        with data:
            names = _names(data)
            if names is None:  # written by np.savez with keyword names
                return {name: data[name] for name in data.files}
            return {name: data[f"arr_{i}"] for i, name in enumerate(names)}
    except (FileNotFoundError, CheckpointError):
        raise
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{os.fspath(path)} is not a readable checkpoint: "
                              f"{type(exc).__name__}: {exc}") from exc


def _lossy(arr: np.ndarray, converted: np.ndarray) -> bool:
    """Whether casting ``arr`` gave ``converted`` with changed values (float narrowing may
    round, but not overflow)."""
    if arr.dtype.kind == "f" and converted.dtype.kind == "f":
        return bool(np.any(np.isfinite(arr) & ~np.isfinite(converted)))
    with np.errstate(all="ignore"):
        back = converted.astype(arr.dtype)
    return not np.array_equal(back, arr, equal_nan=arr.dtype.kind in "fc")


def load_into(session: Any, source: PathLike | Mapping[str, np.ndarray],
              variables: Mapping[str, Variable] | Iterable[Variable] | None = None,
              strict: bool = True, allow_lossy_cast: bool = False) -> list[str]:
    """Write checkpoint values into the variables of ``session`` with the same names.

    Every entry is checked before any variable is written, so a failure changes nothing.
    Entries of the checkpoint that match no variable (e.g. optimiser state when loading into an
    inference Ir) are ignored.

    Args:
        session: the target Session (attached or not).
        source: a checkpoint path or a ``{name: array}`` mapping.
        variables: the targets, as for ``save`` (default: every variable of the session's Ir).
        strict: raise when a target has no entry in the checkpoint.
        allow_lossy_cast: accept values that change when cast to the variable's dtype
            (float to int, out of range, overflow to inf); refused by default.

    Returns:
        The names that were loaded.

    Raises:
        KeyError: ``strict`` and some targets are missing. ShapeError: a shape differs.
        DTypeError: a cast would change values.
    """
    data = source if isinstance(source, Mapping) else load(source)
    targets = _by_name(session, variables)
    missing = sorted(name for name in targets if name not in data)
    if strict and missing:
        raise KeyError(f"checkpoint has no values for {missing}; it holds {sorted(data)}")
    where = "" if isinstance(source, Mapping) else f" of {os.fspath(source)}"
    ready: list[tuple[str, Variable, np.ndarray]] = []
    for name, v in targets.items():
        if name not in data:
            continue
        arr = np.asarray(data[name])
        shapes = {v.shape_on_host, session.layout.replica_values_shape(v)} - {None}
        if arr.shape not in shapes:
            raise ShapeError(f"checkpoint entry {name!r}{where} has shape {arr.shape}, "
                             f"variable {v.id} is {v.spec} and takes "
                             f"{' or '.join(map(str, sorted(shapes)))}; nothing was loaded")
        with np.errstate(all="ignore"):
            converted = arr.astype(v.dtype.as_numpy(), copy=False)
        if not allow_lossy_cast and _lossy(arr, converted):
            raise DTypeError(f"checkpoint entry {name!r}{where} ({arr.dtype}) changes value when "
                             f"cast to variable {v.id} {v.spec}; pass allow_lossy_cast=True to "
                             f"accept; nothing was loaded")
        ready.append((name, v, converted))
    for _, v, converted in ready:  # all_replicas variables too, as get_tensor_data gave them
        session._write_replica_values(v, converted)
    return [name for name, _, _ in ready]
