"""``seed_variable``: a random-seed variable."""

from __future__ import annotations

import xlgraph as popxl
from xlgraph.addons.named_replica_grouping import fill_none_group

__all__ = ["seed_variable"]


def seed_variable(seed: int, replica_grouping: popxl.ReplicaGrouping | None = None,
                  ) -> popxl.Variable:
    """A ``uint32[2]`` seed variable named ``random_seed`` in the main graph, from
    ``popxl.create_seeds(seed)``; with a grouping of several groups, each group gets its own
    seed (drawn from the same generator)."""
    rg = fill_none_group(replica_grouping)
    data = popxl.create_seeds(seed, replicas=rg.num_groups)
    with popxl.gmg():
        return popxl.variable(data, popxl.uint32, "random_seed", replica_grouping=rg)
