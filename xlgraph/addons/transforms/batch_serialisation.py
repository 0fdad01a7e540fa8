"""Batch serialisation: run a graph over ``steps`` micro-batches in one call, each step
loading its inputs from host streams or remote-buffer entries and storing its outputs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.utils import suffix_graph_name
from xlgraph.errors import user_source_line

__all__ = ["RemoteHandle", "BatchSerialResult", "batch_serial_buffer", "batch_serialise",
           "batch_serialise_fwd_and_grad"]

logger = logging.getLogger(__name__)

Loads = MutableMapping[popxl.Tensor, Any]  # streams, RemoteHandles or (buffer, offset[, group])
_MODES = ("compute", "io", "io_overlapped")


@dataclass
class RemoteHandle:
    """Entries of ``buffer`` used by a batch-serialised graph: step ``i`` of row ``n`` uses
    entry ``R * steps + i`` where ``R`` is ``n + row_offset`` (an int), ``0`` (None: always
    the first row) or ``row_offset(n)`` (a callable on the int32 row tensor).
    ``shard_group``: the replicas a sharded buffer's entries are split over. A tuple
    ``(buffer, row_offset[, shard_group])`` is accepted wherever a handle is."""

    buffer: popxl.RemoteBuffer
    row_offset: int | Callable[[popxl.Tensor], popxl.Tensor] | None = 0
    shard_group: popxl.ReplicaGrouping | None = None


def _entry(handle: RemoteHandle, row: popxl.Tensor, step: popxl.Tensor,
           steps: int) -> popxl.Tensor:
    """The entry index for ``row`` and ``step`` (int32 tensors of the current graph)."""
    offset = handle.row_offset
    if offset is None:
        return step
    mapped = offset(row) if callable(offset) else row + offset
    return mapped * steps + step


def _grow(handle: RemoteHandle, steps: int, rows: int) -> None:
    """Raise the buffer's entries to what the handle's rows reach (never lowered)."""
    offset = handle.row_offset
    if offset is None:
        needed = steps
    elif callable(offset):
        needed = steps * rows
    else:
        needed = steps * (offset + rows)
    buffer = handle.buffer
    if buffer.entries < needed:
        buffer.set_remote_buffer_info(buffer.tensor_dtype, buffer.tensor_shape, needed)


def _is_tuple_handle(value: Any) -> bool:
    return (isinstance(value, tuple | list) and len(value) >= 2
            and isinstance(value[0], popxl.RemoteBuffer)
            and (value[1] is None or isinstance(value[1], int)))


def _handles(handles: MutableMapping[popxl.Tensor, Any], streams: bool, what: str) -> None:
    """Convert tuple handles to RemoteHandles in the caller's dict.

    Raises:
        TypeError: a value that is neither a handle, a handle tuple nor (for loads) a stream.
    """
    for t, value in list(handles.items()):
        if isinstance(value, RemoteHandle) or (
                streams and isinstance(value, popxl.HostToDeviceStream)):
            continue
        if not _is_tuple_handle(value):
            kinds = "a HostToDeviceStream, " if streams else ""
            raise TypeError(f"batch_serialise: {what}[{t.id}] must be {kinds}a RemoteHandle or "
                            f"a (RemoteBuffer, row_offset[, shard_group]) tuple, got {value!r} "
                            f"[at {user_source_line()}]")
        handles[t] = RemoteHandle(*value)


@dataclass
class BatchSerialResult:
    """A batch-serialised graph and, for each stored tensor, the handle holding its values."""

    graph: GraphWithNamedArgs
    stored_buffers: dict[popxl.Tensor, RemoteHandle] = field(default_factory=dict)

    def remap_tensors(self, nt: NamedTensors) -> NamedTensors:
        """``nt`` with each tensor of the original graph replaced by its input here."""
        return nt.remap(self._remap)

    _remap: dict[popxl.Tensor, popxl.Tensor] = field(default_factory=dict, repr=False)


def batch_serial_buffer(t: popxl.Tensor | popxl.TensorSpec, steps: int = 1, rows: int = 1,
                        shard_group: popxl.ReplicaGrouping | None = None) -> popxl.RemoteBuffer:
    """A remote buffer with ``steps * rows`` entries of ``t``'s spec (replica-sharded over
    ``shard_group`` when it has more than one replica)."""
    from xlgraph.addons.remote import create_remote_buffer

    shard = shard_group.group_size if shard_group is not None else 1
    return create_remote_buffer(t, steps * rows, shard_group, shard)


def _check(graph: popxl.Graph, tensors: Any, what: str, *where: str) -> None:
    for t in tensors:
        if not any(t in getattr(graph, w) for w in where):
            raise ValueError(f"batch_serialise: {t.id} in {what} is not one of the "
                             f"{' or '.join(where)} of graph {graph.name!r} "
                             f"[at {user_source_line()}]")


def _io_mode(ir: popxl.Ir, io_mode: str, steps: int) -> str:
    if io_mode not in _MODES:
        raise ValueError(f"batch_serialise: unknown io_mode {io_mode!r}; expected one of "
                         f"{list(_MODES)} [at {user_source_line()}]")
    if io_mode == "io_overlapped" and steps < 2:
        logger.warning("batch_serialise: io_mode 'io_overlapped' needs at least 2 steps; "
                       "using 'io'")
        io_mode = "io"
    if io_mode != "compute" and ir.session_options.numIOTiles < 1:
        raise ValueError(f"batch_serialise(io_mode={io_mode!r}): IR must have IO tiles (set "
                         f"ir._pb_ir.getSessionOptions().numIOTiles, or use io_mode='compute') "
                         f"[at {user_source_line()}]")
    return io_mode


def batch_serialise(graph: GraphWithNamedArgs, steps: int, load_handles: Loads,
                    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream],
                    store_buffers: MutableMapping[popxl.Tensor, Any],
                    seed_input: popxl.Tensor | None = None, rows: int = 1,
                    io_mode: str = "io") -> BatchSerialResult:
    """A graph that runs ``graph`` ``steps`` times per call.

    The result's inputs are the int32 row index ``n`` (``batch_serial_loop_index``, always
    first; a Python int is accepted at the call), the seed (``batch_serial_random_seed``,
    with ``seed_input``), then every other input of ``graph`` in order with its name, spec and
    by-reference flag; it has no outputs and its named args are ``graph``'s. Step ``i`` of
    row ``n`` loads each input of ``load_handles`` from its stream or from entry
    ``(n + row_offset) * steps + i`` of its buffer (``i`` for ``row_offset=None``,
    ``f(n) * steps + i`` for a callable), gathered over the handle's ``shard_group``; runs
    ``graph`` (with its own seed split from the carried one); then stores each output or
    input in ``store_streams`` / ``store_buffers`` (cut to the shard group's slice), except
    inputs already loaded from a buffer. Tuple handles are converted to ``RemoteHandle`` in
    the caller's dicts; buffers are grown to the entries their rows reach.
    ``io_mode``: ``"compute"`` transfers on the compute tiles; ``"io"`` (needs IO tiles) on
    the IO tiles with an ``io_tile_copy`` after each load and before each store;
    ``"io_overlapped"`` places them as ``"io"`` (fewer than 2 steps: ``"io"``, with a
    warning), its overlap being a schedule the simulator does not represent. Values are the
    same in every mode.

    Raises:
        ValueError: ``rows < 1``, an unknown ``io_mode``, "io" modes without IO tiles, or
            tensors that are not inputs/outputs of ``graph``.
        TypeError: a load handle that is not a stream, a handle or a handle tuple.
    """
    inner = graph.graph
    if rows < 1:
        raise ValueError(f"batch_serialise: rows must be at least 1, got {rows} "
                         f"[at {user_source_line()}]")
    io_mode = _io_mode(inner.ir, io_mode, steps)
    _handles(load_handles, True, "load_handles")
    _handles(store_buffers, False, "store_buffers")
    _check(inner, load_handles, "load_handles", "inputs")
    _check(inner, [*store_streams, *store_buffers], "the stores", "outputs", "inputs")
    for handle in [*load_handles.values(), *store_buffers.values()]:
        if isinstance(handle, RemoteHandle):
            _grow(handle, steps, rows)
    from_buffer = {t for t, h in load_handles.items() if isinstance(h, RemoteHandle)}
    kept = [t for t in inner.inputs if t not in load_handles and t is not seed_input]
    ir = inner.ir
    body = ir.create_empty_graph(suffix_graph_name(inner.name, "batch_serial_step"))
    with body, popxl.in_sequence(True):
        # loop-carried first (PopXL carries output i into input i): step, row, seed
        step = popxl.graph_input((), popxl.int32, "step")
        row = popxl.graph_input((), popxl.int32, "row")
        seed = _like(seed_input) if seed_input is not None else None
        passed = {t: _like(t) for t in kept}
        feeds = dict(passed)
        for t, handle in load_handles.items():
            feeds[t] = _load(handle, row, step, steps, t, io_mode)
        if seed is not None:
            seed, feeds[seed_input] = ops.split_random_seed(seed)
        info = ops.call_with_info(inner, inputs_dict=feeds)
        _mark_by_ref(info, {p: t for t, p in passed.items()})

        def value(t: popxl.Tensor) -> popxl.Tensor:
            return feeds[t] if t in inner.inputs else info.graph_to_parent(t)

        for t, stream in store_streams.items():
            with _tiles(io_mode):
                ops.host_store(stream, _to_tiles(value(t), io_mode))
        for t, handle in store_buffers.items():
            if t not in from_buffer:
                _store(handle, row, step, steps, value(t), io_mode)
        popxl.graph_output(step + 1)
        popxl.graph_output(row)
        if seed is not None:
            popxl.graph_output(seed)
    outer = ir.create_empty_graph(suffix_graph_name(inner.name, "batch_serial"))
    with outer:
        carried = [popxl.constant(0, popxl.int32, "step"),
                   popxl.graph_input((), popxl.int32, "batch_serial_loop_index")]
        if seed_input is not None:
            outer_seed = popxl.graph_input(seed_input.shape, seed_input.dtype,
                                           "batch_serial_random_seed")
            carried.append(outer_seed)
        outer_ins = {t: _like(t) for t in kept}
        site = ops.repeat_with_info(body, steps, *carried,
                                    inputs_dict={passed[t]: outer_ins[t] for t in kept})
        _mark_by_ref(site, {outer_ins[t]: passed[t] for t in kept})
    mapping = {t: outer_ins[t] for t in kept}
    if seed_input is not None:
        mapping[seed_input] = outer_seed
    stored = {t: load_handles[t] if t in from_buffer else h for t, h in store_buffers.items()}
    return BatchSerialResult(GraphWithNamedArgs(outer, graph.args.remap(mapping)), stored,
                             mapping)


def _like(t: popxl.Tensor) -> popxl.Tensor:
    return popxl.graph_input(t.shape, t.dtype, t.name, by_ref=getattr(t, "by_ref", False),
                             meta_shape=t.meta_shape)


def _sharded(handle: RemoteHandle) -> bool:
    return handle.shard_group is not None and handle.shard_group.group_size > 1


def _load(handle: Any, row: popxl.Tensor, step: popxl.Tensor, steps: int, t: popxl.Tensor,
          io_mode: str) -> popxl.Tensor:
    with _tiles(io_mode):
        if isinstance(handle, RemoteHandle):
            loaded = ops.remote_load(handle.buffer, _entry(handle, row, step, steps), t.name)
        else:
            loaded = ops.host_load(handle, t.name)
    loaded = _to_tiles(loaded, io_mode)  # to the compute tiles
    if isinstance(handle, RemoteHandle) and _sharded(handle) and not t.meta_shape:
        loaded = ops.collectives.replicated_all_gather(loaded, group=handle.shard_group)
        if loaded.nelms > t.nelms:  # the shards' zero padding
            loaded = loaded.flatten()[:t.nelms]
    if loaded.shape != t.shape and loaded.nelms == t.nelms:
        loaded = loaded.reshape(t.shape)
    return loaded


def _store(handle: RemoteHandle, row: popxl.Tensor, step: popxl.Tensor, steps: int,
           t: popxl.Tensor, io_mode: str) -> None:
    if _sharded(handle) and not t.meta_shape:
        t = ops.collectives.replica_sharded_slice(t, handle.shard_group)
    with _tiles(io_mode):
        ops.remote_store(handle.buffer, _entry(handle, row, step, steps), _to_tiles(t, io_mode))


def _tiles(io_mode: str) -> contextlib.AbstractContextManager[None]:
    """The transfers' tile set: the IO tiles unless ``io_mode`` is "compute"."""
    return popxl.io_tiles() if io_mode != "compute" else contextlib.nullcontext()


def _to_tiles(t: popxl.Tensor, io_mode: str) -> popxl.Tensor:
    """``t`` copied to the tile set of the current scope when the transfers are on the IO
    tiles (the copy between the transfer and the compute)."""
    return ops.io_tile_copy(t) if io_mode != "compute" else t


def _mark_by_ref(site: Any, tensors: Mapping[popxl.Tensor, popxl.Tensor]) -> None:
    """Mark the parents (keys) of by-reference callee inputs (values) as modified."""
    for parent, inner in tensors.items():
        if getattr(inner, "by_ref", False):
            site.set_parent_input_modified(parent)


def _split_groups(store_buffers: MutableMapping[popxl.Tensor, Any],
                  ) -> dict[popxl.Tensor, popxl.ReplicaGrouping]:
    """Remove the ReplicaGrouping entries of ``store_buffers`` (in place) and return them."""
    groups = {t: g for t, g in store_buffers.items() if isinstance(g, popxl.ReplicaGrouping)}
    for t in groups:
        del store_buffers[t]
    return groups


def batch_serialise_fwd_and_grad(
    forward_graph: GraphWithNamedArgs, gradient_graph: GraphWithNamedArgs,
    named_inputs_for_grad_graph: NamedTensors, steps: int, load_handles: Loads,
    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream],
    store_buffers: MutableMapping[popxl.Tensor, Any], seed_input: popxl.Tensor | None = None,
    rows: int = 1, io_mode: str = "io",
) -> tuple[BatchSerialResult, BatchSerialResult]:
    """Batch-serialise a forward graph and its gradient graph together.

    Each activation the gradient graph reads (a ``Fwd`` input) comes from: its handle in
    ``store_buffers``; a named arg of the gradient result when it is one of
    ``named_inputs_for_grad_graph`` (the weights, under the same names); the buffer it was
    loaded from; else a new ``batch_serial_buffer`` the forward steps store it in (sharded
    over the ``ReplicaGrouping`` given for it in ``store_buffers``). ``gradient_graph.args``
    becomes those named inputs followed by its previous args (in place). Handles may hold
    tensors of either graph; tuples are converted as by ``batch_serialise``.

    Returns:
        ``(forward result, gradient result)``; the gradient result's ``graph.grad_graph_info``
        is the gradient info re-pointed at the new forward graph.

    Raises:
        ValueError: a gradient seed (``FwdGrad`` input) without a load handle.
        RuntimeError: an activation with no way to reach the gradient graph.
    """
    from xlgraph.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo

    fwd, grad = forward_graph.graph, gradient_graph.graph
    info = gradient_graph.grad_graph_info
    groups = _split_groups(store_buffers)
    _handles(load_handles, True, "load_handles")
    _handles(store_buffers, False, "store_buffers")
    named = {t: name for name, t in named_inputs_for_grad_graph.to_dict().items()}
    fwd_buffers = {t: h for t, h in store_buffers.items() if t in fwd.outputs or t in fwd.inputs}
    conns = list(zip(grad.inputs, info.expected_inputs))
    for _, c in conns:
        t = c.fwd_tensor
        if c.connection_type is not ExpectedConnectionType.Fwd or t in fwd_buffers or t in named:
            continue
        loaded = load_handles.get(t)
        if isinstance(loaded, RemoteHandle):
            fwd_buffers[t] = loaded
        else:
            group = groups.get(t)
            fwd_buffers[t] = RemoteHandle(batch_serial_buffer(t, steps, rows, group), 0, group)
    fwd_result = batch_serialise(
        forward_graph, steps, {t: h for t, h in load_handles.items() if t in fwd.inputs},
        {t: s for t, s in store_streams.items() if t in fwd.outputs or t in fwd.inputs},
        fwd_buffers, seed_input, rows, io_mode)
    grad_loads: dict[popxl.Tensor, Any] = {}
    acts: dict[str, popxl.Tensor] = {}
    for g, c in conns:
        t = c.fwd_tensor
        if c.connection_type is ExpectedConnectionType.FwdGrad:
            if g not in load_handles:
                raise ValueError(f"batch_serialise_fwd_and_grad: the gradient input {g.id} "
                                 f"(the gradient of {t.id}) needs an entry in load_handles")
            grad_loads[g] = load_handles[g]
        elif t in named:
            acts[named[t]] = g
        elif t in fwd_result.stored_buffers:
            grad_loads[g] = fwd_result.stored_buffers[t]
        else:
            raise RuntimeError(f"batch_serialise_fwd_and_grad: the activation {t.id} read by "
                               f"{g.id} is neither stored nor in named_inputs_for_grad_graph")
    gradient_graph.args = NamedTensors.from_dict({**acts, **gradient_graph.args.to_dict()})
    grad_result = batch_serialise(
        gradient_graph, steps, grad_loads,
        {t: s for t, s in store_streams.items() if t in grad.outputs or t in grad.inputs},
        {t: h for t, h in store_buffers.items() if t in grad.outputs or t in grad.inputs},
        None, rows, io_mode)
    remap = fwd_result._remap

    def moved(cs: tuple[ExpectedConnection, ...]) -> tuple[ExpectedConnection, ...]:
        return tuple(ExpectedConnection(remap.get(c.fwd_tensor, c.fwd_tensor),
                                        c.connection_type) for c in cs)

    grad_result.graph.grad_graph_info = GradGraphInfo(
        grad_result.graph.graph, fwd_result.graph.graph, moved(info.expected_inputs),
        moved(info.expected_outputs))
    return fwd_result, grad_result
