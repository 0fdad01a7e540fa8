"""A Session's kernel thread: compiles the backend's loops while the program already runs.

numba takes about half a second to import and a second or more to compile a program's loop
forms on a clean cache. So a Session does not wait for it: lowering plans the program once and
generates the step on numpy's kernels (``lower(..., defer=True)``), the Session is ready at
once, and a ``KernelThread`` it owns generates the same plan's step with the backend's compiled
loops. When that is done, the thread takes the Session's lock (so no run is in flight: runs hold
it too) and puts the new step in place; the next run uses it. Both steps run one plan on the
same buffers and variables, and the compiled loops match numpy's kernels to the backend's
documented tolerance (``xlgraph.lower.backends.TOLERANCE``).

The thread is a daemon that ends when its compile does (a process that exits meanwhile does
not wait for it; numba writes its cache files whole or not at all); ``stop`` asks it to end
after the kernel it is compiling, and the Session calls it when it is garbage collected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["KernelThread", "Stopped"]


class Stopped(Exception):
    """The kernel thread was asked to stop before it finished."""


class _Stoppable:
    """The backend, checking before each kernel whether compiling should stop."""

    def __init__(self, backend: Any, stop: threading.Event) -> None:
        self._backend, self._stop = backend, stop
        self.name = backend.name
        self.blas = backend.blas

    def kernel(self, *args: Any) -> Any:
        if self._stop.is_set():
            raise Stopped
        return self._backend.kernel(*args)

    def fuse(self, *args: Any) -> Any:
        if self._stop.is_set():
            raise Stopped
        return self._backend.fuse(*args)

    def matmul(self, *args: Any) -> Any:
        if self._stop.is_set():
            raise Stopped
        return self._backend.matmul(*args)

    def direct(self, *args: Any) -> Any:
        return self._backend.direct(*args)


class KernelThread:
    """Compiles ``executable.deferred``'s kernels on a thread, then, holding ``lock``, puts the
    step that calls them in place (``executable.use``) and calls ``on_install``."""

    def __init__(self, executable: Any, lock: Any,
                 on_install: Callable[[], None] | None = None) -> None:
        self._executable, self._lock = executable, lock
        self._on_install = on_install
        self._backend = executable.deferred
        self._stop = threading.Event()
        self._done = threading.Event()
        self._installed = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._compile, name="xlgraph-kernels",
                                        daemon=True)
        self._thread.start()

    def _compile(self) -> None:
        try:
            compiled = self._executable.generate(_Stoppable(self._backend, self._stop))
            with self._lock:
                if not self._stop.is_set():
                    self._executable.use(compiled)
                    self._installed = True
                    if self._on_install is not None:
                        self._on_install()
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - kept for wait(); runs stay on numpy
            self.error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the compiled step is in place (True) or ``timeout`` seconds pass
        (False). Raises what the compile raised, if it failed (the Session then keeps numpy's
        kernels)."""
        if not self._done.wait(timeout):
            return False
        if self.error is not None:
            raise RuntimeError(f"compiling the {self._backend.name} kernels failed: "
                               f"{type(self.error).__name__}: {self.error}; the Session keeps "
                               f"running numpy's kernels") from self.error
        return self._installed

    def stop(self, join: bool = False) -> None:
        """Ask the thread to end after the kernel it is compiling (and wait for it: ``join``)."""
        self._stop.set()
        if join:
            self._thread.join()
