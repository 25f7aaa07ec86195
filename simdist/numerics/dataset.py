"""A data set in host memory: the train/test split every replica draws its batches from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np


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
