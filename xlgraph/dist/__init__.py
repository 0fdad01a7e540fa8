"""Replicas over several processes (instances), popdist style.

``poprun --num-instances I --num-replicas R COMMAND...`` (``xlgraph.dist.poprun``) or
``xlgraph-run`` (``xlgraph.dist.run``) starts I copies of COMMAND through MPI's ``mpiexec``;
each builds ``Ir(replication="popdist")``, runs ``R / I`` of the replicas and joins collectives
through MPI (``xlgraph.dist.exchange``). These queries read the launcher's environment and need
no MPI. The PopXL runner and ``poprun`` give this module to programs as ``popdist``. Outside a
job it answers as one instance of one replica: not set, index 0, replica offset 0, one IPU per
replica, device 0.

Example:
    >>> from xlgraph import dist
    >>> dist.isPopdistEnvSet()
    False
"""

from __future__ import annotations

from xlgraph.core.instances import (
    IPUS_PER_REPLICA as IPUS_PER_REPLICA,
    NUM_INSTANCES as NUM_INSTANCES,  # the launcher's environment variables, for dist.run
    NUM_REPLICAS as NUM_REPLICAS,
    TIMEOUT as TIMEOUT,
    getDeviceId,
    getInstanceIndex,
    getNumInstances,
    getNumIpusPerReplica,
    getNumLocalReplicas,
    getNumTotalReplicas,
    getReplicaIndexOffset,
    isPopdistEnvSet,
)

__all__ = ["isPopdistEnvSet", "getNumInstances", "getInstanceIndex", "getNumTotalReplicas",
           "getNumLocalReplicas", "getReplicaIndexOffset", "getNumIpusPerReplica", "getDeviceId"]
