"""Poplar's ``autoReport`` engine options: where a PopXL program's profile is written.

PopXL users ask for a profile with ``POPLAR_ENGINE_OPTIONS='{"autoReport.all": "true",
"autoReport.directory": "./profile"}'`` (or the same keys in the session options'
``engineOptions``; the environment wins, as in Poplar). Poplar then writes ``profile.pop`` in
that directory; an ``"ipu_model"`` Session writes ``profile.json`` there (``report.save``) when
it is created, and again when it detaches, with the host-side time measured by the runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xlgraph.errors import ArgumentError, user_source_line

__all__ = ["ENVIRONMENT", "SWITCHES", "report_directory", "engine_option_true", "save_profile"]

ENVIRONMENT = "POPLAR_ENGINE_OPTIONS"
SWITCHES = ("autoReport.all", "autoReport.outputGraphProfile", "autoReport.outputExecutionProfile")
"""Each of these set to ``"true"`` turns the profile on."""


def _environment() -> dict[str, Any]:
    text = os.environ.get(ENVIRONMENT, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArgumentError(f"{ENVIRONMENT} must be a JSON object of engine options such as "
                            f'{{"autoReport.all": "true"}}; it is not JSON ({exc}): {text!r}'
                            ) from None
    if not isinstance(options, dict):
        raise ArgumentError(f"{ENVIRONMENT} must be a JSON object of engine options, got "
                            f"{type(options).__name__}: {text!r}")
    return options


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def engine_option_true(engine_options: Mapping[str, Any] | None, key: str) -> bool:
    """Whether Poplar engine option ``key`` is ``"true"`` in ``engine_options`` updated by
    ``POPLAR_ENGINE_OPTIONS`` (the environment wins, as in Poplar)."""
    return _true({**(engine_options or {}), **_environment()}.get(key))


def report_directory(engine_options: Mapping[str, Any] | None = None) -> Path | None:
    """The directory ``autoReport`` names (``"."`` when none is given), or None when the
    options (``engine_options`` updated by ``POPLAR_ENGINE_OPTIONS``) ask for no report.

    Raises:
        ArgumentError: ``POPLAR_ENGINE_OPTIONS`` is not a JSON object.
    """
    options = {**(engine_options or {}), **_environment()}
    if not any(_true(options.get(key)) for key in SWITCHES):
        return None
    return Path(str(options.get("autoReport.directory", ".")))


def save_profile(report: Any, directory: Path) -> Path:
    """Write ``report`` to ``directory/profile.json``, making the directory as needed.

    Raises:
        ArgumentError: the file cannot be written there (the directory is a file,
            ``profile.json`` is a directory, no permission...), naming ``autoReport.directory``.
    """
    path = directory / "profile.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return report.save(path)
    except OSError as exc:
        raise ArgumentError(
            f"the profile that the autoReport engine options ask for cannot be written to "
            f"{str(path)!r} (autoReport.directory {str(directory)!r}, from {ENVIRONMENT} or "
            f"the session options' engineOptions): {exc.strerror or exc}"
            f"{f': {exc.filename!r}' if exc.filename else ''} [at {user_source_line()}]"
        ) from None
