"""xlgraph in Jupyter: PopXL and PopTorch notebooks run unchanged.

``%load_ext xlgraph.notebook`` in any IPython kernel, or the kernel that ``python -m
xlgraph.popxl_compat --install-kernel`` registers ("PopXL / PopTorch (xlgraph)"), gives a
notebook what the runner gives a script: ``import popxl``, ``popxl_addons`` and ``poptorch``
resolve to xlgraph, ``popart`` and ``popdist`` to their stand-ins, ``Session(ir, "ipu_hw")``
runs on the IPU model of a whole chip, and the processes the notebook starts get the same. Lines
that only make sense on Graphcore's cloud are skipped with a note (``xlgraph.notebook.cloud``).
Nothing here is imported by ``import xlgraph``; it needs the ``notebook`` extra (ipykernel).
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension", "DEVICE"]

DEVICE = "ipu_model"  # what "ipu_hw" runs on in a notebook


def load_ipython_extension(ipython: Any) -> None:
    """Activate the runner's alias, stand-ins and device in this kernel, and skip cloud-only
    lines in later cells (``%load_ext xlgraph.notebook``)."""
    from xlgraph.notebook.cloud import skip_cloud_lines
    from xlgraph.popxl_compat import activate, reach_children

    activate(DEVICE)
    reach_children(device=DEVICE)
    if skip_cloud_lines not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.append(skip_cloud_lines)


def unload_ipython_extension(ipython: Any) -> None:
    """Stop skipping cloud-only lines (the alias stays: modules already imported keep it)."""
    from xlgraph.notebook.cloud import skip_cloud_lines

    if skip_cloud_lines in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(skip_cloud_lines)
