"""Lowering: turn an Ir into an executable plan once, when a Session is created."""

from xlgraph.lower.executable import CompiledExecutable, Executable, InterpretedExecutable, lower

__all__ = ["lower", "Executable", "CompiledExecutable", "InterpretedExecutable"]
