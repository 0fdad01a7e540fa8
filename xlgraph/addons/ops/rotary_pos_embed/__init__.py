"""``popxl_addons.ops.rotary_pos_embed``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .rotary_pos_embed import (
    rotary_pos_embed,
    trig_table_constants,
    trig_tables,
)

__all__ = ["rotary_pos_embed", "trig_tables", "trig_table_constants"]
