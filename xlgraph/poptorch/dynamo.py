"""``torch.compile(model, backend="xlgraph")``: plain PyTorch on xlgraph, without PopTorch.

Dynamo hands each captured piece of the program to ``xlgraph_backend``; the piece is captured
at the ATen level and converted with the PopTorch frontend's table (``AtenProgram``), and runs
on an xlgraph Session. Backward runs the gradient graph xlgraph's autodiff builds from the same
converted forward (recomputing it from the saved inputs, with the same dropout seed), wrapped in
a ``torch.autograd.Function`` so torch's autograd and optimisers see ordinary tensors.

Dynamo splits the program where Python needs a value (a graph break) and runs that Python in
eager torch. A piece xlgraph cannot convert (an op outside the table, dynamic shapes) also runs
in eager torch, with one warning naming the ops.

An installed xlgraph registers the backend through the ``torch_dynamo_backends`` entry point,
so ``backend="xlgraph"`` works without importing this module, before or after it; without the
entry point (a source checkout on ``sys.path``), importing this module registers it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from xlgraph.poptorch.aten_program import AtenProgram
from xlgraph.poptorch.convert import UnsupportedOpError

__all__ = ["xlgraph_backend"]


class _Run(torch.autograd.Function):
    """One call of an ``AtenProgram``, differentiable through xlgraph's autodiff."""

    @staticmethod
    def forward(ctx: Any, program: AtenProgram, seed: Any, *inputs: torch.Tensor) -> Any:
        outputs = program(*inputs, seed=seed)
        ctx.program, ctx.seed = program, seed
        ctx.inputs = [t.detach() for t in inputs]
        ctx.mark_non_differentiable(*[o for o in outputs if not o.is_floating_point()])
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *cotangents: torch.Tensor) -> tuple[Any, ...]:
        wrt = [i for i, need in enumerate(ctx.needs_input_grad[2:]) if need]
        grads = ctx.program.vjp(ctx.inputs, list(cotangents), wrt, ctx.seed) if wrt else []
        out: list[Any] = [None] * len(ctx.inputs)
        for i, g in zip(wrt, grads):
            out[i] = g
        return (None, None, *out)


def _eager(gm: torch.fx.GraphModule, why: str) -> Callable[..., Any]:
    warnings.warn(f"torch.compile(backend='xlgraph'): a graph of {len(gm.graph.nodes)} nodes "
                  f"runs in eager torch: {why}", stacklevel=3)
    return gm.forward


class _Compiled:
    """The callable dynamo gets: on its first call (outside dynamo's tracing, on the real
    inputs) it captures and converts ``gm``; a graph xlgraph cannot convert runs eagerly."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.program: AtenProgram | None = None
        self.fallback: Callable[..., Any] | None = None

    def __call__(self, *inputs: Any) -> Any:
        if self.program is None and self.fallback is None:
            try:
                self.program = AtenProgram(self.gm, list(inputs))
                self.program.prepare()
            except UnsupportedOpError as exc:
                self.fallback = _eager(self.gm, str(exc))
        if self.fallback is not None:
            return self.fallback(*inputs)
        program = self.program
        seed = program.new_seed() if program.uses_seed else None
        outputs = _Run.apply(program, seed, *inputs)
        return pytree.tree_unflatten(list(outputs), program.out_spec)


def xlgraph_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
                    ) -> Callable[..., Any]:
    """The dynamo backend: ``gm`` runs on xlgraph (see the module docstring)."""
    if not all(isinstance(t, torch.Tensor) for t in example_inputs):
        return _eager(gm, "dynamic shapes (symbolic sizes); compile with dynamic=False")
    return _Compiled(gm)


_ENTRY_POINT = "xlgraph.poptorch.dynamo:xlgraph_backend"


def _entry_point_installed() -> bool:
    """Whether an installed xlgraph declares the ``torch_dynamo_backends`` entry point: torch
    then loads (imports) this module itself and registers ``xlgraph_backend`` after the import,
    so registering here too would make torch fail with ``duplicate name: xlgraph``."""
    from importlib.metadata import entry_points

    return any(ep.name == "xlgraph" and ep.value == _ENTRY_POINT
               for ep in entry_points(group="torch_dynamo_backends"))


def _register() -> None:
    """Make ``backend="xlgraph"`` work in every import order: leave it to torch's entry-point
    lookup when the entry point is installed, else register here (a source checkout)."""
    if _entry_point_installed():
        return
    from torch._dynamo.backends import registry

    if registry._COMPILER_FNS.get("xlgraph") is None:
        registry._COMPILER_FNS.pop("xlgraph", None)
        registry.register_backend(name="xlgraph")(xlgraph_backend)


_register()
