"""Executables: the compiled plan and the reference interpreter behind one interface.

Both own the device arrays of the variables (``arrays``, one per entry of ``variables``); ``run``
updates them. ``written_variables`` are the ones a failed run may have changed: the Session
snapshots those. The compiled plan writes some variables into spare arrays instead and swaps
them in only when the run succeeds, all at once by rebinding ``state`` (so ``arrays`` may hold
other array objects after a run, and a run interrupted before that rebinding changed none of them).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from xlgraph.errors import ArgumentError
from xlgraph.ir import Ir
from xlgraph.lower.alias import plan_copies
from xlgraph.lower.backends import Backend, get_backend
from xlgraph.lower.checks import check_inplace_order
from xlgraph.lower.codegen import failing_op, generate
from xlgraph.lower.depth import check_compiled_loops, check_depth, stack_for
from xlgraph.lower.flatten import flatten
from xlgraph.lower.interpreter import Interpreter
from xlgraph.lower.liveness import liveness
from xlgraph.lower.numerics import NumericsInterpreter
from xlgraph.lower.passes import fold_constants, remove_dead, written_alias_slots
from xlgraph.lower.plan import Plan, Pool, plan_body, swap_writes
from xlgraph.lower.program import Function, Program, Step, walk
from xlgraph.lower.transfers import check_host_transfers
from xlgraph.op import Op
from xlgraph.tensor import Variable


class Executable(Protocol):
    """``run`` executes the main graph once on the device arrays and the given host arrays."""

    variables: list[Variable]
    arrays: list[np.ndarray]
    source: str
    written_variables: list[Variable]
    state: object  # rebound, in one assignment, exactly when a run commits its results
    depth: int  # graph nesting depth (see ``xlgraph.lower.depth``)

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None: ...

    def failing_op(self, exc: BaseException) -> Op | None: ...


def _device_arrays(variables: list[Variable]) -> list[np.ndarray]:
    return [np.zeros(v.shape, v.dtype.as_numpy()) for v in variables]


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


class CompiledExecutable:
    """The generated step function."""

    depth = 1

    def __init__(self, ir: Ir, backend: Backend | None = None) -> None:
        program = flatten(ir)
        pool = Pool()
        plans: dict[Program | Function, Plan] = {}
        program.steps = optimise(program.steps, program, [])
        program.functions = _used_functions(program)
        check_compiled_loops({"the main graph": program.steps,
                              **{fn.name: fn.steps for fn in program.functions}})
        for fn in program.functions:  # callees come before their callers
            fn.steps = optimise(fn.steps, program, fn.results)
            live = liveness(fn.steps, fn.params)
            plan_copies(live, fn.params)
            plans[fn] = plan_body(fn.steps, live, fn.params, fn.results, program.specs, pool, "?")
        slots = list(program.variable_slots)
        live = liveness(program.steps, slots)
        written = plan_copies(live, slots)
        plans[program] = plan = plan_body(program.steps, live, slots, [], program.specs, pool, "C")
        swaps = swap_writes(program.steps, slots, plan)
        self.variables = list(program.variable_slots.values())
        arrays = _device_arrays(self.variables)
        self.swapped = [slots.index(v) for v in sorted(swaps.values())]
        self.state = (arrays, [np.empty_like(arrays[i]) for i in self.swapped])
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self.program = program
        self.plans = plans
        self.buffers = pool.allocate()
        self.compiled = generate(program, plans, self.buffers, swaps, self.h2d, self.d2h,
                                 ir.num_host_transfers, backend)
        self.source = self.compiled.source
        self.written_variables = [program.variable_slots[s] for s in sorted(written)
                                  if s not in swaps.values()]

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        arrays, spares = self.state
        with stack_for(self.depth):  # compiled functions may call each other that deep
            self.compiled.fn(inputs, outputs, arrays, spares)
        new_arrays, new_spares = list(arrays), list(spares)
        for k, i in enumerate(self.swapped):  # the spares now hold the new values
            new_arrays[i], new_spares[k] = spares[k], arrays[i]
        self.state = (new_arrays, new_spares)  # the commit: one rebinding, all or nothing

    @property
    def arrays(self) -> list[np.ndarray]:
        return self.state[0]

    def failing_op(self, exc: BaseException) -> Op | None:
        return failing_op(self.compiled, exc)


class InterpretedExecutable:
    """The reference interpreter (``optimize=False``)."""

    source = "# optimize=False: the graph is interpreted op by op; no generated source\n"
    depth = 1
    state = None  # writes go to the variables' arrays: nothing to commit

    def __init__(self, ir: Ir, interpreter: type[Interpreter] = Interpreter) -> None:
        self.ir = ir
        self.variables = list(ir.main_graph.variables)
        self.arrays = _device_arrays(self.variables)
        self.written_variables = list(self.variables)
        self.h2d = list(ir.h2d_streams)
        self.d2h = list(ir.d2h_streams)
        self.interpreter = interpreter(ir)

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.interpreter.current_op = None
        with stack_for(self.depth):
            self.interpreter.run(
                dict(zip(self.variables, self.arrays)), dict(zip(self.h2d, inputs)),
                dict(zip(self.d2h, outputs)),
            )

    def failing_op(self, exc: BaseException) -> Op | None:
        return self.interpreter.current_op


def lower(ir: Ir, optimize: bool = True, backend: str | None = None,
          exchange: Any = None, check_numerics: bool = False,
          ) -> CompiledExecutable | InterpretedExecutable:
    """Check ``ir`` and build its executable: compiled for ``backend`` (see
    ``xlgraph.lower.backends``), interpreted when not ``optimize``, and over a replica axis
    when the Ir has several replicas (``exchange`` links instances, see ``xlgraph.dist``).
    ``check_numerics`` interprets it, stopping at the first NaN or Inf
    (``xlgraph.lower.numerics``)."""
    if ir.session_options.enableInplaceAmbiguityChecking:
        check_inplace_order(ir)
    depth = check_depth(ir)
    with stack_for(depth):
        check_host_transfers(ir)
        if check_numerics:
            if ir.replication_factor > 1:
                raise ArgumentError("check_numerics runs Irs of one replica")
            executable = InterpretedExecutable(ir, NumericsInterpreter)
        elif ir.replication_factor > 1:
            from xlgraph.lower.replicated import ReplicatedExecutable

            executable = ReplicatedExecutable(ir, exchange)
        elif optimize:
            executable = CompiledExecutable(ir, get_backend(backend))
        else:
            executable = InterpretedExecutable(ir)
    executable.depth = depth
    return executable
