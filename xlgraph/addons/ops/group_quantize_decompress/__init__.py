"""``popxl_addons.ops.group_quantize_decompress``: a sub-package as in popxl-addons: its
functions live in its module of the same name, re-exported here."""

from .group_quantize_decompress import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)

__all__ = ["group_quantize_decompress", "group_quantize_decompress_numpy",
           "group_quantize_compress_numpy"]
