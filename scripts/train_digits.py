#!/usr/bin/env python3
"""Trains aimcemu's embedded default model: a small residual CNN on scikit-learn's digits.

The data set (load_digits: 1797 images, 8x8x1, 10 classes) ships with scikit-learn, so the model
and its test set can be rebuilt on any machine without a download.  Training is reproducible
(fixed seeds, deterministic algorithms, one thread) and takes seconds on a CPU.  The trained model
is imported with aimcemu.import_torch (calibrated on the training images) and its INT8 accuracy is
checked against the float accuracy with the independent NumPy reference of the INT8 contract
(and, when the build has it, the C++ PU model must match that reference bit for bit).

Writes, into --out (default models/digits/):
  model.h5     the INT8 network, written by _core.save_model (docs/model_format.md)
  test_set.h5  the held-out images as a data set file (_core.save_dataset): int8 [N, 8, 8, 1]
               quantized with the network's input_frac_bits, int64 labels, plus attributes
               split_seed, test_fraction, float_accuracy and int8_accuracy

Run from the repository root:  python3 scripts/train_digits.py
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))  # the independent INT8 reference lives with the tests

import aimcemu  # noqa: E402
from aimcemu import _core  # noqa: E402
from aimcemu.importer import convert_torch  # noqa: E402
from int8_reference import run_network_reference  # noqa: E402

SPLIT_SEED = 0          # train/test split of load_digits
TRAIN_SEED = 0          # weight init and batch order
TEST_FRACTION = 0.25
EPOCHS = 30
BATCH_SIZE = 32
LEARNING_RATE = 3e-3
PIXEL_MAX = 16.0        # load_digits pixels are integers 0..16; images are scaled to [0, 1]
CLASS_NAMES = [str(d) for d in range(10)]
DATASET_SOURCE = "sklearn.datasets.load_digits"


class DigitsResNet(nn.Module):
    """stem conv -> one residual block -> max pool -> conv -> avg pool -> linear (10.7k weights).

    The 2x2 map before the classifier makes the importer's CHW -> HWC permutation of the Linear
    weights matter for this model."""

    def __init__(self, width: int = 16, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(width)
        self.block_conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.block_bn1 = nn.BatchNorm2d(width)
        self.block_conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.block_bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.max_pool = nn.MaxPool2d(2)                       # 8x8 -> 4x4
        self.head = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.head_bn = nn.BatchNorm2d(2 * width)
        self.avg_pool = nn.AvgPool2d(2)                       # 4x4 -> 2x2
        self.classifier = nn.Linear(2 * width * 2 * 2, num_classes)

    def forward(self, x):
        x = self.relu(self.stem_bn(self.stem(x)))
        y = self.relu(self.block_bn1(self.block_conv1(x)))
        y = self.block_bn2(self.block_conv2(y))
        x = self.relu(y + x)
        x = self.max_pool(x)
        x = self.relu(self.head_bn(self.head(x)))
        x = self.avg_pool(x)
        return self.classifier(torch.flatten(x, 1))


def load_split():
    """(x_train, x_test, y_train, y_test): float32 [N, 1, 8, 8] in [0, 1] and int64 labels."""
    digits = load_digits()
    images = (digits.images / PIXEL_MAX).astype(np.float32)[:, None, :, :]
    return train_test_split(images, digits.target.astype(np.int64), test_size=TEST_FRACTION,
                            random_state=SPLIT_SEED, stratify=digits.target)


def make_deterministic() -> None:
    torch.manual_seed(TRAIN_SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def train(x_train: np.ndarray, y_train: np.ndarray) -> DigitsResNet:
    make_deterministic()
    model = DigitsResNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.from_numpy(x_train), torch.from_numpy(y_train)
    order_rng = torch.Generator().manual_seed(TRAIN_SEED)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x), generator=order_rng)
        for start in range(0, len(x), BATCH_SIZE):
            batch = order[start:start + BATCH_SIZE]
            optimizer.zero_grad()
            loss_fn(model(x[batch]), y[batch]).backward()
            optimizer.step()
        schedule.step()
    return model.eval()


def float_accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    with torch.no_grad():
        predictions = model(torch.from_numpy(images)).argmax(dim=1).numpy()
    return float(np.mean(predictions == labels))


def int8_logits(net, images_int8: np.ndarray) -> np.ndarray:
    """Output-layer int8 values from the independent NumPy reference of the INT8 contract; when
    this build has the C++ PU model, its layers must agree with the reference bit for bit."""
    reference = run_network_reference(net, images_int8)
    if hasattr(_core, "run_network"):
        for layer, mine, ref in zip(net.layers, _core.run_network(net, images_int8, backend="fast"), reference):
            if not np.array_equal(mine, ref):
                raise SystemExit(f"_core.run_network differs from the NumPy reference at layer {layer.name}")
    return reference[net.output_index()].reshape(len(images_int8), -1)


def write_test_set(path: Path, images_int8: np.ndarray, labels: np.ndarray, input_frac_bits: int,
                   float_acc: float, int8_acc: float) -> None:
    """The held-out set as an aimcemu data set file (_core.save_dataset, docs/model_format.md),
    plus provenance attributes (split seed, float and INT8 accuracy) added with h5py.

    Built under a temporary name and renamed, so a failure never leaves a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    description = (f"load_digits test split (test_size={TEST_FRACTION}, stratified, random_state={SPLIT_SEED}), "
                   f"pixels/{PIXEL_MAX:g} quantized to int8 with {input_frac_bits} fractional bits; "
                   "made by scripts/train_digits.py")
    _core.save_dataset(images_int8.astype(np.int8), labels.astype(np.int64), str(tmp), source=DATASET_SOURCE,
                       description=description, input_frac_bits=input_frac_bits)
    with h5py.File(tmp, "a") as f:
        f.attrs.create("split_seed", SPLIT_SEED, dtype=np.int64)
        f.attrs.create("test_fraction", TEST_FRACTION, dtype=np.float64)
        f.attrs.create("float_accuracy", float_acc, dtype=np.float64)
        f.attrs.create("int8_accuracy", int8_acc, dtype=np.float64)
    os.replace(tmp, path)


