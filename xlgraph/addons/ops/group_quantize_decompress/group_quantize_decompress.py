"""``popxl_addons.ops.group_quantize_decompress``: 4-bit group-quantised weights and their
host-side numpy compression (the record is ``xlgraph.ops.quantize``)."""

from xlgraph.ops.quantize import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)

__all__ = ["group_quantize_decompress", "group_quantize_decompress_numpy",
           "group_quantize_compress_numpy"]
