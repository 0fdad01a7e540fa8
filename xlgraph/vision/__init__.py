"""A torchvision stand-in for PopTorch programs: ``datasets`` and ``transforms``.

``xlgraph.vision.datasets`` has ``MNIST``, ``FashionMNIST``, ``CIFAR10`` (local files) and
``FakeData`` with torchvision's constructors and items; ``xlgraph.vision.transforms`` has
``Compose``, ``ToTensor``, ``PILToTensor``, ``Normalize``, ``ToPILImage``, ``Resize``,
``CenterCrop``, ``RandomHorizontalFlip``, ``Lambda`` and ``ConvertImageDtype``. torch is
optional: without it the transforms return numpy arrays.

Example:
    >>> from xlgraph.vision import datasets, transforms
    >>> mnist = datasets.MNIST("~/.torch/datasets", train=False, transform=transforms.ToTensor())
    >>> image, label = mnist[0]          # a (1, 28, 28) tensor in [0, 1], and an int
"""

from xlgraph.vision import datasets, transforms

__all__ = ["datasets", "transforms"]
