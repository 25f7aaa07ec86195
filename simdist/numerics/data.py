"""Datasets, the seeded global data order, and per-replica shards.

Every strategy draws its batches from one :class:`BatchStream`: the training
set is visited as a concatenation of seeded epoch permutations, and global
batch ``i`` is a fixed slice of that sequence. A mirrored run and a one-device
run with the same global batch therefore see exactly the same examples, which
is what makes their parameters comparable (DESIGN.md §3).
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from simdist.catalog import DATASETS
from simdist.errors import DataError, SimdistError
from simdist.numerics.sizes import digits_file, n_test
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


#: Most classes an npz data set may have (largest label + 1): more is a mislabelled file,
#: and each class is a column of the output layer.
MAX_CLASSES = 100_000
#: Data-set field of a scenario, for errors that name it.
_NPZ_FIELD = "workload.dataset.npz"


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


def _digits(spec: Any, seed: int) -> Dataset:
    x, y = _digits_arrays()
    n_test(len(y), spec.test_fraction, "digits")
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
    held = n_test(n, spec.test_fraction, "synthetic_regression")
    perm = gen.permutation(n)
    te, tr = perm[:held], perm[held:]
    x, y = x.astype(np.float32), y.astype(np.float32)
    return Dataset(x[tr], y[tr], x[te], y[te], "regression", 1, (f,))


def _teacher(spec: Any, seed: int) -> Dataset:
    """The generated teacher set (simdist/numerics/generated.py), split by ``test_fraction``."""
    from simdist.numerics.generated import teacher_arrays

    n = int(spec.n_examples)
    held = n_test(n, spec.test_fraction, "teacher")
    f, classes = int(spec.n_features), int(spec.n_classes)
    d = teacher_arrays(n - held, held, f, classes, float(spec.noise), seed)
    return Dataset(d.x_train, d.y_train, d.x_test, d.y_test, "classification", classes, (f,))


# What np.load raises on a damaged archive: truncated, not a zip, a bad member, a header
# that lies, an unsupported compression, object arrays (refused without pickle).
_UNREADABLE = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
    struct.error,
)


def read_npz(path: Path, field: str, keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (or only ``keys``), or one DataError naming ``field``.

    No pickles (a data file cannot run code), and every way a damaged archive fails —
    truncated, not a zip, too large for memory — becomes one message naming the file.
    """
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise DataError(str(path), field, "holds one bare array (.npy); expected an .npz")
        with loaded as f:
            if keys is not None:
                missing = [k for k in keys if k not in f.files]
                if missing:
                    raise DataError(
                        str(path),
                        field,
                        f"missing key(s) {', '.join(missing)}; expected arrays "
                        f"{', '.join(keys)} (it has {', '.join(f.files) or 'none'})",
                    )
            return {k: np.asarray(f[k]) for k in (keys if keys is not None else f.files)}
    except MemoryError:
        raise DataError(str(path), field, "too large to load into memory") from None
    except _UNREADABLE as exc:
        raise DataError(
            str(path), field, f"not a readable .npz archive ({type(exc).__name__}: {exc})"
        ) from None


def check_values(path: Path, field: str, key: str, a: np.ndarray) -> None:
    """Real numbers only (bool, int or float), all finite; else one DataError naming ``key``.

    Strings and complex numbers would be cast (or fail to cast) silently downstream; a NaN
    or inf in the data shows up only as a loss that is NaN at step 1.
    """
    kind = a.dtype.kind
    if kind == "c":
        raise DataError(
            str(path),
            field,
            f"{key} holds complex numbers ({a.dtype}); expected real numbers "
            "(the imaginary part would be dropped)",
        )
    if kind not in "biuf":
        raise DataError(
            str(path), field, f"{key} has dtype {a.dtype}; expected real numbers (int or float)"
        )
    if kind == "f":
        with np.errstate(over="ignore"):
            bad = ~np.isfinite(a.astype(np.float32, copy=False))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            beyond = np.isfinite(a[where])
            what = "values beyond float32's range" if beyond else "NaN or inf values"
            raise DataError(
                str(path),
                field,
                f"{key} has {int(bad.sum()):,} {what}, the first at index "
                f"{list(where)}; expected finite numbers",
            )


