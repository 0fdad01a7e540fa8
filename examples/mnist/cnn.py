"""The PopTorch MNIST training demo's CNN, written as an xlgraph graph.

Two blocks of (conv 3x3, max-pool 2, relu), then linear 1600->128, relu, dropout 0.5 and
linear 128->10, trained with cross-entropy and plain SGD (lr 0.03), 8 images per step and 50
steps per ``Session.run``. Run ``python examples/mnist/cnn.py`` (see ``--help``); MNIST is read
offline through ``xlgraph.datasets``; the training curve and the confusion matrix are saved as
PNGs in ``--output-dir`` (needs matplotlib).
"""

from __future__ import annotations

import argparse

import common

from xlgraph import nn, optim
from xlgraph.datasets import MNIST_MEAN, MNIST_STD, load_mnist

DIGITS = tuple(str(d) for d in range(10))


class Block(nn.Layer):
    """conv -> max-pool -> relu."""

    def __init__(self, in_channels: int, num_filters: int, kernel_size: int, pool_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, num_filters, kernel_size)
        self.pool = nn.MaxPool2d(pool_size)  # stride = pool_size, as in torch
        self.relu = nn.ReLU()

    def build(self, x):
        return self.relu(self.pool(self.conv(x)))


class Network(nn.Layer):
    """The demo's network; ``seed`` switches dropout on (training) or off (``None``)."""

    def __init__(self):
        super().__init__()
        self.layer1 = Block(1, 32, 3, 2)
        self.layer2 = Block(32, 64, 3, 2)
        self.layer3 = nn.Linear(1600, 128)
        self.layer3_act = nn.ReLU()
        self.layer3_dropout = nn.Dropout(0.5)
        self.layer4 = nn.Linear(128, 10)

    def build(self, x, seed=None):
        x = self.layer2(self.layer1(x))
        x = x.reshape((-1, 1600))
        x = self.layer3_act(self.layer3(x))
        return self.layer4(self.layer3_dropout(x, seed))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser("PopTorch MNIST CNN demo in xlgraph", "cnn", epochs=10,
                                batch_size=8)
    common.add_arguments(parser, lr=0.03)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[common.EpochResult]:
    opts = parse_args(argv)
    train = common.load_split(load_mnist, MNIST_MEAN, MNIST_STD, opts, train=True)
    test = common.load_split(load_mnist, MNIST_MEAN, MNIST_STD, opts, train=False)
    model = Network()
    evaluator = common.Evaluator(model, *test, opts.test_batch_size)
    results, _, predictions = common.fit(opts, model, nn.cross_entropy, optim.SGD(lr=opts.lr),
                                         train, evaluator, dropout=True)
    common.save_plots(opts, "MNIST CNN", results, predictions, DIGITS)
    mean_time = sum(r.seconds for r in results) / len(results)
    print(f"Accuracy on test set: {results[-1].accuracy:.2f}% "
          f"(after epoch 1: {results[0].accuracy:.2f}%; {mean_time:.1f} s per epoch)")
    return results


if __name__ == "__main__":
    main()
