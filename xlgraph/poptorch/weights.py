"""Keeping a torch module's parameters and buffers in sync with a Session's variables, per model.

Host to device: before each call, every ``state_dict`` entry is looked up again in its module
and compared with what was last synced: the same tensor object (``model.fc.weight =
nn.Parameter(t)`` replaces it), the same storage (``model.fc.weight.data = t`` changes its
``data_ptr``) and the same torch version counter (``copy_`` under ``no_grad``,
``load_state_dict``, an optimiser step in torch). Only the entries that changed are written to
the device; nothing is copied when nothing changed.

Device to host: training marks the host copy stale; the modules of a training model are switched
to a subclass that copies the trained values back, in place, the first time anything reads its
parameters, buffers, ``state_dict()`` or attributes. Each copy back gives the host weights a new
version. An inference model of the same module (or of a module sharing submodules with it) asks
the training models that own its modules for their trained values before it runs, and uploads
its weights again only when their version moved on since its last upload: the two wrappers
share weights, as PopTorch's do, while plain host edits wait for ``copyWeightsToDevice()``.
There is no global registry: each module knows the training model that owns it.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import torch

from xlgraph.tensor import Variable

__all__ = ["WeightSync", "hook_module", "unhook_module", "fetch_trained", "is_hooked"]

_OWNER = "_xlgraph_poptorch_sync"
_VERSIONS = itertools.count(1)  # host weight versions, unique across every WeightSync


def fetch_trained(model: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """Bring the trained weights of the training models that own ``model``'s modules to the
    host (before an inference model of ``model`` runs).

    Returns:
        ``(id(owner), host weights version)`` of each owner: a change since an inference
        model's last upload means training moved the weights on.
    """
    owners = {id(o): o for m in model.modules() if (o := m.__dict__.get(_OWNER)) is not None}
    for owner in owners.values():
        if owner.host_stale:
            _copy_to_host(owner)
    return tuple((key, owner.host_weights_version) for key, owner in owners.items())


def _copy_to_host(owner: Any) -> None:
    """Bring ``owner``'s trained weights to the host through its public
    ``copyWeightsToHost`` as looked up on the instance (a replaced one is called), as
    PopTorch does; a bare ``WeightSync`` downloads."""
    copy_weights = getattr(owner, "copyWeightsToHost", None)
    copy_weights() if copy_weights is not None else owner.download()


def _slot(root: torch.nn.Module, key: str) -> tuple[dict[str, Any], str]:
    """The dict (``_parameters`` or ``_buffers`` of the owning module) and the name under which
    the ``state_dict`` entry ``key`` of ``root`` lives."""
    path, _, name = key.rpartition(".")
    module = root.get_submodule(path)
    return (module._parameters if name in module._parameters else module._buffers), name


class WeightSync:
    """The variables of one Session and the torch tensors they mirror, by ``state_dict`` key."""

    def __init__(self, session: Any, variables: dict[str, Variable], root: torch.nn.Module,
                 to_numpy: Callable[[torch.Tensor], Any]) -> None:
        self.session = session
        self.variables = variables
        self._slots = {k: _slot(root, k) for k in variables}
        self._to_numpy = to_numpy
        self.tensors: dict[str, torch.Tensor] = {}
        self._stamps: dict[str, tuple[int, int]] = {}
        for k in variables:
            self._mark(k, self._current(k))
        self.host_stale = False
        self.host_weights_version = 0  # a new value each time trained weights reach the host

    def _current(self, key: str) -> torch.Tensor:
        table, name = self._slots[key]
        t = table.get(name)
        if t is None:
            raise RuntimeError(f"poptorch: the model no longer has {key!r}; a compiled model's "
                               f"parameters and buffers can change value but not disappear")
        return t

    def _mark(self, key: str, t: torch.Tensor) -> None:
        self.tensors[key] = t
        self._stamps[key] = (t.data_ptr(), t._version)

    def changed(self) -> list[str]:
        """The keys whose tensor was replaced, re-pointed (``.data =``) or written since the
        last sync (no data is copied to find them)."""
        out = []
        tensors, stamps = self.tensors, self._stamps
        for k, (table, name) in self._slots.items():
            t = table.get(name)
            if t is None:
                t = self._current(k)  # raises
            if t is not tensors[k] or t._version != stamps[k][1] or t.data_ptr() != stamps[k][0]:
                tensors[k] = t
                out.append(k)
        return out

    def upload_changed(self) -> list[str]:
        """Write every torch tensor changed since the last sync into the session."""
        changed = self.changed()
        for k in changed:
            self.session.write_variable_data(self.variables[k],
                                             self._to_numpy(self.tensors[k], f"parameter {k!r}"))
            self._mark(k, self.tensors[k])
        return changed

    def upload_all(self) -> None:
        self.changed()
        for k, t in self.tensors.items():
            self.session.write_variable_data(self.variables[k],
                                             self._to_numpy(t, f"parameter {k!r}"))
            self._mark(k, t)

    def download(self) -> None:
        """Copy the session's values into the torch tensors, in place (host edits win)."""
        if not self.host_stale:
            return
        self.upload_changed()
        self._read_back(self.tensors.items())
        self.host_stale = False
        self.host_weights_version = next(_VERSIONS)

    def download_buffers(self, keys: Iterable[str]) -> None:
        """Copy the session's values of ``keys`` (buffers an inference ``forward`` updates)
        into their torch tensors, in place, sending no host edit to the device."""
        self._read_back((k, self._current(k)) for k in keys)

    def _read_back(self, pairs: Iterable[tuple[str, Any]]) -> None:
        """Copy the session's value of each ``(key, tensor)`` into the tensor, in place."""
        with torch.no_grad():
            for k, t in pairs:
                t.copy_(torch.from_numpy(self.session.get_tensor_data(self.variables[k])))
                self._mark(k, t)


