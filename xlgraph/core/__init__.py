"""The core: the IR data model (``Ir``, ``Graph``, ``Tensor``, ``Op`` records), the graph context
stack and the listings that print them. It imports nothing above itself (no op library, no
lowering, no cost model); see docs/architecture.md for the layers."""
