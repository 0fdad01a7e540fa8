"""``import poptorch`` in a process started under xlgraph's PopXL runner or ``poprun``.

This directory is on such a process's path: importing the name installs the alias here
(``xlgraph.popxl_compat.become``) and gives ``xlgraph.poptorch`` (which needs torch).
"""

from xlgraph.popxl_compat import become

become(__name__)
