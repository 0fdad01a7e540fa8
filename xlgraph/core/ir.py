"""The Ir: owner of the main graph, subgraphs and streams."""

from __future__ import annotations

import inspect
import itertools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xlgraph.core import instances
from xlgraph.core.by_ref import is_by_ref_annotation
from xlgraph.core.collector import collector_paused
from xlgraph.core.dispatch import provided
from xlgraph.core.graph import Graph
from xlgraph.core.tensor import Tensor, TensorSpec, graph_input, graph_output
from xlgraph.errors import whole_number
from xlgraph.options import PbIr, SessionOptions
from xlgraph.replica_grouping import ReplicaGrouping

__all__ = ["Ir"]

_ir_ids = itertools.count()


class Ir:
    """A program: a main graph plus the subgraphs it calls.

    Args:
        replication: replicas that run the program in data parallel (a positive integer), or
            ``"popdist"`` to take the replica and instance counts from ``xlgraph-run``.

    Example:
        >>> import xlgraph
        >>> ir = xlgraph.Ir()
        >>> with ir.main_graph:
        ...     w = xlgraph.variable([1.0, 2.0], name="w")
    """

    def __init__(self, replication: int | str = 1) -> None:
        """``replication``: a whole number of replicas (>= 1), or ``"popdist"`` for the job's."""
        self.id = next(_ir_ids)
        self.graphs: list[Graph] = []
        self.op_ids = itertools.count(100)  # PopART's op ids: one counter per Ir, from 100
        self._graph_names: dict[str, int] = {}
        self.main_graph = Graph(self, "main", is_main=True)
        self.graphs.append(self.main_graph)
        self.h2d_streams: list[Any] = []
        self.d2h_streams: list[Any] = []
        self.remote_buffers: list[Any] = []
        self.weight_shards: list[Any] = []  # (buffer, shard) of replica_sharded_variable
        self.num_host_transfers = 1
        self.frozen = False
        self._has_read_only_memmap = False  # PopXL's flag: a variable keeps a read-only map
        self._pb_ir = PbIr(self)
        self._popdist = replication == "popdist"
        self.instance_index = 0
        self.num_instances = 1
        if self._popdist:
            self.instance_index = instances.getInstanceIndex()
            self.num_instances = instances.getNumInstances()
            self.replication_factor = instances.getNumTotalReplicas()
        else:
            self.replication_factor = replication  # type: ignore[assignment] - checked there

    def __repr__(self) -> str:
        return f"Ir[id={self.id}]"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ir):
            raise TypeError(f"an Ir can only be compared with another Ir, not "
                            f"{type(other).__name__}")
        return self is other

    def __hash__(self) -> int:
        return id(self)

    @property
    def num_host_transfers(self) -> int:
        """Transfers of every used stream per ``Session.run``: each execution of a stream's
        host_load or host_store takes the next one, wrapping around (a Session warns when the
        ops do not execute this many times per run; PopXL does not check)."""
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        self._num_host_transfers = whole_number(value, "num_host_transfers")

    @property
    def replication_factor(self) -> int:
        """Replicas in total, over every instance. As PopXL, read from the session options:
        ``globalReplicationFactor`` under ``enableDistributedReplicatedGraphs``, else
        ``replicatedGraphCount`` (so option writes count too)."""
        opts = self._pb_ir.getSessionOptions()
        if opts.enableDistributedReplicatedGraphs:
            return whole_number(opts.globalReplicationFactor, "globalReplicationFactor")
        return whole_number(opts.replicatedGraphCount, "replicatedGraphCount")

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        if self.frozen:
            raise RuntimeError("replication_factor cannot change once a Session owns the Ir")
        self._replication_factor = whole_number(value, "replication_factor")
        self._record_replication()

    def _record_replication(self) -> None:
        """PopART's replication options, as PopXL sets them for the Ir: ``replicatedGraphCount``
        is this instance's replicas; a ``"popdist"`` Ir also sets the distributed ones."""
        total, per = self._replication_factor, self.num_instances
        local = total // per if total % per == 0 else total
        values: dict[str, Any] = {"enableReplicatedGraphs": total > 1,
                                  "replicatedGraphCount": local}
        if self._popdist:
            values.update(enableDistributedReplicatedGraphs=True,
                          globalReplicationFactor=total,
                          globalReplicaOffset=self.instance_index * local)
        self._pb_ir.getSessionOptions().record(values)

    @property
    def instance_replication_factor(self) -> int:
        """Replicas run by this instance (process)."""
        if self.replication_factor % self.num_instances:
            raise ValueError(
                f"{self.replication_factor} replicas cannot be split evenly over "
                f"{self.num_instances} instances"
            )
        return self.replication_factor // self.num_instances

    @property
    def replica_offset(self) -> int:
        """The global index of this instance's first replica."""
        return self.instance_index * self.instance_replication_factor

    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        """Groups of ``group_size`` replicas whose members are ``stride`` apart; ``group_size``
        defaults to ``replication_factor // stride`` (as PopXL)."""
        return ReplicaGrouping.from_stride(self.replication_factor, stride, group_size)

    def replica_grouping_from_assignments(self, assignment: list[int]) -> ReplicaGrouping:
        """A grouping given the group of every replica, e.g. ``[0, 0, 1, 1]``."""
        return ReplicaGrouping(self.replication_factor, assignment)

    @property
    def session_options(self) -> SessionOptions:
        """PopART session options (also ``ir._pb_ir.getSessionOptions()``, as in PopXL)."""
        return self._pb_ir.getSessionOptions()

    def __str__(self) -> str:
        """Every graph's listing, the main graph first (see ``xlgraph.listing``)."""
        return provided("format_ir")(self)  # xlgraph.core.listing

    def dot_checkpoint(self, check: str, save_dir: str | Path | None = None) -> Path | None:
        """Write DOT checkpoint ``check`` as PopXL does: ``save_dir`` (created) becomes the
        ``logDir`` option for this and every later checkpoint (the Session's ``"Final"`` one
        too); with no ``POPART_DOT_CHECKS`` variable and no ``dotChecks`` option, this first
        call switches on ``"ALL"``. Returns the main graph's file, or None (see
        ``_dot_check``)."""
        options = self.session_options
        if save_dir is not None:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
            options.logDir = str(save_dir)
        if "POPART_DOT_CHECKS" not in os.environ and not options.dotChecks:
            options.dotChecks = ["ALL"]
        return self._dot_check(check)

    def _dot_check(self, check: str) -> Path | None:
        """PopART's checkpoint ``check``: written when its upper-cased name, or ``ALL``, is in
        the ``dotChecks`` option or the ``:``-separated ``POPART_DOT_CHECKS`` (upper-cased),
        into ``<logDir>/<check>_<graph>.dot`` for each graph with ops (``<graph>``: the number
        in a subgraph's ``(n)``, else its id; the main graph's is empty), or into one
        ``<check>.dot`` when ``separateCallOpPdfs`` is off. ``check`` is data, not a path:
        characters other than letters, digits and ``_.+=-`` become ``_``."""
        options = self.session_options
        wanted = {str(c).upper() for c in options.dotChecks}
        wanted |= {c.upper() for c in os.environ.get("POPART_DOT_CHECKS", "").split(":") if c}
        if str(check).upper() not in wanted and "ALL" not in wanted:
            return None
        safe = re.sub(r"[^0-9A-Za-z_.+=-]", "_", str(check))
        folder = Path(options.logDir or ".")
        folder.mkdir(parents=True, exist_ok=True)
        if not options.separateCallOpPdfs:
            self.to_dot(folder / f"{safe}.dot")
            return folder / f"{safe}.dot"
        written = None
        for graph in self.graphs:
            if graph.ops:
                number = re.search(r"\((\d+)\)$", graph.id)
                name = "" if graph.is_main else number.group(1) if number else graph.id
                graph.to_dot(folder / f"{safe}_{name}.dot")
                written = written or folder / f"{safe}_{name}.dot"
        return written

    def to_dot(self, path: str | Path | None = None) -> str:
        """Graphviz DOT text of every graph, a cluster each, with dashed edges from call sites
        to their callees; ``path`` is handled as by ``Graph.to_dot``."""
        return provided("write_dot")(provided("ir_dot")(self), path)  # core.listing

    def _repr_mimebundle_(self, include: object = None, exclude: object = None
                          ) -> dict[str, str]:
        """Jupyter's view: the drawing (SVG, through Graphviz's ``dot``), else the listing and
        a one-line hint."""
        return provided("display_bundle")(self)  # core.listing

    def _unique_graph_name(self, base: str, suffix: bool) -> str:
        n = self._graph_names.get(base, 0)
        self._graph_names[base] = n + 1
        if suffix:
            return f"{base}_subgraph({n})"
        return base if n == 0 else f"{base}_{n}"

    def create_empty_graph(self, name: str | None = None, *, unique_suffix: bool = True
                           ) -> Graph:
        """Create a new graph with no inputs or ops."""
        self.main_graph.check_mutable()
        g = Graph(self, self._unique_graph_name(name or "graph", unique_suffix))
        self.graphs.append(g)
        return g

    @collector_paused  # builds a whole graph in one go: see xlgraph.core.collector
    def create_graph(self, fn: Callable[..., Any] | Any, *args: Any, **kwargs: Any) -> Graph:
        """Build a subgraph by calling ``fn`` (or ``module.build``) with graph inputs.

        Every Tensor or TensorSpec argument becomes a ``graph_input`` of the same spec, named after
        its parameter (``<param>_<i>`` for list elements); other arguments pass through. The return
        value (None, a Tensor, or an iterable of Tensors) becomes the graph outputs.

        Args:
            fn: a function or an ``xlgraph.Module``.
            *args: arguments bound to ``fn``'s signature.
            **kwargs: keyword arguments bound likewise.

        Returns:
            The new Graph.
        """
        from xlgraph.module import Module

        build = fn.build if isinstance(fn, Module) else fn
        target = type(fn) if isinstance(fn, Module) else fn
        qualname = getattr(target, "__qualname__", getattr(target, "__name__", "graph"))
        try:
            bound = inspect.signature(build).bind(*args, **kwargs)
        except TypeError as exc:
            raise ValueError(f"The arguments, `args` and `kwargs`, do not match the signature "
                             f"of the function `fn`. create_graph({qualname}): {exc}") from exc
        graph = self.create_empty_graph(qualname.replace(".<locals>", ""))
        try:
            with graph:
                call_args, call_kwargs = _replace_specs_with_inputs(bound)
                result = build(*call_args, **call_kwargs)
                for out in _as_outputs(result, qualname):
                    graph_output(out)
        except BaseException:
            self.graphs.remove(graph)  # a half-built graph must not add its streams to runs
            raise
        return graph

    def get_all_h2d_streams(self) -> set[Any]:
        """Every host-to-device stream of the Ir."""
        return set(self.h2d_streams)

    def get_all_d2h_streams(self) -> set[Any]:
        """Every device-to-host stream of the Ir."""
        return set(self.d2h_streams)


