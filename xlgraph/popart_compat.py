"""The few PopART names PopXL programs reach through ``import popart``.

Only ``python -m xlgraph.popxl_compat`` installs this module as ``popart`` (it is not PopART and
nothing else imports it under that name): ``SessionOptions`` (PopART's option names, as
``ir._pb_ir.getSessionOptions()`` gives them), ``VariableRetrievalMode``, ``ReductionType``,
``CommGroupType`` and ``CommGroup``. Any other ``popart.X`` raises ``AttributeError`` naming
what the alias provides.
"""

from __future__ import annotations

import enum

from xlgraph.options import SessionOptions
from xlgraph.replica_grouping import CommGroup, CommGroupType

__all__ = ["SessionOptions", "VariableRetrievalMode", "ReductionType", "CommGroupType",
           "CommGroup"]


class VariableRetrievalMode(enum.Enum):
    """What ``Session.get_tensor_data`` returns for a replica-grouped variable; the values are
    PopXL's ``retrieval_mode`` strings, and ``popxl.variable`` takes either."""

    OnePerGroup = "one_per_group"
    AllReplicas = "all_replicas"


class ReductionType(enum.Enum):
    """How a loss reduces over the batch; the values are PopXL's ``reduction`` strings, and
    ``ops.nll_loss`` takes either."""

    Sum = "sum"
    Mean = "mean"
    NoReduction = "none"


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"popart.{name}: xlgraph's popart alias (python -m xlgraph.popxl_compat) provides only "
        f"{', '.join(__all__)}; the rest of PopART is not available"
    )
