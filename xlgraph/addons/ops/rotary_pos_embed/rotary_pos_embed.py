"""``popxl_addons.ops.rotary_pos_embed``: rotary position embedding and its tables (the record
is ``xlgraph.ops.rotary``)."""

from xlgraph.ops.rotary import rotary_pos_embed, trig_table_constants, trig_tables

__all__ = ["rotary_pos_embed", "trig_tables", "trig_table_constants"]
