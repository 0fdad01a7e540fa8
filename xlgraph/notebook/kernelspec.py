"""The Jupyter kernelspec "PopXL / PopTorch (xlgraph)": install and remove it.

``python -m xlgraph.popxl_compat --install-kernel [--user] [--name NAME]`` writes a kernelspec
that starts ``ipykernel`` with ``xlgraph.notebook`` loaded, in this Python. Without ``--user``
it goes into this environment (``sys.prefix``/share/jupyter, where a Jupyter run from the same
environment finds it); with ``--user``, into the user's Jupyter data directory
(``JUPYTER_DATA_DIR`` when set). ``--uninstall-kernel [--name NAME]`` removes it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["DISPLAY_NAME", "NAME", "kernel_json", "install_kernel", "uninstall_kernel"]

DISPLAY_NAME = "PopXL / PopTorch (xlgraph)"
NAME = "xlgraph"  # the kernelspec's default name (``jupyter kernelspec list``)


def _manager() -> Any:
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        raise ImportError("the xlgraph Jupyter kernel needs ipykernel, which is not installed: "
                          "pip install 'xlgraph[notebook]'") from None
    return KernelSpecManager()


def kernel_json(python: str | None = None) -> dict[str, Any]:
    """The kernelspec: ipykernel in ``python`` (default: this one) with xlgraph.notebook."""
    return {"argv": [python or sys.executable, "-m", "ipykernel_launcher", "-f",
                     "{connection_file}", "--ext", "xlgraph.notebook"],
            "display_name": DISPLAY_NAME, "language": "python",
            "metadata": {"debugger": True}}


def install_kernel(name: str = NAME, user: bool = False) -> Path:
    """Write the kernelspec ``name`` (replacing one of that name) and return its directory.

    Raises:
        ImportError: without ipykernel (``pip install 'xlgraph[notebook]'``).
    """
    manager = _manager()
    import ipykernel  # noqa: F401 - the kernel it starts must be there

    with tempfile.TemporaryDirectory() as source:
        (Path(source) / "kernel.json").write_text(json.dumps(kernel_json(), indent=1))
        where = manager.install_kernel_spec(source, kernel_name=name, user=user,
                                            prefix=None if user else sys.prefix)
    return Path(where)


def uninstall_kernel(name: str = NAME) -> Path:
    """Remove the kernelspec ``name`` and return the directory it was in.

    Raises:
        KeyError: no kernelspec of that name is installed.
    """
    manager = _manager()
    from jupyter_client.kernelspec import NoSuchKernel

    try:
        return Path(manager.remove_kernel_spec(name))
    except (NoSuchKernel, KeyError):  # jupyter_client raises either, by version
        raise KeyError(f"no Jupyter kernel named {name!r} is installed "
                       "(jupyter kernelspec list shows the installed ones)") from None


def command(argv: list[str]) -> int:
    """``--install-kernel [--user] [--name NAME]`` or ``--uninstall-kernel [--name NAME]``
    (the runner's options): do it, print where, and return the exit status."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m xlgraph.popxl_compat",
                                     description=f"install or remove the {DISPLAY_NAME!r} "
                                                 "Jupyter kernel")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--install-kernel", action="store_true", help="install the kernelspec")
    what.add_argument("--uninstall-kernel", action="store_true", help="remove the kernelspec")
    parser.add_argument("--user", action="store_true",
                        help="install for this user (JUPYTER_DATA_DIR when set) rather than "
                             "into this Python environment")
    parser.add_argument("--name", default=NAME, help="the kernelspec's name")
    args = parser.parse_args(argv)
    try:
        if args.install_kernel:
            where = install_kernel(args.name, user=args.user)
            print(f"Installed the Jupyter kernel {DISPLAY_NAME!r} as {args.name!r} in {where}")
        else:
            where = uninstall_kernel(args.name)
            print(f"Removed the Jupyter kernel {args.name!r} from {where}")
    except (ImportError, KeyError, ValueError) as exc:  # ValueError: jupyter's name rule
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 1
    return 0
