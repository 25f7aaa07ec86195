"""Datasets, the seeded global data order, and per-replica shards.

Every strategy draws its batches from one :class:`BatchStream`: the training
set is visited as a concatenation of seeded epoch permutations, and global
batch ``i`` is a fixed slice of that sequence. A mirrored run and a one-device
run with the same global batch therefore see exactly the same examples, which
is what makes their parameters comparable (docs/strategies.md).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from simdist.catalog import DATASETS
from simdist.errors import SimdistError
from simdist.numerics.dataset import Dataset
from simdist.numerics.npz import load_npz
from simdist.numerics.sizes import digits_file, n_test
from simdist.seeds import rng

if TYPE_CHECKING:
    from simdist.scenario.workload import DatasetSpec


def _stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple:
    """Train and test indices with each class split in proportion, seeded ("data_split")."""
    gen = rng(seed, "data_split")
    test: list[np.ndarray] = []
    train: list[np.ndarray] = []
    for c in np.unique(labels):
        idx = gen.permutation(np.flatnonzero(labels == c))
        k = round(len(idx) * float(test_fraction))
        test.append(idx[:k])
        train.append(idx[k:])
    # Shuffle so the test set is not ordered by class.
    return gen.permutation(np.concatenate(train)), gen.permutation(np.concatenate(test))


@lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    import gzip

    # The same parse as sklearn.datasets.load_digits: float64 rows of 64 pixels + the label.
    with gzip.open(digits_file(), "rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    images = data[:, :-1].reshape(-1, 8, 8)
    target = data[:, -1].astype(int, copy=False)
    x = (images / 16.0).astype(np.float32)[..., None]  # pixel values are 0..16
    return x, target.astype(np.int32)


def _digits(spec: DatasetSpec, seed: int) -> Dataset:
    x, y = _digits_arrays()
    n_test(len(y), spec.test_fraction, "digits")
    tr, te = _stratified_split(y, spec.test_fraction, seed)
    return Dataset(x[tr], y[tr], x[te], y[te], "classification", 10, (8, 8, 1))


def _synthetic_regression(spec: DatasetSpec, seed: int) -> Dataset:
    n = int(spec.n_examples)
    f = int(spec.n_features)
    noise = float(spec.noise)
    gen = rng(seed, "data_split")
    w = gen.standard_normal((f, 1)) / np.sqrt(f)
    b = gen.standard_normal(1)
    x = gen.standard_normal((n, f))
    y = x @ w + b + noise * gen.standard_normal((n, 1))
    held = n_test(n, spec.test_fraction, "synthetic_regression")
    perm = gen.permutation(n)
    te, tr = perm[:held], perm[held:]
    x, y = x.astype(np.float32), y.astype(np.float32)
    return Dataset(x[tr], y[tr], x[te], y[te], "regression", 1, (f,))


def _teacher(spec: DatasetSpec, seed: int) -> Dataset:
    """The generated teacher set (simdist/numerics/generated.py), split by ``test_fraction``."""
    from simdist.numerics.generated import teacher_arrays

    n = int(spec.n_examples)
    held = n_test(n, spec.test_fraction, "teacher")
    f, classes = int(spec.n_features), int(spec.n_classes)
    d = teacher_arrays(n - held, held, f, classes, float(spec.noise), seed)
    return Dataset(d.x_train, d.y_train, d.x_test, d.y_test, "classification", classes, (f,))


def load_dataset(spec: DatasetSpec, seed: int) -> Dataset:
    """Load and split the dataset named by ``spec.name``; the split depends only on ``seed``.

    A bad npz file raises :class:`~simdist.errors.DataError` naming the file and the
    scenario field; memory running out while loading it is one too.
    """
    name = spec.name
    if name == "digits":
        return _digits(spec, seed)
    if name == "synthetic_regression":
        return _synthetic_regression(spec, seed)
    if name == "teacher":
        return _teacher(spec, seed)
    if name == "npz":
        return load_npz(spec)
    raise SimdistError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")


class BatchStream:
    """The seeded, infinite data order over a dataset's training set.

    The order is epoch 0's permutation, then epoch 1's, and so on; epoch ``e``
    uses ``rng(seed, "data_order", e)``. ``batch(index, size)`` is a pure
    function of ``(seed, index, size)``: any strategy, worker or rerun asking
    for the same global batch gets the same examples.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = int(seed)
        n = dataset.n_train
        # Bounded cache: recomputing an evicted permutation gives the same result.
        self._perm = lru_cache(maxsize=64)(
            lambda epoch: rng(self.seed, "data_order", epoch).permutation(n)
        )

    @property
    def n_train(self) -> int:
        """Number of training examples in one epoch."""
        return self.dataset.n_train

    def indices(self, index: int, size: int) -> np.ndarray:
        """Training-set row indices of global batch ``index`` of ``size`` examples."""
        if index < 0 or size <= 0:
            raise SimdistError(f"batch index {index} / size {size}: expected index >= 0, size > 0")
        n = self.n_train
        start, stop = index * size, (index + 1) * size
        first, last = start // n, (stop - 1) // n
        if first == last:
            return self._perm(first)[start - first * n : stop - first * n]
        parts = [self._perm(e) for e in range(first, last + 1)]
        return np.concatenate(parts)[start - first * n : stop - first * n]

    def batch(self, index: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``index``-th global batch of ``size`` examples, ``(x, y)``; may span two epochs."""
        idx = self.indices(index, size)
        return self.dataset.x_train[idx], self.dataset.y_train[idx]


def shard(a: np.ndarray, n: int) -> np.ndarray:
    """Split the leading axis into ``n`` equal replica shards: shape ``(n, len/n, ...)``."""
    if a.shape[0] % n:
        raise SimdistError(f"cannot split a batch of {a.shape[0]} examples into {n} equal shards")
    return a.reshape((n, a.shape[0] // n, *a.shape[1:]))
