"""``popxl_addons.ops.cross_entropy_sharded_wr_loss``: cross-entropy of logits split by class
over the IPUs of one replica (the record is ``xlgraph.ops.sharded_loss``)."""

from xlgraph.ops.sharded_loss import cross_entropy_sharded_wr_loss

__all__ = ["cross_entropy_sharded_wr_loss"]
