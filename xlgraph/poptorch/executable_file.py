"""PopTorch's precompilation on the simulator: ``compileAndExport``, ``save``,
``poptorch.load`` and ``loadExecutable``.

An exported "executable" is what rebuilds the compiled program: the input signature it was
compiled for, the options that shape the program, the optimiser's class and hyperparameters
and, with ``export_model=True``, the model itself as torch.export's JSON graph with its weights.
The file is an ``.npz`` archive read with ``allow_pickle=False``, and a graph that calls anything
but torch operators, or holds guard code or symbolic shapes (which torch would ``exec`` or
``eval``), is refused before torch reads it: loading one never runs code. Loading compiles
again, which takes seconds on the simulator, where PopTorch would skip Poplar's compilation.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from xlgraph.poptorch.enums import OutputMode, ReductionType
from xlgraph.poptorch.lowering import torch_to_numpy
from xlgraph.poptorch.options import Options
from xlgraph.poptorch.support import Error

__all__ = ["Exported", "check_graph", "export", "save", "read_model", "load_executable"]

_FORMAT = "xlgraph-poptorch-executable"
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool)}
_OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop", "LAMB")


# -- writing -------------------------------------------------------------------------------------
def export(executor: Any, filename: str, args: tuple[Any, ...],
           kwargs: dict[str, Any], export_model: bool) -> None:
    """Compile ``executor`` for these arguments (unless compiled) and write ``filename``."""
    if not executor.isCompiled():
        executor._compile(executor._bind(args, kwargs))
    save(executor, filename, export_model)


def save(executor: Any, filename: str, export_model: bool) -> None:
    """Write the compiled ``executor`` (for the inputs it was compiled with) to ``filename``."""
    bound = executor._compiled_args
    executor.copyWeightsToHost()
    state = {k: v.detach() for k, v in executor.model.state_dict().items()}
    # cloned: export gives a view of the call's batch unused shape symbols
    micro = {k: executor._micro_batch(k, v).clone() if isinstance(v, torch.Tensor) else v
             for k, v in bound.items()}
    meta = {"format": _FORMAT, "version": 1, "training": executor.training,
            "inputs": {k: _input_spec(k, v) for k, v in bound.items()},
            "sample": {k: _input_spec(k, v) for k, v in micro.items()},  # what was traced
            "parameters": {k: [list(v.shape), _dtype_name(v)] for k, v in state.items()},
            "options": _options_spec(executor.options),
            "optimizer": _optimizer_spec(executor) if executor.training else None,
            "model": export_model}
    arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
    if export_model:
        arrays.update(_model_arrays(executor, micro))
    with open(filename, "wb") as f:
        np.savez(f, **arrays)


def _input_spec(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, torch.Tensor):
        return {"tensor": [list(value.shape), _dtype_name(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise Error(f"compileAndExport: input {name!r} is a {type(value).__name__}; an exported "
                f"model takes tensors and None/bool/int/float/str values")


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _options_spec(opts: Options) -> dict[str, Any]:
    """The options that shape the compiled program (the rest are recorded only)."""
    return {"deviceIterations": opts.device_iterations,
            "replicationFactor": opts.replication_factor,
            "Training.gradientAccumulation": opts.Training.gradient_accumulation,
            "Training.accumulationAndReplicationReductionType":
                int(opts.Training.accumulation_and_replication_reduction_type),
            "outputMode": [int(opts.output_mode), opts.output_return_period],
            "randomSeed": getattr(opts, "random_seed", None)}


def _optimizer_spec(executor: Any) -> dict[str, Any]:
    opt = executor._optimizer
    names = {id(p): k for k, p in executor.model.named_parameters()}
    groups = [{"params": [names[id(p)] for p in g["params"]],
               **{k: _json_value(v) for k, v in g.items() if k != "params"
                  and _json_value(v) is not _SKIP}} for g in opt.param_groups]
    extras = {k: _json_value(v) for k, v in getattr(opt, "poptorch_extras", {}).items()
              if _json_value(v) is not _SKIP}
    module = "poptorch" if type(opt).__module__.startswith("xlgraph.") else "torch"
    return {"module": module, "name": type(opt).__name__, "groups": groups, "extras": extras}


_SKIP = object()


def _json_value(v: Any) -> Any:
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
        return list(v)
    return _SKIP


def _model_arrays(executor: Any, micro: dict[str, Any]) -> dict[str, np.ndarray]:
    from torch._export.serde.serialize import serialize

    from xlgraph.poptorch.capture import export_module

    program = export_module(executor._traced, (), micro)
    if program.constants:
        raise Error(f"compileAndExport(export_model=True): the model holds constants "
                    f"({', '.join(sorted(program.constants))}); export with export_model=False "
                    f"and use loadExecutable")
    graph = serialize(program).exported_program
    try:
        check_graph(json.loads(graph.decode()))
    except ValueError as exc:
        raise Error(f"compileAndExport(export_model=True): {exc}; export with "
                    f"export_model=False and use loadExecutable") from None
    trainable = json.dumps(list(program.graph_signature.parameters)).encode()
    arrays = {"graph": np.frombuffer(graph, np.uint8),
              "trainable": np.frombuffer(trainable, np.uint8)}
    for k, v in program.state_dict.items():
        arrays[f"weight/{k}"] = torch_to_numpy(v.detach())
    return arrays


# -- reading -------------------------------------------------------------------------------------
def _read(filename: str) -> tuple[dict[str, Any], Any]:
    try:
        archive = np.load(filename, allow_pickle=False)
        meta = json.loads(bytes(archive["meta"]).decode())
    except (OSError, ValueError, KeyError) as exc:
        raise Error(f"{filename}: not an executable exported by compileAndExport ({exc})") \
            from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT or meta.get("version") != 1:
        raise Error(f"{filename}: not an executable exported by compileAndExport")
    return meta, archive


_OPERATORS = {f"_operator.{n}" for n in (
    "getitem", "add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "neg", "eq", "ne", "lt",
    "le", "gt", "ge")}


def check_graph(graph: Any) -> None:
    """Refuse (``ValueError``) a serialised graph whose loading could run code: node targets
    other than torch operators (``torch.ops.<namespace>.<op>.<overload>``) and plain
    arithmetic, guard code (torch runs it with ``exec``) and symbolic shapes (parsed by
    ``sympy`` with ``eval``); xlgraph's graphs have static shapes and need none of them."""
    if not isinstance(graph, dict):
        raise ValueError("the graph is not a JSON object")
    if graph.get("guards_code") or graph.get("range_constraints"):
        raise ValueError("the graph has guards or symbolic shapes")

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "expr_str" in node:
                raise ValueError("the graph has symbolic shapes")
            target = node.get("target")
            if "inputs" in node and isinstance(target, str) and not _operator(target):
                raise ValueError(f"the graph calls {target[:80]!r}, not a torch operator")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(graph.get("graph_module"))


