"""popxl-addons' ``transforms.available_memory_proportion`` module.

xlgraph's ops take PopXL's ``available_memory_proportion`` arguments themselves (the ipu_model
records them), so this module adds nothing; it exists so that the module path resolves.
"""

__all__: list[str] = []
