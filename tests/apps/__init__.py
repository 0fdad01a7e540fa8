"""Graphcore's PopXL applications' surface and transformer layers written in their style,
checked against HuggingFace ``transformers`` (issue 32)."""
