"""The "Introduction to PopTorch" Fashion-MNIST classifier, written as an xlgraph graph.

conv 1->5 (3x3), max-pool 2, relu, conv 5->12 (5x5), relu, group-norm (3 groups), linear
972->100, relu, linear 100->10 and log-softmax, trained with the NLL loss and SGD (lr 0.001,
momentum 0.9) on batches of 16 for 5 epochs. Prints the test accuracy per class and the confusion
matrix, saves the weights and, when matplotlib is installed, the training curve and confusion
matrix PNGs in ``--output-dir``; ``--predict IMAGE`` classifies an image file with saved weights
(needs Pillow).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import common
import numpy as np
import plots

import xlgraph
from xlgraph import checkpoint, nn, ops, optim, training
from xlgraph.datasets import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    load_fashion_mnist,
    normalize,
)


class ClassificationModel(nn.Layer):
    """The tutorial's model; it returns log-probabilities."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(972, 100)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(100, 10)

    def build(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = x.reshape((x.shape[0], -1))
        x = self.relu(self.fc1(x))
        return nn.log_softmax(self.fc2(x), 1)


def nll(log_probs: xlgraph.Tensor, labels: xlgraph.Tensor) -> xlgraph.Tensor:
    """``torch.nn.NLLLoss`` on log-probabilities."""
    return ops.nll_loss(log_probs, labels, log_prob=True)


def report(matrix: np.ndarray) -> str:
    """Per-class accuracy and the confusion matrix as text."""
    lines = ["Per-class test accuracy:"]
    lines += [f"  {name:<12} {acc:6.2f}%"
              for name, acc in zip(FASHION_MNIST_CLASSES, plots.per_class_accuracy(matrix))]
    lines.append("Confusion matrix (rows: true class, columns: predicted class):")
    lines.append("     " + "".join(f"{j:>6}" for j in range(len(matrix))))
    lines += [f"  {i:>2} " + "".join(f"{v:>6}" for v in row) for i, row in enumerate(matrix)]
    return "\n".join(lines)


def load_image(path: str | Path) -> np.ndarray:
    """A grayscale 28x28 uint8 image, inverted when its background is light (needs Pillow)."""
    common.require("PIL", "--predict", "pip install 'xlgraph[image]'")
    if not Path(path).is_file():
        raise SystemExit(f"no image at {path}: pass --predict an image file")
    from PIL import Image, ImageOps
    img = Image.open(path).convert("L").resize((28, 28))
    pixels = np.asarray(img)
    border = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
    if border.mean() > 127:  # Fashion-MNIST items are light on a dark background
        img = ImageOps.invert(img)
    return np.asarray(img, np.uint8)


def predict(image_path: str | Path, weights: str | Path) -> str:
    """The class name predicted for an image file with the saved ``weights``."""
    if not Path(weights).is_file():
        raise SystemExit(f"no saved weights at {weights}: train first with "
                         f"`python examples/mnist/fashion.py --output-dir {Path(weights).parent}`")
    x = normalize(load_image(image_path), FASHION_MNIST_MEAN, FASHION_MNIST_STD)
    ir = xlgraph.Ir()
    step = training.build_inference(ir, ClassificationModel(),
                                    [xlgraph.TensorSpec((1, *common.IMAGE), xlgraph.float32)])
    session = xlgraph.Session(ir, "ipu_model", ipu_model=common.IPU)
    checkpoint.load_into(session, weights)
    with session:
        (log_probs,) = step.run(session, x.reshape((1, *common.IMAGE)))
    return FASHION_MNIST_CLASSES[int(np.argmax(log_probs))]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser("Introduction to PopTorch, in xlgraph", "fashion", epochs=5,
                                batch_size=16)
    common.add_arguments(parser, lr=0.001)
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    parser.add_argument("--weights", default=None,
                        help="weights for --predict (unset: OUTPUT_DIR/fashion_weights.npz)")
    parser.add_argument("--predict", metavar="IMAGE", default=None,
                        help="classify IMAGE with saved weights instead of training")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[common.EpochResult] | str:
    opts = parse_args(argv)
    out = Path(opts.output_dir)
    if opts.predict:
        label = predict(opts.predict, opts.weights or out / "fashion_weights.npz")
        print(f"Predicted class: {label}")
        return label
    train = common.load_split(load_fashion_mnist, FASHION_MNIST_MEAN, FASHION_MNIST_STD, opts,
                              train=True)
    test = common.load_split(load_fashion_mnist, FASHION_MNIST_MEAN, FASHION_MNIST_STD, opts,
                             train=False)
    model = ClassificationModel()
    evaluator = common.Evaluator(model, *test, opts.test_batch_size)
    opt = optim.SGD(lr=opts.lr, momentum=opts.momentum)
    results, weights, predictions = common.fit(opts, model, nll, opt, train, evaluator,
                                               dropout=False)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint.save(out / "fashion_weights.npz", weights)
    matrix = common.save_plots(opts, "Fashion-MNIST", results, predictions,
                               FASHION_MNIST_CLASSES)
    print(report(matrix))
    mean_time = sum(r.seconds for r in results) / len(results)
    print(f"Accuracy on test set: {results[-1].accuracy:.2f}% ({mean_time:.1f} s per epoch); "
          f"weights saved to {out / 'fashion_weights.npz'}")
    return results


if __name__ == "__main__":
    main()