def _operator(target: str) -> bool:
    if target in _OPERATORS:
        return True
    parts = target.split(".")
    if len(parts) != 5 or parts[:2] != ["torch", "ops"] or not all(p.isidentifier() for p in parts):
        return False
    try:
        found = getattr(getattr(getattr(torch.ops, parts[2]), parts[3]), parts[4])
    except (AttributeError, RuntimeError):
        return False
    return isinstance(found, torch._ops.OpOverload)


@contextlib.contextmanager
def _malformed(filename: str) -> Iterator[None]:
    """A file whose parts do not read as compileAndExport wrote them is a ``poptorch.Error``."""
    try:
        yield
    except Error:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to rebuild is the file's fault
        raise Error(f"{filename}: a malformed executable ({type(exc).__name__}: {exc})") \
            from None


def _example_inputs(meta: dict[str, Any], filename: str, key: str = "inputs",
                    ) -> dict[str, Any]:
    out = {}
    for name, spec in meta[key].items():
        if "tensor" in spec:
            shape, dtype = spec["tensor"]
            if dtype not in _DTYPES or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise Error(f"{filename}: input {name!r} has a bad shape or dtype: {spec}")
            out[name] = torch.zeros(shape, dtype=_DTYPES[dtype])
        else:
            out[name] = spec["value"]
    return out


def _options(spec: dict[str, Any]) -> Options:
    opts = Options()
    opts.deviceIterations(spec["deviceIterations"])
    opts.replicationFactor(spec["replicationFactor"])
    opts.Training.gradientAccumulation(spec["Training.gradientAccumulation"])
    opts.Training.accumulationAndReplicationReductionType(
        ReductionType(spec["Training.accumulationAndReplicationReductionType"]))
    mode, period = spec["outputMode"]
    opts.outputMode(OutputMode(mode), period if OutputMode(mode) == OutputMode.EveryN else None)
    if spec.get("randomSeed") is not None:
        opts.randomSeed(spec["randomSeed"])
    return opts


def _optimizer(spec: dict[str, Any], model: torch.nn.Module) -> torch.optim.Optimizer:
    from xlgraph.poptorch import optim as pt_optim

    if spec["name"] not in _OPTIMIZERS or spec["module"] not in ("torch", "poptorch"):
        raise Error(f"unknown optimiser {spec['module']}.{spec['name']} in the executable")
    cls = getattr(pt_optim if spec["module"] == "poptorch" else torch.optim, spec["name"])
    params = dict(model.named_parameters())

    def value(v: Any) -> Any:
        return _DTYPES[v["dtype"]] if isinstance(v, dict) else v

    groups = [{k: ([params[n] for n in v] if k == "params" else value(v)) for k, v in g.items()}
              for g in spec["groups"]]
    extras = {k: value(v) for k, v in spec["extras"].items()}
    if spec["module"] == "poptorch":
        extras.setdefault("lr", groups[0]["lr"])
    return cls(groups, **extras)


