"""Batch serialisation: run a graph over ``steps`` micro-batches in one call, each step
loading its inputs from host streams or remote-buffer entries and storing its outputs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import xlgraph as popxl
from xlgraph import ops
from xlgraph.addons.graph import GraphWithNamedArgs
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.utils import suffix_graph_name
from xlgraph.transforms import ExpectedConnectionType

__all__ = ["RemoteHandle", "BatchSerialResult", "batch_serial_buffer", "batch_serialise",
           "batch_serialise_fwd_and_grad"]

Loads = Mapping[popxl.Tensor, "popxl.HostToDeviceStream | RemoteHandle"]


@dataclass
class RemoteHandle:
    """Entries of ``buffer`` used by a batch-serialised graph: step ``i`` of row ``r`` uses
    entry ``R * steps + i`` where the row ``R`` is ``r + row_offset`` (an int), ``0`` (None:
    always the first row) or ``row_offset(r)`` (a callable on the int32 row tensor).
    ``shard_group``: the replicas a sharded buffer's entries are split over."""

    buffer: popxl.RemoteBuffer
    row_offset: int | Callable[[popxl.Tensor], popxl.Tensor] | None = 0
    shard_group: popxl.ReplicaGrouping | None = None

    def entry(self, row: popxl.Tensor, step: popxl.Tensor, steps: int) -> popxl.Tensor:
        """The entry index for ``row`` and ``step`` (int32 tensors of the current graph)."""
        if self.row_offset is None:
            return step
        mapped = self.row_offset(row) if callable(self.row_offset) else row + self.row_offset
        return mapped * steps + step


@dataclass
class BatchSerialResult:
    """A batch-serialised graph and the buffers its outputs were stored in."""

    graph: GraphWithNamedArgs
    stored_buffers: dict[popxl.Tensor, RemoteHandle] = field(default_factory=dict)


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
                             f"{' or '.join(where)} of graph {graph.name!r}")


def batch_serialise(graph: GraphWithNamedArgs, steps: int, load_handles: Loads,
                    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream],
                    store_buffers: Mapping[popxl.Tensor, RemoteHandle],
                    seed_input: popxl.Tensor | None = None, rows: int = 1,
                    io_mode: str = "io") -> BatchSerialResult:
    """A graph that runs ``graph`` ``steps`` times.

    Step ``i`` loads each input in ``load_handles`` from its stream (one transfer a step) or
    from entry ``handle.entry(row, i)`` of its buffer, runs ``graph``, and stores each
    output in ``store_streams`` / ``store_buffers`` likewise. The other inputs of ``graph``
    are inputs of the result (its named args keep their names; inputs passed by reference,
    such as accumulators, stay so). With ``seed_input``, each step gets its own seed split
    from the one passed in. The result takes an int32 ``row`` input first when ``rows > 1``.
    ``io_mode`` places the transfers and does not change values: ``"compute"`` loads and
    stores on the compute tiles; ``"io"`` on the IO tiles, with an ``io_tile_copy`` to the
    compute tiles after each load and to the IO tiles before each store; ``"io_overlapped"``
    places them as ``"io"`` (with fewer than 2 steps it is ``"io"``, as in popxl-addons): the
    overlap of one step's transfers with the previous step's compute is a schedule the
    simulator and its cycle model do not represent.
    """
    inner = graph.graph
    if io_mode not in ("io", "compute", "io_overlapped"):
        raise ValueError(f"io_mode must be 'io', 'compute' or 'io_overlapped', got {io_mode!r}")
    if io_mode == "io_overlapped" and steps < 2:
        io_mode = "io"
    _check(inner, load_handles, "load_handles", "inputs")
    _check(inner, [*store_streams, *store_buffers], "the stores", "outputs", "inputs")
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
        for t, stream in store_streams.items():
            with _tiles(io_mode):
                ops.host_store(stream, _to_tiles(info.graph_to_parent(t), io_mode))
        for t, handle in store_buffers.items():
            with _tiles(io_mode):
                ops.remote_store(handle.buffer, handle.entry(row, step, steps),
                                 _to_tiles(info.graph_to_parent(t), io_mode))
        popxl.graph_output(step + 1)
        popxl.graph_output(row)
        if seed is not None:
            popxl.graph_output(seed)
    outer = ir.create_empty_graph(suffix_graph_name(inner.name, "batch_serial"))
    with outer:
        row_in = popxl.graph_input((), popxl.int32, "row") if rows > 1 else \
            popxl.constant(0, popxl.int32, "row")
        carried = [popxl.constant(0, popxl.int32, "step"), row_in]
        if seed_input is not None:
            outer_seed = _like(seed_input)
            carried.append(outer_seed)
        outer_ins = {t: _like(t) for t in kept}
        site = ops.repeat_with_info(body, steps, *carried,
                                    inputs_dict={passed[t]: outer_ins[t] for t in kept})
        _mark_by_ref(site, {outer_ins[t]: passed[t] for t in kept})
    mapping = {t: outer_ins[t] for t in kept}
    if seed_input is not None:
        mapping[seed_input] = outer_seed
    return BatchSerialResult(GraphWithNamedArgs(outer, graph.args.remap(mapping)),
                             dict(store_buffers))


