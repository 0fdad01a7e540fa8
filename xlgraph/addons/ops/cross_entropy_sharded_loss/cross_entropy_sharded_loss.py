"""``popxl_addons.ops.cross_entropy_sharded_loss``: cross-entropy of logits split by class over
a tensor-parallel group of replicas (the record is ``xlgraph.ops.sharded_loss``)."""

from xlgraph.ops.sharded_loss import cross_entropy_sharded_loss

__all__ = ["cross_entropy_sharded_loss"]
