"""``pipelined_execution``: run a block of pipeline stages over ``steps`` micro-batches.

Inside ``with addons.pipelined_execution(steps) as p:``, each ``with p.stage(i), popxl.ipu(i):``
builds one stage, and stages hand tensors over with ``copy_to_ipu``. On leaving the block, its
ops become the body of a loop of ``steps`` iterations: every iteration loads its own
micro-batch (so ``ir.num_host_transfers`` counts ``steps`` transfers) and the stages run in
order. That is a valid pipeline schedule, serialised: the results are those of the overlapped
schedule (which only reorders independent work), and the ipu_model accounts each stage's
memory on its own IPU.

PopXL's public API cannot move ops into another graph, so this transform records the block's
ops through ``Graph.register_op_created_hook`` and rebuilds them from their op records
(``xlgraph.op.apply``) in the loop body: the one place where xlgraph.addons steps below the
PopXL surface.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import xlgraph as popxl
from xlgraph import ops
from xlgraph.context import op_hints
from xlgraph.op import Op, apply

__all__ = ["pipelined_execution", "Pipeline"]


class Pipeline:
    """The handle of a ``pipelined_execution`` block: ``stage(i)`` scopes stage ``i``."""

    def __init__(self, steps: int) -> None:
        if int(steps) < 1:
            raise ValueError(f"pipelined_execution needs at least one step, got {steps}")
        self.steps = int(steps)
        self.stages: list[int] = []
        self.recorded: list[Op] = []

    @contextlib.contextmanager
    def stage(self, stage: int) -> Iterator[None]:
        """Ops created inside belong to pipeline stage ``stage`` (stages go in order)."""
        if self.stages and stage < self.stages[-1]:
            raise ValueError(f"pipeline stage {stage} opened after stage {self.stages[-1]}: "
                             f"build the stages in order")
        self.stages.append(stage)
        with op_hints(pipeline_stage=stage):
            yield

    def stash_and_restore_tensor(self, t: popxl.Tensor) -> popxl.Tensor:
        """``t`` for use in a later stage. The overlapped schedule stashes it per micro-batch
        and restores it in the later stage; run serialised, the same micro-batch's tensor is
        still there, so ``t`` itself is returned."""
        return t

    def stash_and_restore_activations(self, forward_call_info: Any,
                                      grad_graph_info: Any) -> dict[popxl.Tensor, popxl.Tensor]:
        """The activations a gradient graph needs from a forward call of an earlier stage,
        as ``{gradient graph input: tensor}`` (``grad_graph_info.inputs_dict(forward_call_info)``
        with each tensor stashed and restored)."""
        return {k: self.stash_and_restore_tensor(v)
                for k, v in grad_graph_info.inputs_dict(forward_call_info).items()}


@contextlib.contextmanager
def pipelined_execution(steps: int) -> Iterator[Pipeline]:
    """Build the block's stages, then run them as a loop of ``steps`` micro-batches (see the
    module docstring). Tensors made inside the block cannot be used after it: store results
    with ``ops.host_store`` or update variables in place inside it."""
    pipeline = Pipeline(steps)
    graph = popxl.gcg()
    handle = graph.register_op_created_hook(pipeline.recorded.append)
    try:
        yield pipeline
    finally:
        graph.remove_op_created_hook(handle)
    if pipeline.recorded:
        _loop(graph, pipeline)


def _loop(graph: popxl.Graph, pipeline: Pipeline) -> None:
    recorded = pipeline.recorded
    made = {t for op in recorded for t in op.outputs}
    outside: list[popxl.Tensor] = []
    modified: set[popxl.Tensor] = set()
    for op in recorded:
        for i, t in enumerate(op.inputs):
            if t not in made and t not in outside:
                outside.append(t)
            if t not in made and _modifies(op, i):
                modified.add(t)
    body = graph.ir.create_empty_graph("pipeline")
    with body, popxl.in_sequence(True):
        inputs = {t: popxl.graph_input(t.shape, t.dtype, t.name, by_ref=t in modified,
                                       meta_shape=t.meta_shape) for t in outside}
        new = dict(inputs)
        for op in recorded:
            with op_hints(**op.hints):
                attrs = {k: set(v) if isinstance(v, set) else v for k, v in op.attrs.items()}
                outs = apply(op.defn, [new[t] for t in op.inputs], attrs)
            body.ops[-1].created_at = op.created_at  # errors point at the user's line
            new.update(zip(op.outputs, outs))
    graph.remove_ops(recorded)
    with graph:
        info = ops.repeat_with_info(body, pipeline.steps, inputs_dict={v: k for k, v in
                                                                       inputs.items()})
        for t in modified:
            info.set_parent_input_modified(t)


def _modifies(op: Op, i: int) -> bool:
    """Whether ``op`` changes its input ``i`` in place (a call site: a by-reference input of
    the callee, or one the site marked modified)."""
    if op.defn.modifies_input and i == op.defn.inplace_of:
        return True
    callee = op.attrs.get("graph")
    if isinstance(callee, popxl.Graph) and i in op.attrs.get("modified", ()):
        return True
    if isinstance(callee, popxl.Graph) and op.defn.kind == "call" and i < len(callee.inputs):
        return bool(getattr(callee.inputs[i], "by_ref", False))
    return False
