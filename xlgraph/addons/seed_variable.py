"""``seed_variable``: a random-seed variable, one seed per replica by default."""

from __future__ import annotations

import xlgraph as popxl

__all__ = ["seed_variable"]


def seed_variable(seed: int, replica_grouping: popxl.ReplicaGrouping | None = None,
                  ) -> tuple[popxl.Variable, popxl.Tensor]:
    """A ``uint32[2]`` seed variable named ``random_seed`` in the main graph, from
    ``popxl.create_seeds(seed)``: one seed per group of ``replica_grouping`` (default: one per
    replica).

    Returns:
        ``(variable, tensor)``: the tensor to use in the main graph. popxl-addons keeps the
        variable in a remote buffer, loads it when weights go to the device and stores it back
        when they come to the host; xlgraph keeps it on the device, which the tensor is (so
        seeds updated in place persist across runs in the same way).
    """
    ir = popxl.gir()
    rg = replica_grouping or ir.replica_grouping(group_size=1)
    data = popxl.create_seeds(seed, replicas=rg.num_groups)
    with popxl.gmg():
        var = popxl.variable(data, popxl.uint32, "random_seed", replica_grouping=rg)
    return var, var
