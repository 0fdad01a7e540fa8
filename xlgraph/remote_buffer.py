"""PopXL's ``popxl.remote_buffer`` module path: ``RemoteBuffer`` and ``remote_buffer``
(defined in ``xlgraph.remote``)."""

from xlgraph.remote import RemoteBuffer, remote_buffer

__all__ = ["RemoteBuffer", "remote_buffer"]
