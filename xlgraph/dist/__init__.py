"""Replicas over several processes (instances), popdist style.

``xlgraph-run --num-instances I --num-replicas R COMMAND...`` (``xlgraph.dist.run``) starts I
copies of COMMAND through MPI's ``mpiexec``; each builds ``Ir(replication="popdist")``, runs
``R / I`` of the replicas and joins collectives through MPI (``xlgraph.dist.exchange``). These
queries read the launcher's environment and need no MPI themselves.

Example:
    >>> from xlgraph import dist
    >>> dist.isPopdistEnvSet()
    False
"""

from __future__ import annotations

from xlgraph.core.instances import (
    NUM_INSTANCES as NUM_INSTANCES,  # the launcher's environment variables, for dist.run
    NUM_REPLICAS as NUM_REPLICAS,
    TIMEOUT as TIMEOUT,
    getInstanceIndex,
    getNumInstances,
    getNumLocalReplicas,
    getNumTotalReplicas,
    getReplicaIndexOffset,
    isPopdistEnvSet,
)

__all__ = ["isPopdistEnvSet", "getNumInstances", "getInstanceIndex", "getNumTotalReplicas",
           "getNumLocalReplicas", "getReplicaIndexOffset"]
