"""An ATen graph run on xlgraph: the engine of the ``torch.compile`` backend and the op sweep.

``AtenProgram(fn, example_inputs)`` captures ``fn`` with ``make_fx`` (functionalised, core-ATen
decompositions), converts it with the conversion table into one xlgraph subgraph, and runs it
with torch tensors in and out. ``vjp`` runs the gradient of the same subgraph, built by xlgraph's
autodiff (so a backward pass needs no conversion of ATen's backward ops): the forward is
recomputed from the saved inputs and the same random seed. An in-place update of an input
(BatchNorm's running statistics) is written back to that input after the forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from xlgraph import ops
from xlgraph.ir import Ir
from xlgraph.poptorch.capture import trace_function
from xlgraph.poptorch.convert import Context, SeedInput, convert_graph
from xlgraph.poptorch.util import torch_to_numpy, xlgraph_dtype
from xlgraph.runtime import Session
from xlgraph.streams import d2h_stream, h2d_stream
from xlgraph.tensor import Tensor, graph_input, graph_output
from xlgraph.training import SEED_SPEC
from xlgraph.transforms import grad_of_call

__all__ = ["AtenProgram"]


@dataclass
class _Built:
    session: Session
    inputs: list[Any]
    seed: Any
    cotangents: list[Any]
    outputs: list[Any]
    grads: list[Any]


def _functional(fn: Callable[..., Any]) -> Callable[..., Any]:
    return torch.func.functionalize(fn, remove="mutations")


class AtenProgram:
    """``fn`` captured for the shapes and dtypes of ``example_inputs``, run on xlgraph.

    Args:
        fn: torch code (a function or an fx ``GraphModule``) taking tensors.
        example_inputs: tensors (real or fake) fixing the input signature.
        training: random ops draw fresh values per call (else they raise).
    """

    def __init__(self, fn: Callable[..., Any], example_inputs: Sequence[torch.Tensor],
                 training: bool = True) -> None:
        self.gm: torch.fx.GraphModule = trace_function(_functional(fn), *example_inputs)
        self.specs = [(tuple(t.shape), t.dtype) for t in example_inputs]
        given = getattr(fn, "graph", None)  # a GraphModule (dynamo's) names its inputs
        names = [_user_name(n.name) for n in given.nodes if n.op == "placeholder"] \
            if given else []
        self.input_names = names if len(names) == len(self.specs) else \
            [f"x{i}" for i in range(len(self.specs))]
        self.training = training
        out_node = self.gm.graph.output_node()
        self._flat, self.out_spec = pytree.tree_flatten(out_node.args[0])
        self._mutated: list[int] = []
        self._forward: _Built | None = None
        self._backward: dict[tuple[int, ...], _Built] = {}
        self.uses_seed = False

    def _input_mutations(self, ctx: Context) -> dict[int, Tensor]:
        """``{input index: new value}`` of inputs updated in place (``copy_``, ``add_``, or
        ``native_batch_norm``'s running statistics)."""
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        return {placeholders.index(n): v for n, v in ctx.mutations.items() if n in placeholders}

    # -- building ----------------------------------------------------------------------------
    def _build(self, wrt: tuple[int, ...] | None) -> _Built:
        ir = Ir()
        with ir.main_graph:
            streams = [h2d_stream(s, xlgraph_dtype(d), f"input{i}")
                       for i, (s, d) in enumerate(self.specs)]
            seed_stream = h2d_stream(SEED_SPEC.shape, SEED_SPEC.dtype, "seed")
        sub = ir.create_empty_graph("aten_forward")
        seeds = SeedInput()
        with sub:
            inputs = [graph_input(s, xlgraph_dtype(d), f"x{i}")
                      for i, (s, d) in enumerate(self.specs)]
            ctx = Context(self.training, seeds)
            _, env = convert_graph(self.gm, inputs, ctx, "the graph")
            values = [env[n] if isinstance(n, torch.fx.Node) else n for n in self._flat]
            mutations = self._input_mutations(ctx)
            self._mutated = list(mutations)
            values += list(mutations.values())
            returned = [v for v in values if isinstance(v, Tensor)]
            for t in returned:
                graph_output(t)
        self.uses_seed = seeds.input is not None
        with ir.main_graph:
            loaded = [ops.host_load(s) for s in streams]
            bound = dict(zip(inputs, loaded))
            if seeds.input is not None:
                bound[seeds.input] = ops.host_load(seed_stream)
            info = ops.call_with_info(sub, inputs_dict=bound)
            results = dict(zip(returned, info.outputs))
            outputs = [_store(results[v], f"output{i}") if isinstance(v, Tensor) else v
                       for i, v in enumerate(values)]
            cotangents, grads = [], []
            if wrt is not None:
                floats = [t for t in returned[: len(self._flat)] if t.dtype.is_floating_point]
                cot_streams = [h2d_stream(t.shape, t.dtype, f"cotangent{i}")
                               for i, t in enumerate(floats)]
                seeds_ = {results[t]: ops.host_load(s) for t, s in zip(floats, cot_streams)}
                gradients = grad_of_call(info, seeds=seeds_, wrt=[loaded[i] for i in wrt])
                cotangents = [(t, s) for t, s in zip(floats, cot_streams)]
                grads = [_store(gradients[loaded[i]], f"grad{i}") for i in wrt]
        session = Session(ir)
        return _Built(session, streams, seed_stream if seeds.input is not None else None,
                      cotangents, outputs, grads)

    def prepare(self) -> None:
        """Convert and compile the forward now (conversion errors surface here)."""
        if self._forward is None:
            self._forward = self._build(None)

    # -- running -----------------------------------------------------------------------------
    def _feeds(self, built: _Built, inputs: Sequence[torch.Tensor], seed: Any) -> dict[Any, Any]:
        feeds = {s: torch_to_numpy(t, f"input {i} ({name!r})")
                 for i, (s, t, name) in enumerate(zip(built.inputs, inputs, self.input_names))}
        if built.seed is not None:
            feeds[built.seed] = seed
        return feeds

    def new_seed(self) -> np.ndarray:
        """A fresh seed from torch's generator (so ``torch.manual_seed`` governs dropout)."""
        return torch.randint(0, 2**31 - 1, (2,), dtype=torch.int64).numpy().astype(np.uint32)

    def __call__(self, *inputs: torch.Tensor, seed: Any = None) -> list[Any]:
        """The flattened outputs of ``fn(*inputs)``; in-place input updates are applied."""
        self.prepare()
        built = self._forward
        with built.session:
            out = built.session.run(self._feeds(built, inputs, seed))
        values = [_value(out, v, node) for v, node in zip(built.outputs, self._flat)]
        with torch.no_grad():
            for i, stored in zip(self._mutated, built.outputs[len(self._flat):]):
                inputs[i].copy_(torch.from_numpy(np.array(out[stored])))
        return values

    def vjp(self, inputs: Sequence[torch.Tensor], cotangents: Sequence[Any],
            wrt: Sequence[int], seed: Any = None) -> list[torch.Tensor]:
        """The gradients of ``sum(output * cotangent)`` with respect to ``inputs[i]``, i in wrt.

        ``cotangents`` holds one entry per output (None for outputs torch gives no gradient).
        """
        key = tuple(wrt)
        if key not in self._backward:
            self._backward[key] = self._build(key)
        built = self._backward[key]
        feeds = self._feeds(built, inputs, seed)
        floats = iter(c for c, node in zip(cotangents, self._flat) if isinstance(
            node, torch.fx.Node) and node.meta["val"].dtype.is_floating_point)
        for (t, stream), c in zip(built.cotangents, floats):
            feeds[stream] = torch_to_numpy(c, "a gradient of an output") if c is not None else \
                np.zeros(t.shape, t.dtype.as_numpy())
        with built.session:
            out = built.session.run(feeds)
        return [torch.from_numpy(np.array(out[s])).to(inputs[i].dtype)
                for s, i in zip(built.grads, wrt)]


def _user_name(name: str) -> str:
    """The user's name of a dynamo placeholder (dynamo calls the argument ``a`` ``l_a_``)."""
    return name[2:-1] if name.startswith("l_") and name.endswith("_") and len(name) > 3 else name


def _store(t: Tensor, name: str) -> Any:
    stream = d2h_stream(t.shape, t.dtype, name)
    ops.host_store(stream, t)
    return stream


def _value(out: dict[Any, Any], stored: Any, node: Any) -> Any:
    if not isinstance(node, torch.fx.Node):
        return node
    array = np.array(out[stored])
    return torch.from_numpy(array).to(node.meta["val"].dtype)
