"""Executables: the compiled plan and the reference interpreter behind one interface.

With several replicas both run this instance's replicas at once over a leading replica axis
(``xlgraph.lower.replicas``); ``held_once`` lists the variables without that axis.

Both own the device arrays of the variables (``arrays``, one per entry of ``variables``); ``run``
updates them. ``changed_variables`` are the ones a run may write (the Session writes only
those back into memory maps); ``written_variables`` those a failed run may have changed: the
Session snapshots those. The compiled plan writes some variables into spare arrays instead and swaps
them in only when the run succeeds, all at once by rebinding ``state`` (so ``arrays`` may hold
other array objects after a run, and a run interrupted before that rebinding changed none of them),
and puts back the regions of variables written only in regions itself (``lower.undo``).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import numpy as np

from xlgraph.core.collector import collector_paused
from xlgraph.ir import Ir
from xlgraph.lower.alias import plan_copies
from xlgraph.lower.backends import Backend, get_backend
from xlgraph.lower.buckets import bucketer
from xlgraph.lower.checks import check_inplace_order
from xlgraph.lower.codegen import CompiledStep, failing_op, generate
from xlgraph.lower.depth import check_compiled_loops, graph_depth
from xlgraph.lower.flatten import flatten
from xlgraph.lower.interpreter import Interpreter
from xlgraph.lower.liveness import liveness
from xlgraph.lower.numerics import NumericsInterpreter
from xlgraph.lower.passes import fold_constants, remove_dead, written_alias_slots
from xlgraph.lower.plan import Plan, Pool, plan_body, swap_writes
from xlgraph.lower.program import Function, Program, Step, walk
from xlgraph.lower.replicas import ReplicaContext, one_replica, replicate
from xlgraph.lower.transfers import check_host_transfers
from xlgraph.lower.undo import logged_writes, replay
from xlgraph.lower.wide_half import widen_storage
from xlgraph.op import Op
from xlgraph.ops.fp8 import follow_scale_option
from xlgraph.ops.replicas import Exchange
from xlgraph.tensor import Variable
from xlgraph.utils import is_large_map

# Whether compiled plans hold float16 values between float32-register ops in float32
# (``xlgraph.lower.wide_half``); the tests turn it off to compare with the per-op forms.
WIDE_HALF = True


class Executable(Protocol):
    """``run`` executes the main graph once on the device arrays and the given host arrays."""

    variables: list[Variable]
    arrays: list[np.ndarray]
    source: str
    written_variables: list[Variable]
    changed_variables: set[Variable]
    state: object  # rebound, in one assignment, exactly when a run commits its results
    held_once: set[Variable]  # replicated Irs: variables without the replica axis
    one_replica: set[Variable]  # an instance of one replica: the others without it too

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None: ...

    def failing_op(self, exc: BaseException) -> Op | None: ...


def _device_arrays(variables: list[Variable], local: int | None,
                   held_once: set[Variable] = frozenset()) -> list[np.ndarray]:
    """Zeroed device arrays; with ``local`` replicas a leading axis on those not held once."""
    return [np.zeros(v.shape if local is None or v in held_once else (local, *v.shape),
                     v.dtype.as_numpy()) for v in variables]


def replica_context(ir: Ir, exchange: Exchange | None = None) -> ReplicaContext | None:
    """The replicas this instance runs, or None for an Ir of one replica."""
    if ir.replication_factor == 1:
        return None
    return ReplicaContext(ir.instance_replication_factor, ir.replication_factor,
                          ir.replica_offset, exchange)


def optimise(steps: list[Step], program: Program, needed: list[int]) -> list[Step]:
    """Fold constants, then remove dead steps (``needed`` slots are read after ``steps``)."""
    steps = fold_constants(steps, program.specs.__getitem__, written_alias_slots(steps))
    return remove_dead(steps, set(needed))


def _used_functions(program: Program) -> list[Function]:
    """The functions still called after dead-step removal, callees first."""
    used: set[int] = set()
    stack = [program.steps]
    while stack:
        for s in walk(stack.pop()):
            if s.kind == "func" and id(s.func) not in used:
                used.add(id(s.func))
                stack.append(s.func.steps)
    return [fn for fn in program.functions if id(fn) in used]


def _changed_variables(ir: Ir, variables: list[Variable]) -> set[Variable]:
    """The variables a run of ``ir`` writes, directly or through aliases (as the compiled plan
    finds them). Only memory-mapped variables need the answer: without any, all of them."""
    if all(v.host_memmap is None for v in variables):
        return set(variables)
    program = flatten(ir)
    slots = list(program.variable_slots)
    written = plan_copies(liveness(program.steps, slots), slots)
    return {program.variable_slots[s] for s in written}


class CompiledExecutable:
    """The generated step function."""

    def __init__(self, ir: Ir, backend: Backend | None = None,
                 ctx: ReplicaContext | None = None, defer: bool = False,
                 fuse: bool = False, wide_half: bool = True) -> None:
        program = flatten(ir)
        self.ctx = ctx
        # an instance of one replica holds every value as a one-replica Ir does (no axis)
        axis = ctx is not None and ctx.local > 1
        varying = set() if ctx is None else (replicate if axis else one_replica)(program, ctx)
        pool = Pool()
        plans: dict[Program | Function, Plan] = {}
        program.steps = optimise(program.steps, program, [])
        program.functions = _used_functions(program)
        bucket = bucketer(program, ctx, varying, axis=axis, backend=backend)
        if bucket is not None:
            program.steps = bucket(program.steps)
        check_compiled_loops({"the main graph": program.steps,
                              **{fn.name: fn.steps for fn in program.functions}})
        wide_half = wide_half and ctx is None and WIDE_HALF
        if wide_half:
            program.steps = widen_storage(program.steps, program, [])
        for fn in program.functions:  # callees come before their callers
            fn.steps = optimise(fn.steps, program, fn.results)
            if bucket is not None:
                fn.steps = bucket(fn.steps)
            if wide_half:
                fn.steps = widen_storage(fn.steps, program, fn.results)
            live = liveness(fn.steps, fn.params)
            plan_copies(live, fn.params)
            plans[fn] = plan_body(fn.steps, live, fn.params, fn.results, program.specs, pool, "?")
        slots = list(program.variable_slots)
        live = liveness(program.steps, slots)
        written = plan_copies(live, slots)
        self.changed_variables = {program.variable_slots[s] for s in written}
        plans[program] = plan = plan_body(program.steps, live, slots, [], program.specs, pool, "C")
        # a large memmapped variable gets no spare array (the Session snapshots it on disk)
        spared = [s for s in slots if not is_large_map(program.variable_slots[s].host_memmap)]
        swaps = swap_writes(program.steps, spared, plan)
        # variables written only in regions save those instead of a snapshot (one replica)
        logged = set() if ctx is not None else logged_writes(
            program.steps, written - set(swaps.values()), plan)
        self.variables = list(program.variable_slots.values())
        self.held_once = {v for s, v in program.variable_slots.items() if s not in varying}
        arrays = _device_arrays(self.variables, ctx.local if axis else None, self.held_once)
        self.one_replica = set() if axis or ctx is None else {
            v for v in self.variables if v not in self.held_once and not getattr(v, "remote", None)}
        position = {slot: i for i, slot in enumerate(slots)}
        self.swapped = [position[v] for v in sorted(swaps.values())]
        self.state = (arrays, [np.empty_like(arrays[i]) for i in self.swapped])
        self._flip: dict[int, tuple[Any, Any]] = {}  # id(state) -> (state, state after a run)
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self.program = program
        self.plans = plans
        self.buffers = pool.allocate()
        self._generate = functools.partial(generate, program, plans, self.buffers, swaps,
                                           self.h2d, self.d2h, ir.num_host_transfers,
                                           arrays=arrays, fuse=fuse, logged=logged)
        self.compiled = self._generate(None if defer else backend)
        self.source = self.compiled.source
        # With ``defer``, the backend whose kernels are still to compile (None when none of the
        # steps has a loop form): a Session's kernel thread compiles them and calls ``use``.
        self.deferred = backend if defer and self.compiled.loops else None
        unsaved = set(swaps.values()) | {s.modifies for s in logged}
        self.written_variables = [program.variable_slots[s] for s in sorted(written)
                                  if s not in unsaved]

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        state = self.state
        compiled = self.compiled
        try:
            compiled.fn(inputs, outputs, *state)
        except BaseException:
            if compiled.undo:  # put back the regions the run overwrote
                replay(compiled.undo)
            raise
        if compiled.undo:
            compiled.undo.clear()
        self.state = self._next(state)  # the commit: one rebinding, all or nothing

    def _next(self, state: tuple[list[np.ndarray], list[np.ndarray]],
              ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The state after a run from ``state``: the spares hold the new values. Swapping
        twice gives the first state back, so the two states are made once and alternate."""
        found = self._flip.get(id(state))
        if found is None or found[0] is not state:
            arrays, spares = state
            new_arrays, new_spares = list(arrays), list(spares)
            for k, i in enumerate(self.swapped):
                new_arrays[i], new_spares[k] = spares[k], arrays[i]
            following = (new_arrays, new_spares)
            self._flip = {id(state): (state, following), id(following): (following, state)}
            return following
        return found[1]

    def generate(self, backend: Backend | None) -> CompiledStep:
        """The step function of the same plan (same buffers and variables) for ``backend``
        (compiling its kernels now); ``use`` puts it in place."""
        return self._generate(backend)

    def use(self, compiled: CompiledStep) -> None:
        """Run ``compiled`` from the next run on (the caller holds the Session's lock, so no
        run is in flight)."""
        self.compiled, self.source, self.deferred = compiled, compiled.source, None

    @property
    def arrays(self) -> list[np.ndarray]:
        return self.state[0]

    def failing_op(self, exc: BaseException) -> Op | None:
        return failing_op(self.compiled, exc)