def _like(t: popxl.Tensor) -> popxl.Tensor:
    return popxl.graph_input(t.shape, t.dtype, t.name, by_ref=getattr(t, "by_ref", False),
                             meta_shape=t.meta_shape)


def _load(handle: Any, row: popxl.Tensor, step: popxl.Tensor, steps: int, t: popxl.Tensor,
          io_mode: str) -> popxl.Tensor:
    with _tiles(io_mode):
        if isinstance(handle, RemoteHandle):
            loaded = ops.remote_load(handle.buffer, handle.entry(row, step, steps), t.name)
        elif isinstance(handle, popxl.HostToDeviceStream):
            loaded = ops.host_load(handle, t.name)
        else:
            raise TypeError(f"batch_serialise: load handle for {t.id} must be a "
                            f"HostToDeviceStream or a RemoteHandle, got {type(handle).__name__}")
    if loaded.shape != t.shape and loaded.nelms == t.nelms:
        loaded = loaded.reshape(t.shape)
    return _to_tiles(loaded, io_mode)  # to the compute tiles


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


def batch_serialise_fwd_and_grad(
    forward_graph: GraphWithNamedArgs, gradient_graph: GraphWithNamedArgs,
    named_inputs_for_grad_graph: NamedTensors, steps: int, load_handles: Loads,
    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream],
    store_buffers: Mapping[popxl.Tensor, RemoteHandle], seed_input: popxl.Tensor | None = None,
    rows: int = 1, io_mode: str = "io",
) -> tuple[BatchSerialResult, BatchSerialResult]:
    """Batch-serialise a forward graph and its gradient graph together.

    The activations the gradient graph reads are stored by the forward steps in new remote
    buffers (one entry per step) and loaded back by the gradient steps, except for the
    forward inputs named in ``named_inputs_for_grad_graph`` (the weights), which become named
    args of the gradient result. ``load_handles``, ``store_streams`` and ``store_buffers``
    may hold tensors of either graph.

    Returns:
        ``(forward result, gradient result)``.
    """
    fwd, grad = forward_graph.graph, gradient_graph.graph
    info = gradient_graph.grad_graph_info
    shared = set(named_inputs_for_grad_graph.tensors)
    # activations (and stream-fed inputs: a stream cannot be read twice) go through buffers
    acts = [c.fwd_tensor for c in info.expected_inputs
            if c.connection_type is ExpectedConnectionType.Fwd and c.fwd_tensor not in shared
            and not isinstance(load_handles.get(c.fwd_tensor), RemoteHandle)]
    fwd_loads = {t: h for t, h in load_handles.items() if t in fwd.inputs}
    fwd_buffers = {t: h for t, h in store_buffers.items() if t in fwd.outputs}
    # an input read from a stream is stored as the step loads it
    grad_loads = {t: h for t, h in load_handles.items() if t in grad.inputs}
    for t in acts:
        handle = RemoteHandle(batch_serial_buffer(t, steps, rows))
        fwd_buffers[t] = handle
    fwd_result = batch_serialise(
        forward_graph, steps, fwd_loads,
        {t: s for t, s in store_streams.items() if t in fwd.outputs}, fwd_buffers, seed_input,
        rows, io_mode)
    by_fwd = {c.fwd_tensor: grad.inputs[i] for i, c in enumerate(info.expected_inputs)
              if c.connection_type is ExpectedConnectionType.Fwd}
    for t in acts:
        grad_loads[by_fwd[t]] = fwd_buffers[t]
    for t, handle in load_handles.items():  # buffer-fed forward inputs are loaded again
        if t in by_fwd and t in fwd.inputs and isinstance(handle, RemoteHandle):
            grad_loads[by_fwd[t]] = handle
    names = {t: name for name, t in named_inputs_for_grad_graph.to_dict().items()}
    grad_args = NamedTensors.from_dict({
        **{names[t]: g for t, g in by_fwd.items() if t in shared},
        **gradient_graph.args.to_dict()})
    grad_result = batch_serialise(
        GraphWithNamedArgs(grad, grad_args, info), steps, grad_loads,
        {t: s for t, s in store_streams.items() if t in grad.outputs},
        {t: h for t, h in store_buffers.items() if t in grad.outputs}, None, rows, io_mode)
    fwd_result.stored_buffers = fwd_buffers
    return fwd_result, grad_result
