"""``TaskSession``: a PopXL Session that knows its streams and its state by name, and saves
and loads checkpoint folders laid out as popxl-addons lays them out."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import checkpoint
from xlgraph.addons import session_state
from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.memmap_dir import spec_file
from xlgraph.addons.named_tensors import NamedTensorData, NamedTensors
from xlgraph.addons.utils import timer
from xlgraph.errors import (
    ArgumentError,
    CheckpointError,
    StreamInputError,
    user_source_line,
    whole_number,
)

__all__ = ["TaskSession", "write_variables_pb", "initialise_memmap_dir_from_checkpoint"]

logger = logging.getLogger("popxl_addons")

_MODEL = "model"  # folder of <flat name>.npz (and .npy raw copies of memory-mapped data)
_INFO = "session_info.json"
_DATALOADER = "dataloader.bin"
_REPORT = ("none", "warn", "error")


def write_variables_pb(session: popxl.Session, weights: Mapping[popxl.Tensor, Any]) -> None:
    """Write ``{variable: data}`` into ``session`` (PopXL's ``write_variables_data``)."""
    session.write_variables_data(dict(weights))


def _streams(streams: Any) -> list[Any]:
    if streams is None:
        return []
    if isinstance(streams, DotTree):
        return streams.values_flat()
    if isinstance(streams, Mapping):
        return list(streams.values())
    return list(streams)


def _refuse_wandb(where: str) -> None:
    raise NotImplementedError(f"TaskSession.{where}('wandb://...'): xlgraph.addons does not "
                              f"talk to Weights & Biases; give a local folder")


class TaskSession(popxl.Session):
    """A Session with named inputs, outputs and state, and checkpoints of that state.

    A checkpoint folder holds ``model/<flat name>.npz`` (one array stored under the flat name;
    a memory-mapped variable is also copied as a raw ``model/<flat name>.npy``),
    ``dataloader.bin`` (when a data loader is set) and ``session_info.json``
    (``session_state``, whose ``"steps"`` ``run`` advances; numpy values keep their types).

    Args:
        inputs: the host-to-device streams (``InputStreams``, a list, or a mapping).
        outputs: the device-to-host streams.
        state: the variables that make the checkpoint (a ``NamedTensors``).
        max_checkpoints: how many of the checkpoint folders this object wrote are kept (a
            whole number >= 1; the oldest is removed first). Folders are compared after
            resolving, so one folder spelled two ways counts once.
        *args, **kwargs: ``popxl.Session``'s (``ir``, ``device_desc``, ...).
    """

    def __init__(self, inputs: Any, outputs: Any, state: NamedTensors, max_checkpoints: int = 1,
                 *args: Any, **kwargs: Any) -> None:
        _count(max_checkpoints)  # refused before the Session compiles
        with timer("PopXL compilation", log_to_wandb=False):
            super().__init__(*args, **kwargs)
        self.inputs = inputs
        self.outputs = outputs
        self.state = state if state is not None else NamedTensors()
        self.max_checkpoints = max_checkpoints
        self.session_state: dict[str, Any] = {"steps": 0}
        self._dataloader: Any = None
        self._batches: Iterator[Any] | None = None
        self._saved: list[Path] = []

    @property
    def max_checkpoints(self) -> int:
        """How many checkpoint folders ``save_checkpoint`` keeps."""
        return self._max_checkpoints

    @max_checkpoints.setter
    def max_checkpoints(self, value: int) -> None:
        self._max_checkpoints = _count(value)

    @property
    def dataloader(self) -> Any:
        """The data loader saved and resumed with checkpoints (None, with a warning, when
        unset). An iterable one also feeds ``run()`` called without inputs."""
        if self._dataloader is None:
            logger.warning("TaskSession.dataloader is not set")
        return self._dataloader

    @dataloader.setter
    def dataloader(self, dl: Any) -> None:
        if not (callable(getattr(dl, "save", None)) and callable(getattr(dl, "resume", None))):
            raise ValueError(f"TaskSession.dataloader needs an object with save(filename) and "
                             f"resume(filename) methods, got {type(dl).__name__}")
        self._dataloader = dl
        self._batches = None

    def add_session_state_info(self, info: Mapping[str, Any]) -> None:
        """Merge facts (e.g. ``{"epoch": 2}``) into ``session_state``: None, bools, ints,
        floats, strings, lists, tuples, dicts with string keys and numeric numpy values, which
        load back with their types. Other values raise ``TypeError``."""
        try:
            session_state.check(dict(info))
        except TypeError as exc:
            raise TypeError(f"TaskSession.add_session_state_info: {exc} "
                            f"[at {user_source_line()}]") from None
        self.session_state.update(info)

    def get_named_tensors_data(self) -> NamedTensorData:
        """The state's values by name."""
        data = self.get_tensors_data(self.state.tensors)
        return NamedTensorData.from_dict({k: data[t] for k, t in self.state.to_dict().items()})

    def load_from_session(self, src: TaskSession, report_missing: str = "none") -> None:
        """Copy the values of ``src``'s state into this session's state variables of the same
        names."""
        _check_report(report_missing)
        data = src.get_named_tensors_data().to_dict()
        _report(set(data), set(self.state.to_dict()), report_missing)
        self._write(data)

    def wandb_variable_histograms(self, step: int = 0) -> None:
        """Refused: xlgraph does not log to Weights & Biases."""
        raise NotImplementedError("TaskSession.wandb_variable_histograms: xlgraph.addons does "
                                  "not log to Weights & Biases; read get_named_tensors_data()")

    def save_checkpoint(self, checkpoint_dir: str | Path) -> None:
        """Write the checkpoint folder (see the class); only instance 0 writes. The session
        info is checked before anything is written, and each file is replaced atomically.
        Folders this object wrote beyond the newest ``max_checkpoints`` are removed."""
        if str(checkpoint_dir).startswith("wandb://"):
            _refuse_wandb("save_checkpoint")
        try:
            info = session_state.encode(self.session_state)
        except TypeError as exc:
            raise TypeError(f"TaskSession.save_checkpoint: {exc}; nothing was written "
                            f"[at {user_source_line()}]") from None
        data = self.get_named_tensors_data().to_dict()  # fetched on every instance
        if self.ir.instance_index != 0:
            return
        folder = Path(checkpoint_dir)
        model = folder / _MODEL
        model.mkdir(parents=True, exist_ok=True)
        for name, t in self.state.to_dict().items():
            value = np.asarray(data[name])
            if isinstance(getattr(t, "initial_data", None), np.memmap):
                _atomic(model / f"{name}.npy", value.tofile)
            _atomic(model / f"{name}.npz", lambda f, n=name, v=value: np.savez(f, **{n: v}))
        if self._dataloader is not None:
            self._dataloader.save(filename=str(folder / _DATALOADER))
        _atomic(folder / _INFO, lambda f: f.write(info.encode("ascii")))
        here = folder.resolve()
        self._saved = [p for p in self._saved if p != here] + [here]
        while len(self._saved) > self.max_checkpoints:
            self._remove(self._saved.pop(0))

    def _remove(self, folder: Path) -> None:
        """Remove what this session writes in a checkpoint folder (and the folders, once
        empty); other files stay."""
        model = folder / _MODEL
        for name in self.state.to_dict():
            for suffix in (".npz", ".npy"):
                (model / f"{name}{suffix}").unlink(missing_ok=True)
        for name in (_DATALOADER, _INFO):
            (folder / name).unlink(missing_ok=True)
        for path in (model, folder):
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()

    def load_checkpoint(self, checkpoint_dir: str | Path, report_missing: str = "warn",
                        skip_memmap: bool = False) -> None:
        """Load a checkpoint folder: the state variables found in ``model/*.npz``, the data
        loader's position (``dataloader.resume``) and ``session_state`` (replaced from
        ``session_info.json``; ``{"steps": 0}`` when absent). Every file is read and checked
        before any variable or info is written.

        Args:
            checkpoint_dir: the checkpoint folder.
            report_missing: names only one side has (the ``model/*.npz`` files against
                the state's flat names, then ``session_info.json``'s keys against
                ``session_state``'s): ``"error"`` raises, ``"warn"`` logs ``Checkpoint keys
                not in state: {...}`` / ``state keys not in checkpoint: {...}``, ``"none"``
                skips; the names both have are loaded either way.
            skip_memmap: accepted (unused, as in popxl-addons).

        Raises:
            CheckpointError: a file of the folder is not readable (named; nothing loaded).
            ValueError: names differ and ``report_missing="error"`` (nothing loaded).
        """
        if str(checkpoint_dir).startswith("wandb://"):
            _refuse_wandb("load_checkpoint")
        _check_report(report_missing)
        folder = Path(checkpoint_dir)
        info_path = folder / _INFO
        info = (session_state.decode(info_path.read_bytes(), str(info_path))
                if info_path.exists() else {"steps": 0})
        found: dict[str, np.ndarray] = {}
        wanted = set(self.state.to_dict())
        files = sorted((folder / _MODEL).glob("*.npz"))
        _report({p.stem for p in files}, wanted, report_missing)
        _report(set(info), set(self.session_state), report_missing)
        for path in files:
            if path.stem in wanted:
                found.update(_read_npz(path))
        self._write(found)
        if self._dataloader is not None:
            self._dataloader.resume(filename=str(folder / _DATALOADER))
        self.session_state = info

    def _write(self, data: Mapping[str, np.ndarray]) -> None:
        """Write the values of ``data`` whose names are state variables."""
        targets = self.state.to_dict()
        checkpoint.load_into(self, {k: data[k] for k in targets if k in data},
                             {k: targets[k] for k in targets if k in data})

    def run(self, inputs: Mapping[Any, Any] | None = None,
            downcast_inputs: bool = True) -> dict[Any, np.ndarray]:
        """``popxl.Session.run``, then ``session_state["steps"] += 1``. Without ``inputs``,
        an iterable ``dataloader`` gives the next batch, one array per input stream in order
        (a new pass starts when it runs out).

        Raises:
            StreamInputError: the dataloader gives no batch (it is empty, or a one-shot
                iterator already used up), or a batch holds a different number of arrays
                than there are input streams.
        """
        if inputs is None and hasattr(self._dataloader, "__iter__"):
            streams = _streams(self.inputs)
            batch = self._next_batch()
            if len(batch) != len(streams):
                names = [getattr(s, "name", str(s)) for s in streams]
                raise StreamInputError(
                    f"TaskSession.run: the dataloader's batch holds {len(batch)} arrays for "
                    f"{len(streams)} input streams {names}; give one array per stream, in "
                    f"order [at {user_source_line()}]")
            inputs = dict(zip(streams, batch))
        out = super().run(inputs, downcast_inputs)
        self.session_state["steps"] = self.session_state.get("steps", 0) + 1
        return out

    def _next_batch(self) -> Any:
        if self._batches is None:
            self._batches = iter(self._dataloader)
        batch = next(self._batches, _END)
        if batch is _END:  # a new pass
            self._batches = iter(self._dataloader)
            batch = next(self._batches, _END)
        if batch is _END:
            raise StreamInputError(
                f"TaskSession.run: the dataloader gave no batch: it is empty, or an iterator "
                f"that cannot start a new epoch ({type(self._dataloader).__name__}); give it a "
                f"re-iterable loader or pass inputs [at {user_source_line()}]")
        return tuple(batch) if isinstance(batch, tuple | list) else (batch,)


_END = object()


def _report(checkpoint_keys: set[str], state_keys: set[str], report_missing: str) -> None:
    """Report the names only one side has, as popxl-addons: a ValueError for ``"error"``, a
    logged warning for ``"warn"``."""
    if report_missing == "none":
        return
    lines = [f"{what}: {{{', '.join(repr(k) for k in sorted(keys))}}}" for what, keys in (
        ("Checkpoint keys not in state", checkpoint_keys - state_keys),
        ("state keys not in checkpoint", state_keys - checkpoint_keys)) if keys]
    if lines and report_missing == "error":
        raise ValueError("\n".join(lines))
    if lines:
        logger.warning("\n".join(lines))


def _check_report(report_missing: str) -> None:
    if report_missing not in _REPORT:
        raise ValueError(f"report_missing must be 'none', 'warn' or 'error', got "
                         f"{report_missing!r}")


def _count(value: Any) -> int:
    try:
        return whole_number(value, "TaskSession max_checkpoints")
    except ArgumentError as exc:
        raise ArgumentError(f"{exc} [at {user_source_line()}]") from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a checkpoint array file: {type(exc).__name__}: "
                              f"{exc}; nothing was loaded") from None


def _atomic(path: Path, write: Callable[[Any], Any]) -> None:
    """Replace ``path`` with what ``write(file)`` writes, atomically (a temporary file renamed
    over it)."""
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def initialise_memmap_dir_from_checkpoint(checkpoint_dir: str | Path,
                                          memmap_dir: str | Path) -> None:
    """Copy the raw ``model/*.npy`` data of memory-mapped variables from a checkpoint into
    ``memmap_dir``, where ``VariableFactory.create_tensor(memmap_dir=...)`` finds it (a spec
    recorded for an earlier map there is removed: the copy is checked by its size)."""
    target = Path(memmap_dir)
    target.mkdir(parents=True, exist_ok=True)
    for path in (Path(checkpoint_dir) / _MODEL).glob("*.npy"):
        spec_file(target / path.name).unlink(missing_ok=True)
        shutil.copyfile(path, target / path.name)