def build(out_dir: Path | None) -> dict:
    """Trains, imports and checks the model; writes the files when out_dir is given."""
    started = time.perf_counter()
    x_train, x_test, y_train, y_test = load_split()
    model = train(x_train, y_train)
    imported = convert_torch(model, torch.from_numpy(x_train), name="digits_resnet")
    net = imported.network
    net.class_names = CLASS_NAMES
    test_int8 = imported.quantize_images(x_test)

    float_acc = float_accuracy(model, x_test, y_test)
    int8_acc = float(np.mean(int8_logits(net, test_int8).argmax(axis=1) == y_test))
    summary = {"float_accuracy": float_acc, "int8_accuracy": int8_acc, "train_images": len(x_train),
               "test_images": len(x_test), "input_frac_bits": imported.input_frac_bits,
               "layer_frac_bits": imported.frac_bits, "weights": int(net.total_weights()),
               "cpp_pu_model_checked": hasattr(_core, "run_network")}
    if abs(float_acc - int8_acc) > 0.01:
        raise SystemExit(f"INT8 accuracy {int8_acc:.4f} is more than 1 point off float {float_acc:.4f}")

    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        _core.save_model(net, str(out_dir / "model.h5"))
        write_test_set(out_dir / "test_set.h5", test_int8, y_test, imported.input_frac_bits, float_acc, int8_acc)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "models" / "digits",
                        help="folder for model.h5 and test_set.h5 (default: models/digits)")
    parser.add_argument("--check-only", action="store_true", help="train and check, write nothing")
    args = parser.parse_args(argv)
    summary = build(None if args.check_only else args.out)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
