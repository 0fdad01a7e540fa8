"""Capture torch code as an ATen graph, as PopTorch's dispatcher-level capture does.

A module is captured with ``torch.export`` (non-strict: ordinary Python runs, on fake tensors)
and lowered to core ATen with torch's decompositions, minus the few ops xlgraph runs as one fused
op (``KEEP``). Parameters and buffers arrive as graph inputs named by their ``state_dict`` keys,
buffers mutated in ``forward`` as extra outputs. Functions (the ``torch.compile`` backend, the op
sweep) are captured with ``make_fx`` and the same decompositions.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import DynamicOutputShapeException
from torch.fx.experimental.proxy_tensor import make_fx

from xlgraph.poptorch.half_layers import activation_precision
from xlgraph.poptorch.input_match import register_dict_types
from xlgraph.poptorch.support import Error

__all__ = ["DataDependentError", "capturing", "capturing_training", "decompositions",
           "export_module",
           "module_path", "source_line", "trace_function"]

aten = torch.ops.aten

# Ops torch would decompose that xlgraph runs as one op with its own gradient.
KEEP = (aten.nll_loss_forward, aten.nll_loss2d_forward, aten.silu, aten.logsumexp,
        aten.upsample_nearest2d, aten.hardswish, aten.softplus, aten.mish, aten.glu,
        aten.upsample_linear1d, aten.upsample_trilinear3d,  # these two: PopTorch refuses
        aten.detach)  # kept, not an alias: PopTorch stops the gradient there


class DataDependentError(Error):
    """Python control flow on a tensor's value, or a result whose shape depends on the data
    (``x[mask]``), which a captured graph cannot hold; a ``poptorch.Error``, as PopTorch
    refuses dynamic shapes."""


class DynamicShapeError(DataDependentError, DynamicOutputShapeException):
    """A result whose shape depends on the data (``x[mask]`` read, ``nonzero``): also torch's
    ``DynamicOutputShapeException``, which PopTorch's tracing raises and programs catch."""

    __eq__ = Exception.__eq__  # an exception, not the dataclass record torch's class is
    __hash__ = Exception.__hash__

    def __init__(self, message: str, func: Any = None) -> None:
        Exception.__init__(self, message)
        self.func = func

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r})"


@functools.cache
def decompositions() -> dict[Any, Callable[..., Any]]:
    """torch's core-ATen decomposition table without the ops of ``KEEP``."""
    table = dict(torch.export.default_decompositions())
    for packet in KEEP:
        for name in packet.overloads():
            table.pop(getattr(packet, name), None)
    return table


