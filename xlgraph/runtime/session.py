"""``Session``: owns an Ir, lowers it once, and runs it on a simulated device.

Over 400 lines: it is one class, PopXL's ``Session`` surface (run, weights in and out, the
context manager, remote buffers, reports), each method a thin step onto ``lower`` and the
modules beside it (``host_io``, ``device``, ``remote_memory``, ``timing``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

from xlgraph.core.pb_views import PbSession
from xlgraph.core.popart_log import devicex_debug
from xlgraph.errors import (
    EmptyProgramError,
    ExecutionError,
    NotAttachedError,
    UnsupportedDeviceError,
    flag,
    user_source_line,
)
from xlgraph.ipu import IPUModel, ProfileReport, make_report, model_memory
from xlgraph.ipu.autoreport import report_directory, save_profile
from xlgraph.ir import Ir
from xlgraph.lower import lower
from xlgraph.ops import mkl
from xlgraph.ops.window import chunks_on
from xlgraph.remote import store_weight_shards
from xlgraph.runtime import host_maps
from xlgraph.runtime.device import make_device
from xlgraph.runtime.host_io import HostIO, variable_data
from xlgraph.runtime.kernels import KernelThread
from xlgraph.runtime.mapped import MappedVariables
from xlgraph.runtime.remote_memory import RemoteMemory
from xlgraph.runtime.replica_layout import ReplicaLayout
from xlgraph.runtime.threads import (
    ChunkPool,
    ThreadLimit,
    check_setting,
    choose_chunk_threads,
    choose_threads,
    has_threaded_kernels,
    largest_matrix_flops,
    machine_busy_once,
)
from xlgraph.runtime.timing import HostTiming
from xlgraph.streams import DeviceToHostStream, HostToDeviceStream
from xlgraph.tensor import Constant, Tensor, Variable

__all__ = ["Session"]

T = TypeVar("T")


def _serialised(method: Callable[..., T]) -> Callable[..., T]:
    """Run ``method`` holding the Session's lock: concurrent calls from several threads take
    turns, so each ``run`` sees and leaves consistent variables."""

    @functools.wraps(method)
    def locked(self: Session, *args: Any, **kwargs: Any) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


def _check_arguments(**flags: object) -> None:
    """Flags are real booleans: ``"no"`` would otherwise act as True."""
    for name, value in flags.items():
        flag(value, f"Session {name}")


class Session:
    """Runs an Ir on the numpy simulator.

    Args:
        ir: the program; the Session takes ownership and the Ir can no longer be modified.
        device_desc: ``"cpu"`` or ``"ipu_model"`` (``"ipu_hw"`` raises).
        weights_to_host_on_exit: copy weights to the host when leaving the ``with`` that attached.
        optimize: run the generated plan (True) or the reference interpreter (False).
        blas_threads: BLAS threads while attached: ``"auto"`` (the policy in
            ``xlgraph.runtime.threads``), a number, or None to leave BLAS alone.
        chunk_threads: threads for the batch chunks of conv and pooling kernels while attached:
            ``"auto"`` (every core if a core is free, see ``xlgraph.runtime.threads``) or a
            number; above one, BLAS runs one thread.
        backend: ``"numpy"`` or ``"numba"`` (compiled loops for the ops that have them, see
            ``xlgraph.lower.backends``); None: ``XLGRAPH_BACKEND``, else numba if installed.
        ipu_model: the hardware ``"ipu_model"`` models (``xlgraph.IPUModel``; default PopXL's
            4-tile Mk2 IPU). A program that does not fit its tile memory raises
            ``OutOfMemoryError`` here; ``"cpu"`` never checks memory.
        check_numerics: interpret op by op and raise ``ExecutionError`` at the first NaN or
            Inf, naming the op and the line that created it (slow; see ``docs/debugging.md``).
        compile_in_background: with a compiling backend (numba), start at once on numpy's
            kernels and compile the backend's on a thread the Session owns, swapping them in
            between two runs when ready (``wait_for_kernels``; ``xlgraph.runtime.kernels``).
            False compiles them before the Session is made.
        fuse_steps: with a compiling backend, run each stretch of consecutive compiled loops
            and 2-D matrix products as one compiled function (one call instead of one per op;
            ``xlgraph.lower.segments``). False keeps a call per op.

    Concurrent calls of ``run`` (and of the weight methods) from several threads are
    serialised: each takes the Session's lock in turn.

    Example:
        >>> with session:
        ...     outputs = session.run({img_stream: images})
    """

    def __init__(self, ir: Ir, device_desc: str = "cpu", weights_to_host_on_exit: bool = True,
                 *, optimize: bool = True, blas_threads: int | str | None = "auto",
                 backend: str | None = None, chunk_threads: int | str = "auto",
                 ipu_model: IPUModel | None = None, check_numerics: bool = False,
                 compile_in_background: bool = True, fuse_steps: bool = True) -> None:
        if not ir.main_graph.ops and not ir.main_graph.variables:
            raise EmptyProgramError(
                f"Session: {ir!r} has no operations and no variables in its main graph, so there "
                f"is nothing to compile or run; add operations (such as ops.host_load / "
                f"ops.host_store or a call) before creating the Session [at {user_source_line()}]"
            )
        _check_arguments(weights_to_host_on_exit=weights_to_host_on_exit, optimize=optimize,
                         check_numerics=check_numerics, fuse_steps=fuse_steps,
                         compile_in_background=compile_in_background)
        check_setting(blas_threads, "Session blas_threads", none_ok=True)
        check_setting(chunk_threads, "Session chunk_threads")
        mkl.check()  # a bad XLGRAPH_BLAS fails here rather than in the first large product
        self._lock = threading.RLock()  # one run (or weight transfer) at a time
        self._pb_session = PbSession()  # PopART's session handle, as programs reach it
        self.device = make_device(device_desc, ipu_model)
        self.layout = ReplicaLayout(ir)  # checks that the replicas split over the instances
        store_weight_shards(ir)
        ir.frozen = True
        ir.session_ref = weakref.ref(self)  # for Tensor.in_sync_with_ipu
        self.ir = ir
        self.executable = lower(ir, optimize, backend, _exchange(ir), check_numerics,
                                defer=compile_in_background, fuse=fuse_steps)
        self.layout.held_once = self.executable.held_once
        self.layout.one_replica = self.executable.one_replica
        model = self.device.model
        self._memory = None if model is None else model_memory(ir, self.executable, model)
        self._report: ProfileReport | None = None
        # Poplar's autoReport options: profile.json in their directory (ipu_model only)
        self._report_dir = None if model is None else report_directory(
            ir.session_options.engineOptions)
        variables = self.executable.variables
        self.remote = RemoteMemory(ir, self.layout, _exchange(ir))
        self._maps = MappedVariables(ir, self.executable.changed_variables, self.remote)
        self._host = {v: self._maps.host_copy(v, self.layout) for v in variables}
        self.weights_to_host_on_exit = self._maps.on_exit(weights_to_host_on_exit)
        self._host_values = {v: v.initial_data for v in [*variables, *self.remote.variables]}
        device = self._device
        written = self.executable.written_variables
        self._backup = [(device[v], self._maps.spare(v, device[v], self._host[v]))
                        for v in written] + [(a, np.empty_like(a)) for a in self.remote.arrays()]
        self.io = HostIO(ir)
        self.blas_threads = blas_threads
        self._flops = largest_matrix_flops(ir)
        self.chunk_threads = chunk_threads
        self._threaded = has_threaded_kernels(ir)
        # No floating-point traps (the option is read now, as lowering reads it) and no chunked
        # kernels: a run needs neither ``np.errstate`` nor the chunk pool's context.
        self._bare = not (self._threaded or ir.session_options.enableFloatingPointChecks)
        self._chunks = 1  # chunk threads while attached
        self._thread_limit = ThreadLimit()
        self._chunk_pool = ChunkPool()  # conv/pool chunk threads, while attached
        self._attached = False
        self.host_timing = HostTiming()  # measured host-side time of the runs
        self._host_stale = False
        self._entered: list[bool] = []
        self._kernels: KernelThread | None = None  # compiles the backend's kernels, if deferred
        if self.executable.deferred is not None:
            # numba's BLAS may load only now: the next run extends the thread limit to it
            self._kernels = KernelThread(self.executable, self._lock, self._thread_limit.mark_stale)
            weakref.finalize(self, self._kernels.stop)
        self._write_auto_report()

    @property
    def _device(self) -> dict[Variable, np.ndarray]:
        """The variables' device arrays (the executable may swap them between runs)."""
        return dict(zip(self.executable.variables, self.executable.arrays))

    def report(self) -> ProfileReport:
        """The modelled IPU's memory per tile, liveness and estimated cycles per op (estimates,
        not measurements; see ``xlgraph.ipu``), and after runs the end-to-end estimate with the
        host-side time measured during them (``report.end_to_end(runs)``).

        Raises:
            UnsupportedDeviceError: on ``"cpu"``, which models no hardware.
        """
        if self._memory is None:
            raise UnsupportedDeviceError(
                "session.report() describes the modelled IPU: create the Session with "
                "device_desc='ipu_model'"
            )
        if self._report is None:
            self._report = make_report(self.ir, self._memory)
        timing = self.host_timing
        self._report.host_side_s_per_run = timing.host_side_s_per_run if timing.runs else None
        return self._report

    def _write_auto_report(self) -> None:
        if self._report_dir is not None:
            save_profile(self.report(), self._report_dir)

    def wait_for_kernels(self, timeout: float | None = None) -> bool:
        """Block until the backend's compiled kernels are in use (True; at once when there is
        nothing to compile) or ``timeout`` seconds pass (False).

        Raises:
            RuntimeError: compiling them failed (the Session keeps running numpy's kernels).
        """
        return self._kernels is None or self._kernels.wait(timeout)

    def _repr_html_(self) -> str:
        """Jupyter's view: device, replicas and memory use (``runtime.session_view``)."""
        from xlgraph.runtime.session_view import session_html

        return session_html(self)

    # -- attachment --------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """The generated Python source of the step function."""
        return self.executable.source

    @property
    def is_attached(self) -> bool:
        """Whether the Session is attached to its device (inside ``with session:``)."""
        return self._attached

    @_serialised
    def __enter__(self) -> Session:
        attach = not self._attached
        if attach:
            self._attached = True
            busy = machine_busy_once()  # one look at the machine for both choices
            self._chunks = choose_chunk_threads(self.chunk_threads, self._threaded, busy)
            blas = 1 if self._chunks > 1 else choose_threads(self.blas_threads, self._flops, busy)
            self._thread_limit.apply(blas)
            self._chunk_pool.start(self._chunks if self._threaded else 1)
            self.weights_from_host()
        self._entered.append(attach)
        return self

    @_serialised
    def __exit__(self, *_: Any) -> None:
        if not self._entered.pop():
            return
        try:
            if self.weights_to_host_on_exit:  # also after an error: a failed run changed nothing
                self.weights_to_host()
        finally:  # detached even when the weights cannot come back
            self._attached = False
            self.host_timing.detach()
            self._thread_limit.restore()
            self._chunk_pool.stop()
        self._write_auto_report()  # now with the host-side time of the runs

    def _require_attached(self, what: str) -> None:
        if not self._attached:
            raise NotAttachedError(
                f"Must be attached to device before calling a runtime function ({what}); "
                f"use `with session:`"
            )

    # -- running -----------------------------------------------------------------------------
    def expected_inputs(self) -> list[HostToDeviceStream]:
        """The h2d streams that ``run`` needs data for."""
        return list(self.io.expected)

    @property
    def _extra_input_dims(self) -> tuple[int, ...]:
        """``(num_host_transfers,)`` when it is over 1, then ``(instance_replication_factor,)``
        when over 1: the leading dimensions of every host array (PopXL's private name, which
        the applications' scripts use to make inputs)."""
        return self.io.lead

    def _full_input_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``_extra_input_dims + shape``: the host shape of an input of ``shape``."""
        return self.io.lead + tuple(shape)

    def create_host_outputs(self) -> dict[DeviceToHostStream, np.ndarray]:
        """Fresh output arrays for every d2h stream, shaped as ``run`` returns them."""
        return self.io.new_outputs()

    def run(self, inputs: Mapping[HostToDeviceStream, Any] | None = None,
            downcast_inputs: bool = True) -> dict[DeviceToHostStream, np.ndarray]:
        """Run the main graph once.

        Args:
            inputs: ``{h2d stream: array}`` for every expected stream; arrays have shape
                ``(num_host_transfers,) + stream.shape`` (no leading dim when it is 1).
            downcast_inputs: accept float64/int64/uint64 data for 32-bit streams.

        Returns:
            ``{d2h stream: array}`` for every d2h stream, shaped like the inputs.

        Raises:
            NotAttachedError, StreamInputError, ExecutionError (variables are left unchanged).
        """
        started = time.perf_counter()
        if not self._attached:
            self._require_attached("run")
        in_arrays = self.io.check_inputs(inputs or {}, downcast_inputs)
        outputs = self.io.new_outputs()
        self._execute(in_arrays, list(outputs.values()), started)
        return outputs

    def run_with_outputs(self, inputs: Mapping[HostToDeviceStream, Any] | None = None,
                         outputs: Mapping[DeviceToHostStream, np.ndarray] | None = None,
                         downcast_inputs: bool = True) -> None:
        """``run``, writing into caller-provided output arrays (``outputs``: one per d2h
        stream; with None, the outputs are dropped)."""
        started = time.perf_counter()
        self._require_attached("run")
        in_arrays = self.io.check_inputs(inputs or {}, downcast_inputs)
        if outputs is None:
            outputs = self.create_host_outputs()
        self._execute(in_arrays, self.io.check_outputs(outputs), started)

    def _execute(self, in_arrays: list[np.ndarray], out_arrays: list[np.ndarray],
                 started: float) -> None:
        """One run holding the Session's lock (as the ``_serialised`` methods), timed from
        ``started`` (``time.perf_counter``) for ``host_timing``."""
        with self._lock:
            self._require_attached("run")
            in_sync, self._host_stale = not self._host_stale, True
            if self._thread_limit.stale or self._chunks > 1:  # see runtime.threads
                self._thread_limit.hold()
            before = self.executable.state
            for live, saved in self._backup:  # one snapshot per run, whatever its transfers;
                host_maps.snapshot(saved, live, in_sync)  # double-buffered variables need none
            begin = time.perf_counter()
            try:
                if self._bare:  # nothing to arrange around the run (saves microseconds a step)
                    self.executable.run(in_arrays, out_arrays)
                else:
                    with self._float_traps(), chunks_on(self._chunk_pool.executor):
                        self.executable.run(in_arrays, out_arrays)
            except BaseException as exc:
                if self.executable.state is before:  # not committed (even if interrupted later)
                    for live, saved in self._backup:
                        host_maps.restore(live, saved)
                if not isinstance(exc, Exception):
                    raise
                op = self.executable.failing_op(exc)
                where = f" in {op.describe()}" if op is not None else ""
                raise ExecutionError(
                    f"run failed{where}: {type(exc).__name__}: {exc}; variables were left "
                    f"unchanged") from exc
            self.host_timing.record(started, time.perf_counter() - begin)

    def _float_traps(self) -> contextlib.AbstractContextManager[Any]:
        """Trap overflow, division by zero and NaNs when ``enableFloatingPointChecks`` is set."""
        if self.ir.session_options.enableFloatingPointChecks:
            return np.errstate(over="raise", divide="raise", invalid="raise")
        return contextlib.nullcontext()

    # -- weights -----------------------------------------------------------------------------
    @_serialised
    def weights_to_host(self) -> None:
        """Copy every variable to the host and flush their maps (not those never written).

        Raises:
            MemmapError: the Ir has a read-only memory map (PopXL's refusal).
        """
        self._require_attached("weights_to_host")
        self._maps.check_weights_to_host()
        self._to_host()

    def _to_host(self) -> None:
        """``weights_to_host`` without PopXL's refusal: read-only maps are skipped."""
        devicex_debug("Writing weights to host")
        for v, arr in self._device.items():
            if self._maps.kept(v):
                continue
            host_maps.copy(self._host[v], arr)
            if v.host_memmap is not None and v.host_memmap is not self._host[v]:
                np.copyto(v.host_memmap, self.layout.one_per_group(
                    v, self._host[v], self._host_values[v]))
        self._maps.remote_to_host()  # off-chip memory comes back through the maps too
        self._maps.flush()
        self._host_stale = False
        devicex_debug("Writing weights to host complete.")

    @_serialised
    def weights_from_host(self) -> None:
        """Copy every variable from the host to the device."""
        self._require_attached("weights_from_host")
        device = self._device
        for v, arr in self._host.items():
            host_maps.copy(device[v], arr)
        self._host_stale = False  # the device now holds the host's values

    @_serialised
    def get_tensor_data(self, tensor: Tensor) -> np.ndarray:
        """A copy of the value of a Variable or Constant (syncing from the device if needed).

        Raises:
            TypeError: for any other tensor.
        """
        if isinstance(tensor, Constant):
            return tensor.data.copy()
        self._check_variable(tensor)
        if tensor in self.remote.variables:
            return self._maps.through_map(tensor, self.remote.read(tensor,
                                                                   self._host_values[tensor]))
        if self._attached:
            self._maps.check_read(tensor)
            if self._host_stale:
                self._to_host()
        if self._host[tensor] is tensor.host_memmap:
            return tensor.host_memmap
        return self.layout.retrieve(tensor, self._host[tensor], self._host_values[tensor])

    def get_tensors_data(self, tensors: Iterable[Tensor]) -> dict[Tensor, np.ndarray]:
        """``get_tensor_data`` for several tensors."""
        return {t: self.get_tensor_data(t) for t in tensors}

    @_serialised
    def write_variable_data(self, tensor: Variable, data: Any) -> None:
        """Set a variable's value on the host, and on the device when attached.

        Raises:
            TypeError: not a Variable, or the dtype differs. ValueError: the shape is not
            ``shape_on_host``. NotImplementedError: an ``all_replicas`` variable whose groups
            hold several replicas (as PopXL).
        """
        self._check_variable(tensor, writing=True)
        arr = variable_data(tensor, data, [tensor.shape_on_host])
        if tensor.retrieval_mode == "all_replicas" and tensor.replica_grouping.group_size > 1:
            raise NotImplementedError(
                f"write_variable_data: writing {tensor.id}, a variable with "
                f"retrieval_mode='all_replicas' and replica groups of "
                f"{tensor.replica_grouping.group_size}, is not supported (as in PopXL)")
        self._store_host_data(tensor, arr)

    @_serialised
    def _write_replica_values(self, tensor: Variable, data: Any) -> None:
        """``write_variable_data`` taking what ``get_tensor_data`` gave (for checkpoints)."""
        self._check_variable(tensor, writing=True)
        shapes = [tensor.shape_on_host]
        if tensor not in self.remote.variables:
            shapes.append(self.layout.replica_values_shape(tensor))
        arr = variable_data(tensor, data, shapes)
        device = None
        if arr.shape != tensor.shape_on_host:
            device, arr = self.layout.from_replica_values(tensor, arr, self._host_values[tensor])
        self._store_host_data(tensor, arr, device)

    def _store_host_data(self, tensor: Variable, arr: np.ndarray,
                         device: np.ndarray | None = None) -> None:
        """Keep ``arr`` (``shape_on_host``) as host value, on the device too when attached."""
        mapped = tensor.host_memmap
        if mapped is not None:  # written through the map, as PopXL
            self._maps.check_write(tensor)
            if arr is not mapped:
                host_maps.copy(mapped, arr)
            arr = mapped
        self._host_values[tensor] = arr if mapped is not None else arr.copy()
        if tensor in self.remote.variables:
            self.remote.write(tensor, arr)  # off-chip memory is the host's in the simulator
            return
        host = self._host[tensor]
        if host is not mapped:
            host_maps.copy(host, self.layout.expand(tensor, arr) if device is None else device)
        if self._attached:
            host_maps.copy(self._device[tensor], host)

    def write_variables_data(self, tensors: Mapping[Variable, Any]) -> None:
        """``write_variable_data`` for several variables: ``{variable: data}``."""
        for t, value in tensors.items():
            self.write_variable_data(t, value)

    def _check_variable(self, tensor: Any, writing: bool = False) -> None:
        if not isinstance(tensor, Variable):
            what = tensor.id if isinstance(tensor, Tensor) else repr(tensor)
            if writing:  # PopXL's own sentences
                raise TypeError(f"Tensor {what} is not of type Variable.")
            raise TypeError(f"Tensor {what} is not of type Constant or Variable.")
        if tensor not in self._host_values:
            raise ValueError(f"{tensor.id} is not a variable of this Session's Ir")


def _exchange(ir: Ir) -> Any:
    """The link to the other instances when the replicas span several processes."""
    if ir.num_instances == 1:
        return None
    from xlgraph.dist.exchange import MpiExchange

    return MpiExchange.for_ir(ir)
