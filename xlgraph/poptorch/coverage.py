"""Which of PopTorch's listed operations the frontend converts (the support page reads this).

``COVERED`` holds the names as PopTorch's supported-ops list writes them. Every name here has
samples in the op sweep (``tests/test_poptorch_sweep.py``), which checks it against torch eager,
forward and backward, in float32 and float16.
"""

from __future__ import annotations

COVERED: frozenset[str] = frozenset()
