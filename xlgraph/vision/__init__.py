"""A torchvision stand-in for the MNIST-family tutorials: ``datasets`` and ``transforms``.

``xlgraph.vision.datasets.MNIST`` and ``FashionMNIST`` take torchvision's constructor and return
its items; ``xlgraph.vision.transforms`` has ``Compose``, ``ToTensor``, ``Normalize`` and
``ToPILImage``. torch is optional: without it ``ToTensor`` returns float32 numpy arrays.

Example:
    >>> from xlgraph.vision import datasets, transforms
    >>> mnist = datasets.MNIST("~/.torch/datasets", train=False, transform=transforms.ToTensor())
    >>> image, label = mnist[0]          # a (1, 28, 28) tensor in [0, 1], and an int
"""

from xlgraph.vision import datasets, transforms

__all__ = ["datasets", "transforms"]
