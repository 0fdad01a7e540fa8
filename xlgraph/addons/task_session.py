"""``TaskSession``: a PopXL Session that knows its streams and its state by name, and saves
and loads checkpoints through ``xlgraph.checkpoint`` keyed by those names."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import xlgraph as popxl
from xlgraph import checkpoint
from xlgraph.addons import session_state
from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.named_tensors import NamedTensorData, NamedTensors
from xlgraph.errors import ArgumentError, StreamInputError, user_source_line, whole_number

__all__ = ["TaskSession", "write_variables_pb"]

_MODEL = "model.npz"
_INFO = "session_state.json"


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


class TaskSession(popxl.Session):
    """A Session with named inputs, outputs and state.

    Args:
        inputs: the host-to-device streams (``InputStreams``, a list, or a mapping), in the
            order a data loader yields its arrays.
        outputs: the device-to-host streams.
        state: the variables that make the checkpoint (a ``NamedTensors``).
        max_checkpoints: how many checkpoint folders ``save_checkpoint`` keeps (a whole number
            >= 1; the oldest written by this session is emptied first). Folders are compared
            after resolving, so one folder spelled two ways counts once.
        *args, **kwargs: ``popxl.Session``'s (``ir``, ``device_desc``, ...).
    """

    def __init__(self, inputs: Any, outputs: Any, state: NamedTensors, max_checkpoints: int = 1,
                 *args: Any, **kwargs: Any) -> None:
        _count(max_checkpoints)  # refused before the Session compiles
        super().__init__(*args, **kwargs)
        self.inputs = inputs
        self.outputs = outputs
        self.state = state if state is not None else NamedTensors()
        self.max_checkpoints = max_checkpoints
        self.session_state: dict[str, Any] = {}
        self._dataloader: Iterable[Any] | None = None
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
    def dataloader(self) -> Iterable[Any] | None:
        """Where ``run()`` without inputs takes its next batch from."""
        return self._dataloader

    @dataloader.setter
    def dataloader(self, dl: Iterable[Any]) -> None:
        self._dataloader = dl
        self._batches = None

    def add_session_state_info(self, info: Mapping[str, Any]) -> None:
        """Extra facts (e.g. ``{"steps": 100}``) saved beside the checkpoint's tensors: None,
        bools, ints, floats, strings, lists, tuples, dicts with string keys and numeric numpy
        values, which load back with their types. Other values raise ``TypeError``."""
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
        """Copy the state of ``src`` into this session's state variables of the same names."""
        self._write(src.get_named_tensors_data().to_dict(), report_missing, "session")

    def wandb_variable_histograms(self, step: int = 0) -> None:
        """Refused: xlgraph does not log to Weights & Biases."""
        raise NotImplementedError("TaskSession.wandb_variable_histograms: xlgraph.addons does "
                                  "not log to Weights & Biases; read get_named_tensors_data()")

    def save_checkpoint(self, checkpoint_dir: str | Path) -> None:
        """Write the state (``model.npz``, by dotted name) and the session state info
        (``session_state.json``) to ``checkpoint_dir``. The info is checked before anything is
        written; each file is replaced atomically."""
        try:
            info = session_state.encode(self.session_state)
        except TypeError as exc:
            raise TypeError(f"TaskSession.save_checkpoint: {exc}; nothing was written "
                            f"[at {user_source_line()}]") from None
        folder = Path(checkpoint_dir)
        folder.mkdir(parents=True, exist_ok=True)
        checkpoint.save(folder / _MODEL, dict(self.get_named_tensors_data().to_dict()))
        _write_text(folder / _INFO, info)
        here = folder.resolve()
        self._saved = [p for p in self._saved if p != here] + [here]
        while len(self._saved) > self.max_checkpoints:
            old = self._saved.pop(0)
            for name in (_MODEL, _INFO):
                (old / name).unlink(missing_ok=True)

    def load_checkpoint(self, checkpoint_dir: str | Path, report_missing: str = "warn") -> None:
        """Load a checkpoint written by ``save_checkpoint`` into the state.

        Both files are read and checked before any variable or info is written.

        Args:
            checkpoint_dir: the checkpoint folder.
            report_missing: for state tensors the checkpoint lacks: ``"none"``, ``"warn"`` or
                ``"error"``.

        Raises:
            CheckpointError: ``model.npz`` or ``session_state.json`` is not readable (the
                message names the file; nothing was loaded).
        """
        folder = Path(checkpoint_dir)
        info_path = folder / _INFO
        info = (session_state.decode(info_path.read_bytes(), str(info_path))
                if info_path.exists() else {})
        self._write(checkpoint.load(folder / _MODEL), report_missing, str(folder))
        self.session_state.update(info)

    def _write(self, data: Mapping[str, np.ndarray], report_missing: str, source: str) -> None:
        if report_missing not in ("none", "warn", "error"):
            raise ValueError(f"report_missing must be 'none', 'warn' or 'error', got "
                             f"{report_missing!r}")
        targets = self.state.to_dict()
        missing = sorted(set(targets) - set(data))
        if missing and report_missing == "error":
            raise KeyError(f"{source} has no values for {missing}")
        if missing and report_missing == "warn":
            warnings.warn(f"{source} has no values for {missing}", stacklevel=3)
        checkpoint.load_into(self, {k: data[k] for k in targets if k in data},
                             {k: targets[k] for k in targets if k in data})

    def run(self, inputs: Mapping[Any, Any] | None = None,
            downcast_inputs: bool = True) -> dict[Any, np.ndarray]:
        """``popxl.Session.run``; without ``inputs``, the next batch of ``dataloader`` goes to
        the input streams in order (a new epoch starts when it runs out).

        Raises:
            StreamInputError: the dataloader gives no batch (it is empty, or a one-shot
                iterator already used up), or a batch holds a different number of arrays
                than there are input streams.
        """
        if inputs is None and self._dataloader is not None:
            streams = _streams(self.inputs)
            batch = self._next_batch()
            if len(batch) != len(streams):
                names = [getattr(s, "name", str(s)) for s in streams]
                raise StreamInputError(
                    f"TaskSession.run: the dataloader's batch holds {len(batch)} arrays for "
                    f"{len(streams)} input streams {names}; give one array per stream, in "
                    f"order [at {user_source_line()}]")
            inputs = dict(zip(streams, batch))
        return super().run(inputs, downcast_inputs)

    def _next_batch(self) -> Any:
        if self._batches is None:
            self._batches = iter(self._dataloader)
        batch = next(self._batches, _END)
        if batch is _END:  # a new epoch
            self._batches = iter(self._dataloader)
            batch = next(self._batches, _END)
        if batch is _END:
            raise StreamInputError(
                f"TaskSession.run: the dataloader gave no batch: it is empty, or an iterator "
                f"that cannot start a new epoch ({type(self._dataloader).__name__}); give it a "
                f"re-iterable loader or pass inputs [at {user_source_line()}]")
        return tuple(batch) if isinstance(batch, tuple | list) else (batch,)


_END = object()


def _count(value: Any) -> int:
    try:
        return whole_number(value, "TaskSession max_checkpoints")
    except ArgumentError as exc:
        raise ArgumentError(f"{exc} [at {user_source_line()}]") from None


def _write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (a temporary file renamed over it)."""
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
