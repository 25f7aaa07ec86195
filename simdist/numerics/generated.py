"""``teacher``: a procedurally generated classification set, labelled by a random network.

Inputs are standard Gaussian vectors ``x ~ N(0, I_d)``. A fixed random *teacher* — one tanh
hidden layer of :data:`TEACHER_WIDTH` units and a linear read-out to ``n_classes`` logits —
labels them (the teacher–student setting of Gardner & Derrida 1989; Saad & Solla 1995). Why
a teacher rather than a bundled file: the set can be as large as a large-batch experiment
needs (Goyal et al. 2017 need many steps of large batches without running out of data), it
is shipped as code, and its difficulty is a number.

Difficulty is the label temperature ``noise``: the label of ``x`` is drawn from
``softmax(z(x) / noise)``, ``z`` the teacher's standardised logits, so ``noise: 0`` is the
teacher's argmax (a student can reach 100 %) and a larger ``noise`` flips more labels near
the class boundaries. :attr:`TeacherData.bayes_accuracy` is the best accuracy any
classifier can reach on the test set (the mean of the largest class probability), the
ceiling a plot of test accuracy should be read against.

Class balance is exact: per-class biases are first tuned so the teacher's classes are about
equally likely, then examples are drawn in chunks and each class keeps its first
``quota`` examples (rejection sampling), so the training set has ``n_train // C`` or one more
of every class, and so has the test set. Everything comes from named streams of the scenario
seed (:mod:`simdist.seeds`): ``"teacher"`` (the weights and their calibration) and
``"teacher_examples"`` (the training set, key 0, and the test set, key 1), so the same seed
gives bit-identical arrays, and a different seed a different teacher.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simdist.seeds import rng

__all__ = ["TEACHER_WIDTH", "TeacherData", "class_quotas", "teacher_arrays"]

#: Hidden units of the teacher network.
TEACHER_WIDTH = 64
#: Inputs drawn to tune the class biases (more: a closer balance before rejection).
_CALIBRATION = 16_384
#: Inputs labelled per chunk while filling the class quotas.
_CHUNK = 8_192


@dataclass(frozen=True)
class TeacherData:
    """The arrays of a teacher set and the best accuracy any classifier reaches on its test
    set (``bayes_accuracy``: the mean, over the test inputs, of the largest label
    probability; 1.0 with ``noise`` 0)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    bayes_accuracy: float


def class_quotas(n: int, n_classes: int) -> np.ndarray:
    """Examples of each class in a set of ``n``: ``n // C``, the first ``n % C`` one more."""
    quotas = np.full(n_classes, n // n_classes, dtype=np.int64)
    quotas[: n % n_classes] += 1
    return quotas


class _Teacher:
    """The random network: standardised logits ``z(x)`` with balancing biases."""

    def __init__(self, n_features: int, n_classes: int, seed: int) -> None:
        gen = rng(seed, "teacher")
        self.w1 = gen.standard_normal((n_features, TEACHER_WIDTH)) / np.sqrt(n_features)
        self.b1 = 0.5 * gen.standard_normal(TEACHER_WIDTH)
        self.w2 = gen.standard_normal((TEACHER_WIDTH, n_classes)) / np.sqrt(TEACHER_WIDTH)
        self.bias = np.zeros(n_classes)
        self.scale = 1.0
        calibration = gen.standard_normal((_CALIBRATION, n_features))
        raw = self._raw(calibration)
        # Unit spread of the logits, so that ``noise`` means the same on every teacher.
        self.scale = float(raw.std()) or 1.0
        z = raw / self.scale
        # Tune each class's bias until the argmax classes are about equally frequent
        # (a fixed number of multiplicative steps on the frequencies: deterministic).
        n_classes = z.shape[1]
        for _ in range(200):
            counts = np.bincount(np.argmax(z + self.bias, axis=1), minlength=n_classes)
            freq = np.maximum(counts, 1) / len(z)
            self.bias -= 0.5 * np.log(freq * n_classes)

    def _raw(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x @ self.w1 + self.b1) @ self.w2

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Standardised, balanced logits ``z(x)`` of inputs ``x`` (rows)."""
        return self._raw(x) / self.scale + self.bias


def _probabilities(z: np.ndarray, noise: float) -> np.ndarray:
    """Label probabilities ``softmax(z / noise)``; one-hot on the argmax for noise 0."""
    if noise == 0:
        return np.eye(z.shape[1])[np.argmax(z, axis=1)]
    a = z / noise
    a = np.exp(a - a.max(axis=1, keepdims=True))
    return a / a.sum(axis=1, keepdims=True)


def _draw(
    teacher: _Teacher, quotas: np.ndarray, n_features: int, noise: float, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs, labels and largest label probabilities filling ``quotas``, in a seeded order."""
    xs, ys, tops = [], [], []
    missing = quotas.copy()
    while missing.any():
        x = gen.standard_normal((_CHUNK, n_features))
        p = _probabilities(teacher.logits(x), noise)
        # Inverse-CDF sampling of one label per row from its probabilities.
        u = gen.random(_CHUNK)[:, None]
        y = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), p.shape[1] - 1)
        keep = np.zeros(_CHUNK, dtype=bool)
        for c in np.flatnonzero(missing):
            rows = np.flatnonzero(y == c)[: missing[c]]
            keep[rows] = True
            missing[c] -= len(rows)
        xs.append(x[keep])
        ys.append(y[keep])
        tops.append(p[keep].max(axis=1))
    order = gen.permutation(int(quotas.sum()))
    x, y, top = (np.concatenate(a)[order] for a in (xs, ys, tops))
    return x.astype(np.float32), y.astype(np.int32), top


@lru_cache(maxsize=4)
def teacher_arrays(
    n_train: int, n_test: int, n_features: int, n_classes: int, noise: float, seed: int
) -> TeacherData:
    """The teacher set of ``seed``: ``n_train`` + ``n_test`` examples of ``n_features``
    Gaussian inputs in ``n_classes`` exactly balanced classes, labels at temperature
    ``noise`` (module docstring).

    The last few sets are kept (read-only): runs that differ in anything but the data — a
    learning-rate or batch-size study — draw and calibrate the teacher once."""
    if n_classes < 2 or n_features < 1 or n_train < 1 or n_test < 1 or noise < 0:
        raise ValueError(
            f"teacher set: n_train {n_train}, n_test {n_test}, n_features {n_features}, "
            f"n_classes {n_classes}, noise {noise}: expected n >= 1, classes >= 2, noise >= 0"
        )
    teacher = _Teacher(n_features, n_classes, seed)
    train, test = (rng(seed, "teacher_examples", key) for key in (0, 1))
    x_tr, y_tr, _ = _draw(teacher, class_quotas(n_train, n_classes), n_features, noise, train)
    x_te, y_te, top = _draw(teacher, class_quotas(n_test, n_classes), n_features, noise, test)
    for array in (x_tr, y_tr, x_te, y_te):
        array.flags.writeable = False
    return TeacherData(x_tr, y_tr, x_te, y_te, float(top.mean()))
