"""Run PopXL programs unchanged: make ``import popxl`` resolve to xlgraph (opt-in).

Nothing here is active until asked for. Either run a script through it::

    python -m xlgraph.popxl_compat train.py --epochs 1
    python -m xlgraph.popxl_compat --device ipu_model tutorial.py  # Session(ir, "ipu_hw") too

(the runner also provides a minimal ``popart`` module, ``xlgraph.popart_compat``, and
``popdist``, ``xlgraph.dist``; with ``--device ipu_model``, ``"ipu_hw"`` runs on a
whole-chip model, ``IPUModel.full()``)

or install the alias in-process before the program imports ``popxl``::

    import xlgraph.popxl_compat
    xlgraph.popxl_compat.install()

``import popxl_addons`` (and ``popxl_addons.<path>``) resolves to ``xlgraph.addons`` the same way,
and ``import poptorch`` to ``xlgraph.poptorch`` (which needs torch), so PopTorch scripts run
unchanged too.
Every xlgraph module is then also importable as ``popxl.<same path>`` (``popxl.ops``,
``popxl.transforms.autodiff``, ``popxl.fp8_utils``, ...), and they are the same module objects.
Submodule imports do not disturb attributes: after ``import popxl.ops.call``,
``popxl.ops.call`` is still the function.

The runner's processes pass the alias on (``reach_children``): every Python process they start
(``multiprocessing``'s spawn and forkserver workers, ``subprocess`` children, ``poprun``'s
instances) finds ``popxl``, ``popxl_addons``, ``poptorch``, ``popart`` and ``popdist`` in a
directory of two-line modules (``xlgraph/shims``) on its ``PYTHONPATH`` and ``sys.path``:
importing one installs the alias in that process (``activate``). No ``sitecustomize`` or
``.pth`` file is involved, and a process that never imports those names is untouched.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import runpy
import site
import sys
import sysconfig
from collections.abc import MutableMapping
from pathlib import Path
from types import ModuleType

__all__ = ["install", "uninstall", "activate", "reach_children", "main", "ALIAS"]

ALIAS = "popxl"  # the package name the alias provides
_TARGET = "xlgraph"
# every alias and its target, the most specific target first (popxl_addons is xlgraph.addons);
# ``poptorch`` is imported only when a program asks for it (it needs the torch extra)
_ALIASES = {"popxl_addons": "xlgraph.addons", "poptorch": "xlgraph.poptorch", ALIAS: _TARGET}
# the stand-ins the runner provides under these names (whole modules, not module trees)
_STAND_INS = {name: "xlgraph.popart_compat" + name[6:]  # ``import popart._internal.ir`` too
              for name in ("popart", "popart._internal", "popart._internal.ir",
                           "popart._internal.ir.patterns")}
_STAND_INS["popdist"] = "xlgraph.dist"
SHIMS = Path(__file__).resolve().with_name("shims")  # popxl.py, popart.py, ...
DEVICE_ENV = "XLGRAPH_POPXL_DEVICE"  # the runner's --device, for the processes it starts


class _AliasLoader(importlib.abc.Loader):
    """Hands out an already imported xlgraph module under its popxl name."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        """The module already ran under its xlgraph name."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``popxl.X`` to ``xlgraph.X`` for modules not yet imported at ``install``
    (those the core does not load, such as ``popxl.poptorch``)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        alias = next((a for a in _ALIASES if fullname == a or fullname.startswith(a + ".")), None)
        if alias is None:
            return None
        real = _ALIASES[alias] + fullname[len(alias):]
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as exc:
            if exc.name != real:
                raise
            return None
        _mirror(skip=fullname)  # submodules it imported become popxl names too
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module),
                                              is_package=hasattr(module, "__path__"))


_finder = _AliasFinder()


def _mirror(skip: str = "") -> None:
    """Register every imported xlgraph module under its popxl name (but ``skip``, which the
    import system is loading: it registers that one itself)."""
    for name, module in list(sys.modules.items()):
        for alias_root, target in _ALIASES.items():
            if module is not None and (name == target or name.startswith(target + ".")):
                alias = alias_root + name[len(target):]
                if alias != skip:
                    sys.modules.setdefault(alias, module)


def install() -> None:
    """Make ``popxl`` and every ``popxl.<path>`` import the xlgraph module of that path.

    Modules already imported are registered under their popxl names at once, so importing a
    submodule whose name the parent also binds to a function (``popxl.ops.call``) leaves the
    function in place.
    """
    importlib.import_module(_TARGET)
    _mirror()
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """Remove the alias: ``popxl`` names leave ``sys.modules`` and the finder is dropped."""
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for name in [n for n in sys.modules
                 if any(n == a or n.startswith(a + ".") for a in _ALIASES)]:
        # another entry (None blocks an import; any object may sit there) is not the alias's
        if str(getattr(sys.modules[name], "__name__", "")).startswith(_TARGET):
            del sys.modules[name]