_SYNCED = frozenset({"_parameters", "_buffers", "forward"})


class _SyncOnRead:
    """Mixin of the module classes of a training model: reads fetch trained weights first."""

    def _xlgraph_sync(self) -> bool:
        sync = self.__dict__.get(_OWNER)
        if sync is not None and sync.host_stale:
            _copy_to_host(sync)
            return True
        return False

    def copyWeightsToHostIfNeeded(self) -> bool:  # noqa: N802
        """Copy the trained weights to this module if training changed them since: True when
        it copied, False when the host was up to date (PopTorch's return value)."""
        return self._xlgraph_sync()

    def destroy(self) -> None:
        """Release the training model wrapping this module and unwrap it (PopTorch's
        ``model.destroy()``): it can then be wrapped again."""
        owner = self.__dict__.get(_OWNER)
        if owner is not None and hasattr(owner, "destroy"):
            owner.destroy()
            owner._hooked = False  # a later call of the wrapper wraps the module again
        unhook_module(self)

    def __getattribute__(self, name: str) -> Any:
        """``_parameters``, ``_buffers`` and ``forward`` (what ``state_dict()``,
        ``parameters()``, ``.half()``, ``.to()`` and calls read) bring trained weights first,
        as PopTorch's wrapped module does."""
        if name in _SYNCED:
            object.__getattribute__(self, "_xlgraph_sync")()
        return super().__getattribute__(name)

    def __getattr__(self, name: str) -> Any:
        """A parameter, buffer or submodule (``model.fc.weight``), after the trained weights
        (``nn.Module.__getattr__`` reads ``__dict__`` directly)."""
        self._xlgraph_sync()
        return super().__getattr__(name)

    def _get_name(self) -> str:
        """The user's class name, which ``repr`` prints (wrapping changes no printout)."""
        return type(self)._xlgraph_original.__name__

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

    ``sync`` has ``host_stale``, ``host_weights_version`` and ``download()`` (a ``WeightSync``,
    or the training model that will own one once compiled).

    Raises:
        RuntimeError: when ``model`` is already wrapped by a live training model.
    """
    for m in model.modules():
        if isinstance(m, _SyncOnRead):
            raise RuntimeError("Model has already been wrapped in 'poptorch.trainingModel'. "
                               "Call model.destroy() on the model to unwrap before wrapping "
                               "again.")
    for m in model.modules():
        m.__dict__[_OWNER] = sync
        m.__class__ = _synced_class(type(m))


def is_hooked(module: Any) -> bool:
    """Whether ``module``'s class is the synced subclass a training model gave it."""
    return isinstance(module, _SyncOnRead)


def unhook_module(model: torch.nn.Module) -> None:
    """Undo ``hook_module`` (the module keeps the values it holds)."""
    for m in model.modules():
        if isinstance(m, _SyncOnRead):
            m.__dict__.pop(_OWNER, None)
            m.__class__ = m._xlgraph_original