_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_frames(frames: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """The frames of ``frames`` in the user's code (not torch's, not xlgraph's)."""
    return [f for f in frames if not f.filename.startswith((_TORCH_DIR, _OWN_DIR))
            and not f.filename.startswith("<")]


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def source_line(node: torch.fx.Node) -> str:
    """``file:line: code`` in the user's program that produced ``node``."""
    frames = [traceback.FrameSummary(m.group(1), int(m.group(2)), m.group(3), line=m.group(4))
              for m in _FRAME.finditer(node.meta.get("stack_trace") or "")]
    frames = user_frames(frames)
    if not frames:
        return "<unknown source>"
    return f"{frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line.strip()}"


def module_path(node: torch.fx.Node) -> str:
    """``model.<path>`` of the module whose ``forward`` produced ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    return "model" + (f".{path}" if path else "")


def _cumulative_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """BatchNorm's forward, with ``momentum=None`` (a cumulative average of the batch
    statistics) written in tensor ops: torch computes its factor in Python from the batch
    count, which a captured graph cannot do."""
    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        if self.momentum is not None or not self.training or not self.track_running_stats:
            return original(self, x)
        self._check_input_dim(x)
        self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked.to(x.dtype)
        axes = [0] + list(range(2, x.dim()))
        stats = x.detach()
        self.running_mean.add_((stats.mean(axes) - self.running_mean) * factor)
        self.running_var.add_((stats.var(axes) - self.running_var) * factor)
        return torch.nn.functional.batch_norm(x, None, None, self.weight, self.bias, True, 0.0,
                                              self.eps)
    return forward


_CAPTURING: contextvars.ContextVar[bool] = contextvars.ContextVar("capturing", default=False)
_TRAINING: contextvars.ContextVar[bool] = contextvars.ContextVar("training", default=False)


def capturing() -> bool:
    """Whether the code running is being captured for the device (PopTorch's
    ``isRunningOnIpu()`` inside a model's ``forward``)."""
    return _CAPTURING.get()


def capturing_training() -> bool:
    """Whether the code running is being captured for a ``trainingModel``."""
    return _CAPTURING.get() and _TRAINING.get()


@contextlib.contextmanager
def _capturing(training: bool = False) -> Iterator[None]:
    """What capture changes while it runs: oneDNN off (LSTM decomposes into matmuls),
    BatchNorm's cumulative average in tensor ops, no argument validation in
    ``torch.distributions`` (its checks read tensor values), CTC loss as one op, ``one_hot``
    needing its class count, and three warnings about torch's own internals silenced.
    ``bincount`` gets PopTorch's static ``minlength`` bins, linear and convolution layers
    compute in their activation's float type (``half_layers``), and ``x[mask]`` with a uint8
    mask reads it as the boolean mask torch defines it to be (``_uint8_masks_as_bool``)."""
    from torch.distributions import Distribution
    from torch.nn.modules.batchnorm import _BatchNorm

    from xlgraph.poptorch.bincount import bincount_op
    from xlgraph.poptorch.identity import ctc_loss_op

    original, validate = _BatchNorm.forward, Distribution._validate_args
    ctc, one_hot = torch.nn.functional.ctc_loss, torch.nn.functional.one_hot
    bincount, tensor_bincount = torch.bincount, torch.Tensor.bincount
    _BatchNorm.forward = _cumulative_forward(original)
    Distribution.set_default_validate_args(False)
    torch.nn.functional.ctc_loss = ctc_loss_op
    torch.nn.functional.one_hot = _static_one_hot
    torch.bincount = torch.Tensor.bincount = bincount_op
    token, training_token = _CAPTURING.set(True), _TRAINING.set(training)
    try:
        with warnings.catch_warnings():
            # torch 2.13 warns about its own internals here (export's pytree, oneDNN's TF32 on
            # Intel GPUs); nothing a user can change
            warnings.filterwarnings("ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                    FutureWarning)
            warnings.filterwarnings("ignore", "TF32 acceleration on top of oneDNN", UserWarning)
            # nn.LSTM/GRU/RNN rebuild their private _flat_weights list from their parameters
            warnings.filterwarnings(
                "ignore", r"The tensor attributes (\S+\._flat_weights\[\d+\](, )?)+ were "
                "assigned during export", UserWarning)
            with torch.backends.mkldnn.flags(enabled=False), activation_precision(), \
                    _uint8_masks_as_bool():
                yield
    finally:
        _BatchNorm.forward = original
        Distribution.set_default_validate_args(validate)
        torch.nn.functional.ctc_loss = ctc
        torch.nn.functional.one_hot = one_hot
        torch.bincount, torch.Tensor.bincount = bincount, tensor_bincount
        _CAPTURING.reset(token)
        _TRAINING.reset(training_token)


@contextlib.contextmanager
def _uint8_masks_as_bool() -> Iterator[None]:
    """``x[mask]`` and ``x[mask] = v`` with a uint8 mask read it as ``mask.bool()`` (non-zero
    selects), as torch defines it: torch's meta function for ``aten.index`` refuses uint8, so
    a captured read could not be traced otherwise."""
    saved = {name: torch.Tensor.__dict__.get(name) for name in ("__getitem__", "__setitem__")}
    getitem, setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__
    torch.Tensor.__getitem__ = lambda self, index: getitem(self, _uint8_as_bool(index))
    torch.Tensor.__setitem__ = lambda self, index, value: setitem(self, _uint8_as_bool(index),
                                                                  value)
    try:
        yield
    finally:
        for name, method in saved.items():
            if method is None:  # torch's own, inherited from TensorBase
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, method)


def _uint8_as_bool(index: Any) -> Any:
    """``index`` (of ``x[index]``) with each uint8 tensor made a boolean mask."""
    if isinstance(index, torch.Tensor) and index.dtype == torch.uint8:
        return index.bool()
    if isinstance(index, tuple):
        return tuple(_uint8_as_bool(i) for i in index)
    return index


def _static_one_hot(tensor: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """``F.one_hot`` as PopTorch compiles it: the class count must be given.

    Raises:
        poptorch.Error: ``num_classes`` left to the data (-1), in PopTorch's words.
    """
    if num_classes < 0:
        raise Error("OneHot num classes must be specified and must be constant.")
    return _ONE_HOT(tensor, num_classes)


_ONE_HOT = torch.nn.functional.one_hot


def _module_path(model: torch.nn.Module, tb: Any) -> str:
    """The dotted path of the innermost module of ``model`` whose ``forward`` is on ``tb``."""
    names = {id(m): name for name, m in model.named_modules()}
    path = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if id(owner) in names:
            path = names[id(owner)]
        tb = tb.tb_next
    return "model" + (f".{path}" if path else "")


def _data_dependent(exc: BaseException) -> bool:
    from torch._subclasses.fake_tensor import DataDependentOutputException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return isinstance(exc, GuardOnDataDependentSymNode | DataDependentOutputException) or (
        "data-dependent" in str(exc) or "data dependent" in str(exc))


@contextlib.contextmanager
def _attributes_as_buffers(model: torch.nn.Module) -> Iterator[set[str]]:
    """Plain tensor attributes of ``model``'s modules (``self.c = torch.zeros(1)``) registered
    as non-persistent buffers while it is captured, so ``forward`` may change them in place
    (torch refuses a changed constant); yields their names. Lowering captures them as
    constants with their values now and drops the changes, as PopTorch does: only registered
    buffers keep what ``forward`` does to them."""
    moved: list[tuple[torch.nn.Module, str, torch.Tensor]] = []
    names: set[str] = set()
    for path, module in model.named_modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) \
                    and not name.startswith("_"):
                del module.__dict__[name]
                module.register_buffer(name, value, persistent=False)
                moved.append((module, name, value))
                names.add(f"{path}.{name}" if path else name)
    try:
        yield names
    finally:
        for module, name, value in moved:
            module._buffers.pop(name, None)
            module.__dict__[name] = value


def _state_slots(model: torch.nn.Module) -> list[tuple[str, str, dict[str, Any], Any]]:
    """``(kind, dotted name, owning dict, tensor)`` of each parameter and buffer of ``model``."""
    return [(kind, f"{path}.{name}" if path else name, table, value)
            for path, m in model.named_modules()
            for kind, table in (("Parameter", m._parameters), ("Buffer", m._buffers))
            for name, value in table.items() if value is not None]


def _check_state_kept(before: list[tuple[str, str, dict[str, Any], Any]]) -> None:
    """PopTorch's refusal of a ``forward`` that deletes or rebinds a parameter or buffer
    (``del self.y``, ``self.y = x``); the module gets its tensor back.

    Raises:
        poptorch.Error: naming the first one, in PopTorch's words.
    """
    for kind, dotted, table, value in before:
        name = dotted.rpartition(".")[2]
        now = table.get(name)
        if now is value:
            continue
        table[name] = value
        if now is None:
            raise Error(f"{kind} {dotted} is removed from the model when calling the forward "
                        f"method.")
        raise Error(f"{kind} {dotted} is reassigned within the model when calling the forward "
                    f"method. This is not supported. Consider using self.{name}.copy_(src) to "
                    f"copy data from a source tensor, where src is the name of the source "
                    f"tensor.")


def export_module(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                  training: bool = False) -> torch.export.ExportedProgram:
    """``model(*args, **kwargs)`` as a core-ATen ``ExportedProgram`` (shapes as given), for a
    ``trainingModel`` when ``training``.

    Raises:
        DataDependentError: ``forward`` branches on a tensor's value; names the module path
            and the user's line, and suggests ``poptorch.cond``.
    """
    # an output in a dict subclass becomes a pytree node as it is returned, so the caller gets
    # that subclass back
    hook = model.register_forward_hook(lambda module, inputs, out: register_dict_types([out]))
    before = _state_slots(model)
    traced: list[Any] = []  # the tensors export traces with, as forward starts
    # global hooks (the model's own would travel with copies and pickles made in forward)
    watches = (torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, *_: traced.append(_state_slots(model)) if m is model else None),
        torch.nn.modules.module.register_module_forward_hook(
            lambda m, *_: _check_state_kept(traced.pop()) if m is model else None))
    try:
        with _capturing(training), _attributes_as_buffers(model) as constants:
            try:
                program = torch.export.export(model, args, kwargs, strict=False)
            finally:
                for watch in watches:
                    watch.remove()
                _check_state_kept(before)
            program = program.run_decompositions(decompositions())
    except Exception as exc:
        if not _data_dependent(exc):
            raise
        frames = user_frames(traceback.extract_tb(exc.__traceback__))
        where = f"{frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}" if frames \
            else "<unknown source>"
        raise DataDependentError(
            f"data-dependent control flow at {_module_path(model, exc.__traceback__)}, {where}: "
            f"Python decides on a tensor's value, which is only known on the device. Use "
            f"poptorch.cond (or torch.where) for a branch on a tensor value.") from None
    finally:
        hook.remove()
    program.xlgraph_constants = constants  # attributes captured as constants
    return program


def trace_function(fn: Callable[..., Any], *args: Any) -> torch.fx.GraphModule:
    """``fn(*args)`` as a core-ATen fx graph (make_fx on fake tensors)."""
    with _capturing():
        return make_fx(fn, decomposition_table=decompositions(), tracing_mode="fake")(*args)
