"""Data sets from ``.npz`` files: read safely, checked, and sized from their headers.

No pickles (a data file cannot run code); every way a damaged archive fails becomes one
:class:`~simdist.errors.DataError` naming the file and the scenario field.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simdist.errors import DataError
from simdist.numerics.dataset import Dataset

if TYPE_CHECKING:
    from simdist.scenario.workload import DatasetSpec

NPZ_KEYS: tuple[str, ...] = ("x_train", "y_train", "x_test", "y_test")
#: Most classes an npz data set may have (largest label + 1): more is a mislabelled file,
#: and each class is a column of the output layer.
MAX_CLASSES = 100_000
#: Data-set field of a scenario, for errors that name it.
NPZ_FIELD = "workload.dataset.npz"

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


def npz_dataset(spec: DatasetSpec) -> Dataset:
    """The train/test arrays of ``spec.path``, checked: keys, shapes, values and labels."""
    path = spec.path
    if path is None:
        raise DataError("npz", NPZ_FIELD, "missing; e.g. dataset: {npz: data/mine.npz}")
    path = Path(path)
    if not path.is_file():
        raise DataError(str(path), NPZ_FIELD, "file not found")
    arrays = read_npz(path, NPZ_FIELD, NPZ_KEYS)

    def bad(message: str) -> DataError:
        return DataError(str(path), NPZ_FIELD, message)

    for key in NPZ_KEYS:
        check_values(path, NPZ_FIELD, key, arrays[key])
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


def load_npz(spec: DatasetSpec) -> Dataset:
    """:func:`npz_dataset`, with memory running out while loading one clear error."""
    try:
        return npz_dataset(spec)
    except MemoryError:
        raise DataError(str(spec.path), NPZ_FIELD, "too large to load into memory") from None


def _missing_keys(path: Path, names: list[str]) -> None:
    missing = [k for k in NPZ_KEYS if k not in names]
    if missing:
        raise DataError(
            str(path),
            NPZ_FIELD,
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
            str(path), NPZ_FIELD, f"not a readable .npz archive ({type(exc).__name__}: {exc})"
        ) from None
    if not shape:
        raise DataError(str(path), NPZ_FIELD, f"{key} has shape (); expected (n, features...)")
    return int(shape[0])
