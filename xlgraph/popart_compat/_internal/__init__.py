"""``popart._internal``: only ``popart._internal.ir`` (read-only views of xlgraph's graphs)."""