class Exported(NamedTuple):
    """What ``poptorch.load`` wraps: the model, options, optimiser, kind and the inputs to
    compile for."""

    model: torch.nn.Module
    options: Options
    optimizer: torch.optim.Optimizer | None
    training: bool
    inputs: dict[str, Any]


def read_model(filename: str, edit_opts_fn: Callable[[Options], Any] | None = None,
               ) -> Exported:
    """The model ``compileAndExport`` saved in ``filename`` with what wraps it; the options
    go through ``edit_opts_fn(opts)`` when given."""
    from torch._export.serde.serialize import SerializedArtifact, deserialize

    meta, archive = _read(filename)
    if not meta.get("model"):
        raise Error(f"{filename} was exported with export_model=False: wrap the model again "
                    f"and call loadExecutable({filename!r})")
    with _malformed(filename):
        params = set(json.loads(bytes(archive["trainable"]).decode()))
        state = {}
        for key in archive.files:
            if key.startswith("weight/"):
                name, value = key[len("weight/"):], torch.from_numpy(archive[key].copy())
                state[name] = torch.nn.Parameter(value) if name in params else value
        _check_weights(state, meta, filename)
        inputs = _example_inputs(meta, filename)
        sample = _example_inputs(meta, filename, "sample")
        graph = bytes(archive["graph"])
        check_graph(json.loads(graph.decode()))
        artifact = SerializedArtifact(graph, state, {}, ((), sample))
        serde_log = logging.getLogger("torch._export.serde.serialize")
        level = serde_log.level
        serde_log.setLevel(logging.ERROR)  # it warns of the shape symbols capture left unused
        try:
            model = deserialize(artifact).module()
        finally:
            serde_log.setLevel(level)
        _keep_value_defaults(model, meta["inputs"])
        opts = _options(meta["options"])
        optimizer = _optimizer(meta["optimizer"], model) if meta["training"] else None
    if edit_opts_fn is not None:
        edit_opts_fn(opts)
    return Exported(model, opts, optimizer, bool(meta["training"]), inputs)


def _check_weights(state: dict[str, torch.Tensor], meta: dict[str, Any], filename: str) -> None:
    """Each stored weight has the shape and dtype the file's own parameter list gives it."""
    listed = meta["parameters"]
    for name, value in state.items():
        got = [list(value.shape), _dtype_name(value)]
        if name not in listed or listed[name] != got:
            want = "not in its parameter list" if name not in listed else \
                f"listed as {listed[name][1]}{listed[name][0]}"
            raise Error(f"{filename}: weight {name!r} is stored as {got[1]}{got[0]}, {want}: "
                        f"the file was changed after compileAndExport wrote it")


def _keep_value_defaults(model: torch.nn.Module, inputs: dict[str, Any]) -> None:
    """Give the loaded forward's trailing non-tensor parameters the values they were compiled
    with as defaults, so that a call that left an optional argument out still binds."""
    forward = type(model).forward  # torch.export gives each loaded module a class of its own
    signature = inspect.signature(forward)
    params = list(signature.parameters.values())
    for i in range(len(params) - 1, 0, -1):  # params[0] is self
        spec = inputs.get(params[i].name)
        if spec is None or "value" not in spec or params[i].kind not in (
                params[i].POSITIONAL_OR_KEYWORD, params[i].KEYWORD_ONLY):
            break
        params[i] = params[i].replace(default=spec["value"])
    forward.__signature__ = signature.replace(parameters=params)


def load_executable(executor: Any, filename: str) -> None:
    """``loadExecutable``: compile ``executor`` for the signature ``filename`` was exported
    with, after checking that its model has the same parameters and buffers."""
    meta, _ = _read(filename)
    with _malformed(filename):
        inputs = _example_inputs(meta, filename)
        parameters = meta["parameters"]
        if not isinstance(parameters, dict):
            raise TypeError(f"'parameters' is a {type(parameters).__name__}, not a dict")
    if bool(meta.get("training")) != executor.training:
        kinds = ("an inferenceModel", "a trainingModel")
        raise Error(f"loadExecutable: {filename} holds {kinds[bool(meta['training'])]}, this "
                    f"wrapper is {kinds[executor.training]}")
    state = {k: [list(v.shape), _dtype_name(v)] for k, v in executor.model.state_dict().items()}
    if state != parameters:
        diff = sorted(set(state) ^ set(parameters)) or sorted(
            k for k in state if state[k] != parameters[k])
        raise Error(f"loadExecutable: the model's parameters differ from the exported ones "
                    f"({', '.join(diff[:5])})")
    if executor.isCompiled():
        raise Error("loadExecutable: the model is already compiled")
    executor._compile(executor._bind((), inputs))
