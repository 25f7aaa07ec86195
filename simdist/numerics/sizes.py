"""How large a data set is and what a model trained on it sees, without loading it.

``simdist validate`` checks a scenario's batch against the training set and the model
against its inputs before anything runs; these answers come from arithmetic on the data
spec, the digits file's labels and an npz file's array headers. Nothing here imports
NumPy at module level (it costs validate about 0.1 s); :mod:`simdist.numerics.data`
builds the data sets themselves.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from simdist.catalog import DATASETS
from simdist.errors import DataError, SimdistError

if TYPE_CHECKING:
    from simdist.scenario.workload import DatasetSpec


def n_test(n: int, test_fraction: float, name: str = "dataset") -> int:
    """Examples of ``n`` held out for testing; a fraction leaving either set empty is refused."""
    held = round(n * float(test_fraction))
    if not 0 < held < n:
        raise DataError(
            name,
            "workload.dataset.test_fraction",
            f"test_fraction {test_fraction} leaves {held} of {n} examples for testing; "
            "choose a fraction that keeps both sets non-empty, e.g. 0.2",
        )
    return held


def digits_file() -> Path:
    """The 8×8 digits CSV that scikit-learn ships, found without importing scikit-learn.

    Importing scikit-learn costs about a second; only its data file is needed.
    ``find_spec`` of a top-level package locates it without running its ``__init__``.
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SimdistError(
            "dataset digits needs scikit-learn installed (it ships the data file); "
            "pip install scikit-learn"
        )
    for root in spec.submodule_search_locations:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    raise SimdistError("scikit-learn is installed but its datasets/data/digits.csv.gz is missing")


@lru_cache(maxsize=1)
def digits_label_counts() -> dict[int, int]:
    """How many of the digits file's examples each class has (its last column: the label)."""
    import gzip

    counts: dict[int, int] = {}
    with gzip.open(digits_file(), "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                label = int(float(line.rsplit(",", 1)[1]))
                counts[label] = counts.get(label, 0) + 1
    return counts


def model_inputs(spec: DatasetSpec, seed: int) -> tuple[tuple[int, ...], int]:
    """(one example's shape, outputs) a model trained on ``load_dataset(spec, seed)`` sees.

    Generated data is not drawn for this; an npz file is read whole (and so checked).
    """
    if spec.name == "digits":
        return (8, 8, 1), 10
    if spec.name == "synthetic_regression":
        return (int(spec.n_features),), 1
    if spec.name == "teacher":
        return (int(spec.n_features),), int(spec.n_classes)
    if spec.name == "npz":
        from simdist.numerics.npz import load_npz

        data = load_npz(spec)
        return tuple(data.input_shape), int(data.n_outputs)
    raise SimdistError(f"unknown dataset {spec.name!r}; expected one of {', '.join(DATASETS)}")


def train_examples(spec: DatasetSpec, seed: int) -> int:
    """Size of the training set ``load_dataset(spec, seed)`` gives, without building it.

    Cheap enough to check a scenario before a run: arithmetic for generated data, the
    digits file's labels (each class is split in proportion), the array header for an
    npz file.
    """
    name = spec.name
    if name == "digits":
        counts = digits_label_counts()
        n_test(sum(counts.values()), spec.test_fraction, "digits")
        return sum(c - round(c * float(spec.test_fraction)) for c in counts.values())
    if name in ("synthetic_regression", "teacher"):
        n = int(spec.n_examples)
        return n - n_test(n, spec.test_fraction, name)
    if name == "npz":
        from simdist.numerics.npz import npz_rows

        return npz_rows(Path(spec.path), "x_train")
    raise SimdistError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