def activate(device: str | None = None) -> None:
    """Everything the runner provides, in this process: the alias (``install``), the
    stand-ins (``popart``, ``popdist``), ``"ipu_hw"`` on a whole-chip ipu_model when
    ``device`` is ``"ipu_model"``, and pools that fail rather than hang
    (``xlgraph.compat_pool``)."""
    from xlgraph.compat_pool import guard_pools

    install()
    for name, real in _STAND_INS.items():
        sys.modules.setdefault(name, importlib.import_module(real))
    if device == "ipu_model":
        from xlgraph.ipu import IPUModel
        from xlgraph.runtime.device import run_ipu_hw_on

        run_ipu_hw_on(IPUModel.full())
    elif device is not None:
        raise ValueError(f"{DEVICE_ENV}={device!r}: only 'ipu_model' can stand in for 'ipu_hw'")
    guard_pools()


def become(name: str) -> None:
    """Run by the shim module ``name`` (``popxl``, ...) as a child process imports it:
    ``activate`` here with the runner's device, then ``name`` is the module it stands for."""
    activate(os.environ.get(DEVICE_ENV) or None)
    sys.modules[name] = importlib.import_module(_ALIASES.get(name) or _STAND_INS[name])


def _site_dirs() -> set[str]:
    paths = sysconfig.get_paths()
    found = {paths["purelib"], paths["platlib"], site.getusersitepackages()}
    found.update(getattr(site, "getsitepackages", list)())
    return {os.path.realpath(p) for p in found}


def reach_children(env: MutableMapping[str, str] | None = None, device: str | None = None,
                   ) -> None:
    """Make the Python processes started with ``env`` (default: this process's environment,
    which multiprocessing's workers also get) import the alias: the shims' directory goes
    first on their ``PYTHONPATH``, with xlgraph's own directory when that is not a site
    directory (a checkout), and ``device`` goes into ``XLGRAPH_POPXL_DEVICE``. With the
    default ``env``, the shims also go on ``sys.path``, which spawned workers copy."""
    target = os.environ if env is None else env
    root = str(Path(__file__).resolve().parent.parent)
    entries = [str(SHIMS)] + ([] if os.path.realpath(root) in _site_dirs() else [root])
    old = [p for p in target.get("PYTHONPATH", "").split(os.pathsep) if p and p not in entries]
    target["PYTHONPATH"] = os.pathsep.join(entries + old)
    if device is not None:
        target[DEVICE_ENV] = device
    if env is None and str(SHIMS) not in sys.path:
        sys.path.insert(min(1, len(sys.path)), str(SHIMS))


_USAGE = """usage: python -m xlgraph.popxl_compat [--device ipu_model] SCRIPT.py [ARGS...]
       python -m xlgraph.popxl_compat --install-kernel [--user] [--name NAME]
       python -m xlgraph.popxl_compat --uninstall-kernel [--name NAME]

Runs SCRIPT with `import popxl` resolving to xlgraph, `import popxl_addons` to xlgraph.addons,
`import poptorch` to xlgraph.poptorch (with torch), `import popart` to a minimal stand-in
(xlgraph.popart_compat) and `import popdist` to xlgraph.dist; the processes SCRIPT starts get
the same. --device ipu_model runs
Session(ir, "ipu_hw") on the IPU model of a whole chip (IPUModel.full(): 1,472 tiles), as a
program written for hardware expects. --install-kernel registers the Jupyter kernel "PopXL /
PopTorch (xlgraph)", which gives notebooks the same (needs the notebook extra)."""


def main(argv: list[str] | None = None) -> None:
    """``python -m xlgraph.popxl_compat [--device ipu_model] script.py [args...]``: run a PopXL
    or PopTorch script on xlgraph; ``--install-kernel``/``--uninstall-kernel``: the Jupyter
    kernel (``xlgraph.notebook.kernelspec``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if {"--install-kernel", "--uninstall-kernel"} & set(argv[:1]):
        from xlgraph.notebook.kernelspec import command

        raise SystemExit(command(argv))
    device = None
    if argv[:1] == ["--device"] or argv[:1] and argv[0].startswith("--device="):
        device = argv[0].partition("=")[2] or (argv[1] if len(argv) > 1 else "")
        argv = argv[1:] if "=" in argv[0] else argv[2:]
        if device != "ipu_model":
            print(f"--device {device!r}: only 'ipu_model' can stand in for 'ipu_hw'\n{_USAGE}",
                  file=sys.stderr)
            raise SystemExit(2)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE)
        raise SystemExit(0 if argv else 2)
    activate(device)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as `python SCRIPT` does
    reach_children(device=device)
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