def _is_spec(value: Any) -> bool:
    return isinstance(value, Tensor | TensorSpec)


def _make_input(value: Any, name: str, by_ref: bool = False) -> Tensor:
    spec = value.spec if isinstance(value, Tensor) else value
    return graph_input(spec.shape, spec.dtype, name, by_ref, meta_shape=spec.meta_shape or None)


def _replace_specs_with_inputs(bound: inspect.BoundArguments) -> tuple[list[Any], dict[str, Any]]:
    params = bound.signature.parameters
    for pname, value in list(bound.arguments.items()):
        kind = params[pname].kind
        by_ref = is_by_ref_annotation(params[pname].annotation)
        if kind is inspect.Parameter.VAR_KEYWORD:
            bound.arguments[pname] = {
                k: _make_input(v, k, by_ref) if _is_spec(v) else v for k, v in value.items()
            }
        elif isinstance(value, list | tuple) and any(_is_spec(v) for v in value):
            if not all(_is_spec(v) for v in value):
                raise TypeError(f"argument {pname!r} mixes tensors and non-tensors")
            base = pname if kind is not inspect.Parameter.VAR_POSITIONAL else "args"
            made = [_make_input(v, f"{base}_{i}", by_ref) for i, v in enumerate(value)]
            bound.arguments[pname] = type(value)(made) if isinstance(value, tuple) else made
        elif _is_spec(value):
            bound.arguments[pname] = _make_input(value, pname, by_ref)
    return list(bound.args), dict(bound.kwargs)


def _as_outputs(result: Any, qualname: str) -> list[Tensor]:
    if result is None:
        return []
    if isinstance(result, Tensor):
        return [result]
    try:
        outs = list(result)
    except TypeError:
        outs = None
    if outs is None or not all(isinstance(t, Tensor) for t in outs):
        raise ValueError(
            f"create_graph({qualname}): the function must return None, a Tensor or an iterable "
            f"of Tensors, got {type(result).__name__}"
        )
    return outs
