"""The names a scenario may use for its model, data set, optimizer, schedule and execution.

One copy, read by the scenario schema (as ``Literal`` types, so pydantic checks them and the
error lists them), by :mod:`simdist.numerics` (which builds each one) and by
``simdist list``. Pure data: importing it pulls in neither JAX nor SimPy.
"""

from __future__ import annotations

import typing
from typing import Literal

__all__ = [
    "DATASETS",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULES",
    "DatasetName",
    "Execution",
    "ModelName",
    "OptimizerName",
    "ScheduleKind",
]

ModelName = Literal["softmax", "mlp", "cnn"]
DatasetName = Literal["digits", "synthetic_regression", "npz"]
OptimizerName = Literal["sgd", "momentum", "adam"]
ScheduleKind = Literal["constant", "cosine", "exponential", "warmup_cosine", "piecewise_constant"]
# How a synchronous strategy computes its replicas' gradients (numerics/executor.py):
# one batched computation, one per real device, or ``auto`` to choose by the devices present.
Execution = Literal["auto", "batched", "devices"]

MODELS: tuple[str, ...] = typing.get_args(ModelName)
DATASETS: tuple[str, ...] = typing.get_args(DatasetName)
OPTIMIZERS: tuple[str, ...] = typing.get_args(OptimizerName)
SCHEDULES: tuple[str, ...] = typing.get_args(ScheduleKind)
