"""Loads a generator script of docs/ as a module, so tests check pages against the same code."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parent.parent / "docs"


def load_generator(name: str) -> ModuleType:
    """``docs/<name>.py`` imported under the module name ``name``."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
