"""Keeping a torch module's parameters and buffers in sync with a Session's variables.

Host to device: before each call, tensors whose torch version counter moved since the last sync
(``load_state_dict``, in-place edits, another model's training) are written to the device.
Device to host: training marks the host copy stale; the module is switched to a subclass that
copies the trained values back, in place, the first time anything reads its parameters,
buffers, ``state_dict()`` or attributes. Nothing is copied per training step.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import Any

import torch

from xlgraph.tensor import Variable

__all__ = ["WeightSync", "hook_module", "unhook_module", "download_all"]

_OWNER = "_xlgraph_poptorch_sync"
_TRAINING: weakref.WeakSet[Any] = weakref.WeakSet()


def download_all() -> None:
    """Bring every training model's trained weights to the host (before another model runs)."""
    for sync in list(_TRAINING):
        sync.download()


class WeightSync:
    """The variables of one Session and the torch tensors they mirror, by ``state_dict`` key."""

    def __init__(self, session: Any, variables: dict[str, Variable],
                 tensors: dict[str, torch.Tensor], to_numpy: Callable[[torch.Tensor], Any]) -> None:
        self.session = session
        self.variables = variables
        self.tensors = {k: tensors[k] for k in variables}
        self._to_numpy = to_numpy
        self.versions = {k: t._version for k, t in self.tensors.items()}
        self.host_stale = False

    def upload_changed(self) -> list[str]:
        """Write every torch tensor changed since the last sync into the session."""
        changed = [k for k, t in self.tensors.items() if t._version != self.versions[k]]
        for k in changed:
            self.session.write_variable_data(self.variables[k], self._to_numpy(self.tensors[k]))
            self.versions[k] = self.tensors[k]._version
        return changed

    def upload_all(self) -> None:
        for k, t in self.tensors.items():
            self.session.write_variable_data(self.variables[k], self._to_numpy(t))
            self.versions[k] = t._version

    def download(self) -> None:
        """Copy the session's values into the torch tensors, in place (host edits win)."""
        if not self.host_stale:
            return
        self.upload_changed()
        with torch.no_grad():
            for k, t in self.tensors.items():
                t.copy_(torch.from_numpy(self.session.get_tensor_data(self.variables[k])))
                self.versions[k] = t._version
        self.host_stale = False


class _SyncOnRead:
    """Mixin of the module classes of a training model: reads fetch trained weights first."""

    def _xlgraph_sync(self) -> None:
        sync = self.__dict__.get(_OWNER)
        if sync is not None and sync.host_stale:
            sync.download()

    def __getattr__(self, name: str) -> Any:
        self._xlgraph_sync()
        return super().__getattr__(name)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        self._xlgraph_sync()
        return super().state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:
        self._xlgraph_sync()
        return super().named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Any:
        self._xlgraph_sync()
        return super().named_buffers(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """A plain (unwrapped) copy holding the trained values."""
        self._xlgraph_sync()
        original = type(self)._xlgraph_original
        clone = original.__new__(original)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            if key != _OWNER:
                clone.__dict__[key] = copy.deepcopy(value, memo)
        return clone

    def __copy__(self) -> Any:
        """A shallow copy (parameters shared), as ``copy.copy`` of any module."""
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickle (``torch.save(model)``) as the plain module class with the trained values."""
        return _unpickled, (copy.deepcopy(self),)


def _unpickled(module: torch.nn.Module) -> torch.nn.Module:
    """Unpickling a synced module gives the plain copy it was pickled as."""
    return module


_CLASSES: dict[type, type] = {}


def _synced_class(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Poptorch{cls.__name__}", (_SyncOnRead, cls),
                             {"__module__": cls.__module__, "_xlgraph_original": cls})
    return _CLASSES[cls]


def hook_module(model: torch.nn.Module, sync: Any) -> None:
    """Make every submodule of ``model`` sync from ``sync`` before its weights are read.

    ``sync`` has ``host_stale`` and ``download()`` (a ``WeightSync``, or the training model that
    will own one once compiled).

    Raises:
        RuntimeError: when ``model`` is already wrapped by a live training model.
    """
    for m in model.modules():
        if isinstance(m, _SyncOnRead):
            raise RuntimeError(f"{type(model).__name__} is already wrapped by a "
                               f"poptorch.trainingModel: call destroy() on it first")
    _TRAINING.add(sync)
    for m in model.modules():
        m.__dict__[_OWNER] = sync
        m.__class__ = _synced_class(type(m))


def unhook_module(model: torch.nn.Module) -> None:
    """Undo ``hook_module`` (the module keeps the values it holds)."""
    for m in model.modules():
        if isinstance(m, _SyncOnRead):
            sync = m.__dict__.pop(_OWNER, None)
            if sync is not None:
                _TRAINING.discard(sync)
            m.__class__ = m._xlgraph_original