def _npz(spec: Any) -> Dataset:
    path = getattr(spec, "path", None)
    if path is None:
        raise DataError("npz", _NPZ_FIELD, "missing; e.g. dataset: {npz: data/mine.npz}")
    path = Path(path)
    if not path.is_file():
        raise DataError(str(path), _NPZ_FIELD, "file not found")
    arrays = read_npz(path, _NPZ_FIELD, NPZ_KEYS)

    def bad(message: str) -> DataError:
        return DataError(str(path), _NPZ_FIELD, message)

    for key in NPZ_KEYS:
        check_values(path, _NPZ_FIELD, key, arrays[key])
    xtr, ytr, xte, yte = (arrays[k] for k in NPZ_KEYS)
    for xk, yk, x, y in (("x_train", "y_train", xtr, ytr), ("x_test", "y_test", xte, yte)):
        if x.ndim < 2 or len(x) == 0:
            raise bad(f"{xk} has shape {x.shape}; expected (n, features...) with n >= 1")
        if y.shape[:1] != x.shape[:1]:
            raise bad(f"{xk} has {x.shape[0]} examples but {yk} has shape {y.shape}")
    if xtr.shape[1:] != xte.shape[1:]:
        raise bad(
            f"x_train examples have shape {xtr.shape[1:]} "
            f"but x_test examples have shape {xte.shape[1:]}"
        )
    input_shape = tuple(int(d) for d in xtr.shape[1:])
    xtr, xte = xtr.astype(np.float32), xte.astype(np.float32)
    if np.issubdtype(ytr.dtype, np.integer) and np.issubdtype(yte.dtype, np.integer):
        if ytr.ndim != 1 or yte.ndim != 1 or min(ytr.min(), yte.min()) < 0:
            raise bad("integer labels must be a 1-D array of class indices >= 0")
        largest = int(max(ytr.max(), yte.max()))
        if largest >= MAX_CLASSES:
            raise bad(
                f"the largest label is {largest:,}, which would make {largest + 1:,} classes "
                f"(one output each); at most {MAX_CLASSES:,} classes: labels are class "
                "indices 0..classes-1 (float labels make a regression)"
            )
        return Dataset(
            xtr,
            ytr.astype(np.int32),
            xte,
            yte.astype(np.int32),
            "classification",
            largest + 1,
            input_shape,
        )
    ytr = ytr.astype(np.float32).reshape(len(ytr), -1)
    yte = yte.astype(np.float32).reshape(len(yte), -1)
    if ytr.shape[1] != yte.shape[1]:
        raise bad("y_train and y_test have different widths")
    return Dataset(xtr, ytr, xte, yte, "regression", int(ytr.shape[1]), input_shape)


def load_dataset(spec: Any, seed: int) -> Dataset:
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
        try:
            return _npz(spec)
        except MemoryError:
            raise DataError(str(spec.path), _NPZ_FIELD, "too large to load into memory") from None
    raise SimdistError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")


def _missing_keys(path: Path, names: list[str]) -> None:
    missing = [k for k in NPZ_KEYS if k not in names]
    if missing:
        raise DataError(
            str(path),
            _NPZ_FIELD,
            f"missing key(s) {', '.join(missing)}; expected arrays {', '.join(NPZ_KEYS)} "
            f"(it has {', '.join(names) or 'none'})",
        )


def npz_rows(path: Path, key: str) -> int:
    """Rows of array ``key`` of an npz, read from its header without loading the array."""
    try:
        with zipfile.ZipFile(path) as archive:
            _missing_keys(path, [n.removesuffix(".npy") for n in archive.namelist()])
            with archive.open(f"{key}.npy") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape = np.lib.format.read_array_header_1_0(f)[0]
                else:
                    shape = np.lib.format.read_array_header_2_0(f)[0]
    except _UNREADABLE as exc:
        raise DataError(
            str(path), _NPZ_FIELD, f"not a readable .npz archive ({type(exc).__name__}: {exc})"
        ) from None
    if not shape:
        raise DataError(str(path), _NPZ_FIELD, f"{key} has shape (); expected (n, features...)")
    return int(shape[0])


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
