"""PopTorch's API on xlgraph: ``import xlgraph.poptorch as poptorch`` runs PopTorch programs.

``trainingModel``/``inferenceModel`` trace a ``torch.nn.Module`` with ``torch.fx`` into an xlgraph
graph (one conversion table, ``xlgraph.poptorch.table``), train it with the training-step builder
of ``xlgraph.training`` and keep the module's weights in sync. ``Options``, ``DataLoader`` and
``poptorch.optim`` follow PopTorch's semantics.

Example:
    >>> import xlgraph.poptorch as poptorch
    >>> opts = poptorch.Options().deviceIterations(50)
    >>> model = poptorch.trainingModel(net_with_loss, opts, torch.optim.SGD(net.parameters(), 0.03))
    >>> preds, loss = model(images, labels)      # 50 SGD steps of batch len(images) / 50
"""

try:
    import torch  # noqa: F401 - fail early with the extra's name
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError("xlgraph.poptorch needs torch: pip install 'xlgraph[torch]'") from exc

from xlgraph.poptorch import optim
from xlgraph.poptorch.dataloader import DataLoader
from xlgraph.poptorch.executor import Error, PoplarExecutor, inferenceModel, trainingModel
from xlgraph.poptorch.identity import identity_loss
from xlgraph.poptorch.lowering import UnsupportedOpError
from xlgraph.poptorch.options import (
    AnchorMode,
    DataLoaderMode,
    Options,
    OutputMode,
    ReductionType,
)

__all__ = [
    "AnchorMode", "DataLoader", "DataLoaderMode", "Error", "Options", "OutputMode",
    "PoplarExecutor", "ReductionType", "UnsupportedOpError", "identity_loss", "inferenceModel",
    "ipuHardwareIsAvailable", "isRunningOnIpu", "optim", "setLogLevel", "trainingModel",
]


def isRunningOnIpu() -> bool:  # noqa: N802
    """False: torch code runs on the host (PopTorch returns True inside a traced model)."""
    return False


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:  # noqa: N802
    """False: xlgraph simulates the device."""
    return False


def setLogLevel(level: int | str) -> None:  # noqa: N802
    """Accepted for compatibility (xlgraph does not log)."""
