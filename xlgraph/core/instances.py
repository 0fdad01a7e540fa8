"""The popdist environment that ``xlgraph-run`` sets for each instance (process) of a job.

``Ir(replication="popdist")`` reads it here; ``xlgraph.dist`` re-exports these queries under
popdist's names. They read the environment and need no MPI.
"""

from __future__ import annotations

import os

from xlgraph.errors import whole_number

__all__ = ["isPopdistEnvSet", "getNumInstances", "getInstanceIndex", "getNumTotalReplicas",
           "getNumLocalReplicas", "getReplicaIndexOffset", "getNumIpusPerReplica", "getDeviceId",
           "int_env"]

NUM_INSTANCES = "XLGRAPH_NUM_INSTANCES"
NUM_REPLICAS = "XLGRAPH_NUM_REPLICAS"
TIMEOUT = "XLGRAPH_DIST_TIMEOUT"
IPUS_PER_REPLICA = "XLGRAPH_IPUS_PER_REPLICA"


def int_env(name: str, default: int) -> int:
    """The integer in environment variable ``name``, or ``default`` when it is unset."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def isPopdistEnvSet() -> bool:  # noqa: N802 - popdist's names
    """Whether this process was started by ``poprun`` or ``xlgraph-run``."""
    return NUM_INSTANCES in os.environ and NUM_REPLICAS in os.environ


def getNumInstances() -> int:  # noqa: N802
    """Instances (processes) in the job; 1 outside ``poprun`` and ``xlgraph-run``."""
    return int_env(NUM_INSTANCES, 1)


def getInstanceIndex() -> int:  # noqa: N802
    """This instance's index, 0 to ``getNumInstances() - 1`` (MPI's rank)."""
    return int_env("PMI_RANK", int_env("OMPI_COMM_WORLD_RANK", 0)) if isPopdistEnvSet() else 0


def getNumTotalReplicas() -> int:  # noqa: N802
    """Replicas over all instances; 1 outside ``poprun`` and ``xlgraph-run``."""
    return int_env(NUM_REPLICAS, 1)


def getNumLocalReplicas() -> int:  # noqa: N802
    """Replicas run by this instance."""
    return getNumTotalReplicas() // getNumInstances()


def getReplicaIndexOffset() -> int:  # noqa: N802
    """The global index of this instance's first replica."""
    return getInstanceIndex() * getNumLocalReplicas()


def getNumIpusPerReplica() -> int:  # noqa: N802
    """IPUs each replica spans (``poprun --ipus-per-replica``); 1 when not given."""
    return int_env(IPUS_PER_REPLICA, 1)


def getDeviceId(ipus_per_replica: int | None = None) -> int:  # noqa: N802
    """The id of the device this instance runs on: each instance has its own simulated device,
    numbered by the instance index (0 outside a job). ``ipus_per_replica`` (default:
    ``getNumIpusPerReplica()``) is checked and does not change the id."""
    if ipus_per_replica is not None:
        whole_number(ipus_per_replica, "ipus_per_replica")
    return getInstanceIndex()