class InterpretedExecutable:
    """The reference interpreter (``optimize=False``)."""

    source = "# optimize=False: the graph is interpreted op by op; no generated source\n"
    state = None  # writes go to the variables' arrays: nothing to commit
    deferred = None  # no kernels to compile

    def __init__(self, ir: Ir, interpreter: type[Interpreter] = Interpreter,
                 ctx: ReplicaContext | None = None) -> None:
        self.ir = ir
        self.variables = list(ir.main_graph.variables)
        self.held_once: set[Variable] = set()
        self.one_replica: set[Variable] = set()
        self.arrays = _device_arrays(self.variables, None if ctx is None else ctx.local)
        self.written_variables = list(self.variables)
        self.changed_variables = _changed_variables(ir, self.variables)
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self.interpreter = interpreter(ir, ctx)

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.interpreter.current_op = None
        self.interpreter.run(dict(zip(self.variables, self.arrays)), dict(zip(self.h2d, inputs)),
                             dict(zip(self.d2h, outputs)))

    def failing_op(self, exc: BaseException) -> Op | None:
        return self.interpreter.current_op


@collector_paused  # millions of long-lived objects: see xlgraph.core.collector
def lower(ir: Ir, optimize: bool = True, backend: str | None = None,
          exchange: Any = None, check_numerics: bool = False, defer: bool = False,
          fuse: bool = False) -> CompiledExecutable | InterpretedExecutable:
    """Check ``ir`` and build its executable: compiled for ``backend`` (see
    ``xlgraph.lower.backends``), interpreted when not ``optimize``, and over a replica axis
    when the Ir has several replicas (``exchange`` links instances, see ``xlgraph.dist``).
    ``check_numerics`` interprets it, stopping at the first NaN or Inf
    (``xlgraph.lower.numerics``). Under ``enableFloatingPointChecks`` the compiled plan keeps
    to numpy's kernels, whose floating-point traps the Session turns on: compiled loops
    report no IEEE flags. With ``defer`` the compiled plan starts on numpy's kernels and leaves
    the backend's to compile later (``CompiledExecutable.deferred``). ``fuse`` runs
    consecutive compiled calls as one compiled function each (``xlgraph.lower.codegen``)."""
    if ir.session_options.enableInplaceAmbiguityChecking:
        check_inplace_order(ir)
    graph_depth(ir)  # refuses graphs that call each other in a cycle
    ir._dot_check("Final")  # PopART's own checkpoint as a Session prepares the Ir, if enabled
    follow_scale_option(ir)
    ctx = replica_context(ir, exchange)
    check_host_transfers(ir)
    if check_numerics:
        return InterpretedExecutable(ir, NumericsInterpreter, ctx)
    if optimize:
        chosen = get_backend(backend)
        if ir.session_options.enableFloatingPointChecks:
            chosen = None
        return CompiledExecutable(ir, chosen, ctx, defer, fuse,
                                  wide_half=not ir.session_options.enableFloatingPointChecks)
    return InterpretedExecutable(ir, ctx=ctx)
