"""Datasets, the seeded global data order, and per-replica shards.

Every strategy draws its batches from one :class:`BatchStream`: the training
set is visited as a concatenation of seeded epoch permutations, and global
batch ``i`` is a fixed slice of that sequence. A mirrored run and a one-device
run with the same global batch therefore see exactly the same examples, which
is what makes their parameters comparable (DESIGN.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from simdist.catalog import DATASETS
from simdist.errors import SimdistError
from simdist.seeds import rng

NPZ_KEYS: tuple[str, ...] = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class Dataset:
    """A train/test split held in host memory as numpy arrays.

    ``x`` is float32 with shape ``(n, *input_shape)``; ``y`` is int32 ``(n,)``
    class labels for classification and float32 ``(n, n_outputs)`` targets
    for regression.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: Literal["classification", "regression"]
    n_outputs: int
    input_shape: tuple[int, ...]

    @property
    def n_train(self) -> int:
        """Number of training examples."""
        return int(self.x_train.shape[0])


def _n_test(n: int, test_fraction: float) -> int:
    n_test = round(n * float(test_fraction))
    if not 0 < n_test < n:
        raise SimdistError(
            f"dataset test_fraction {test_fraction} leaves {n_test} of {n} examples for testing; "
            "choose a fraction that keeps both sets non-empty, e.g. 0.2"
        )
    return n_test


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


def _digits(spec: Any, seed: int) -> Dataset:
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no network

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[..., None]  # pixel values are 0..16
    y = bunch.target.astype(np.int32)
    _n_test(len(y), spec.test_fraction)
    tr, te = _stratified_split(y, spec.test_fraction, seed)
    return Dataset(x[tr], y[tr], x[te], y[te], "classification", 10, (8, 8, 1))


def _synthetic_regression(spec: Any, seed: int) -> Dataset:
    n = int(getattr(spec, "n_examples", 2048))
    f = int(getattr(spec, "n_features", 16))
    noise = float(getattr(spec, "noise", 0.1))
    gen = rng(seed, "data_split")
    w = gen.standard_normal((f, 1)) / np.sqrt(f)
    b = gen.standard_normal(1)
    x = gen.standard_normal((n, f))
    y = x @ w + b + noise * gen.standard_normal((n, 1))
    n_test = _n_test(n, spec.test_fraction)
    perm = gen.permutation(n)
    te, tr = perm[:n_test], perm[n_test:]
    x, y = x.astype(np.float32), y.astype(np.float32)
    return Dataset(x[tr], y[tr], x[te], y[te], "regression", 1, (f,))


def _npz(spec: Any) -> Dataset:
    path = getattr(spec, "path", None)
    if path is None:
        raise SimdistError("dataset npz needs a path, e.g. dataset: {npz: data/mine.npz}")
    path = Path(path)
    if not path.is_file():
        raise SimdistError(f"dataset file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in NPZ_KEYS if k not in f.files]
            if missing:
                raise SimdistError(
                    f"dataset file {path}: missing key(s) {', '.join(missing)}; "
                    f"an npz dataset needs arrays {', '.join(NPZ_KEYS)} "
                    f"(it has {', '.join(f.files) or 'none'})"
                )
            arrays = {k: np.asarray(f[k]) for k in NPZ_KEYS}
    except (OSError, ValueError) as exc:
        raise SimdistError(f"dataset file {path} is not a readable .npz archive: {exc}") from exc
    xtr, ytr, xte, yte = (arrays[k] for k in NPZ_KEYS)
    for xk, yk, x, y in (("x_train", "y_train", xtr, ytr), ("x_test", "y_test", xte, yte)):
        if x.ndim < 2 or len(x) == 0:
            raise SimdistError(
                f"dataset file {path}: {xk} has shape {x.shape}; expected (n, features...)"
            )
        if y.shape[:1] != x.shape[:1]:
            raise SimdistError(
                f"dataset file {path}: {xk} has {x.shape[0]} examples but {yk} has shape {y.shape}"
            )
    if xtr.shape[1:] != xte.shape[1:]:
        raise SimdistError(
            f"dataset file {path}: x_train examples have shape {xtr.shape[1:]} "
            f"but x_test examples have shape {xte.shape[1:]}"
        )
    input_shape = tuple(int(d) for d in xtr.shape[1:])
    xtr, xte = xtr.astype(np.float32), xte.astype(np.float32)
    if np.issubdtype(ytr.dtype, np.integer) and np.issubdtype(yte.dtype, np.integer):
        if ytr.ndim != 1 or yte.ndim != 1 or min(ytr.min(), yte.min()) < 0:
            raise SimdistError(
                f"dataset file {path}: integer labels must be a 1-D array of class indices >= 0"
            )
        n_out = int(max(ytr.max(), yte.max())) + 1
        return Dataset(
            xtr,
            ytr.astype(np.int32),
            xte,
            yte.astype(np.int32),
            "classification",
            n_out,
            input_shape,
        )
    ytr = ytr.astype(np.float32).reshape(len(ytr), -1)
    yte = yte.astype(np.float32).reshape(len(yte), -1)
    if ytr.shape[1] != yte.shape[1]:
        raise SimdistError(f"dataset file {path}: y_train and y_test have different widths")
    return Dataset(xtr, ytr, xte, yte, "regression", int(ytr.shape[1]), input_shape)


def load_dataset(spec: Any, seed: int) -> Dataset:
    """Load and split the dataset named by ``spec.name``; the split depends only on ``seed``."""
    name = spec.name
    if name == "digits":
        return _digits(spec, seed)
    if name == "synthetic_regression":
        return _synthetic_regression(spec, seed)
    if name == "npz":
        return _npz(spec)
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
