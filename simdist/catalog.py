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
    "FULLSIZE_MODELS",
    "GPT_DEFAULTS",
    "MODELS",
    "MOE_DEFAULTS",
    "OPTIMIZERS",
    "RESNET_DEFAULTS",
    "SCHEDULES",
    "TEACHER_DEFAULTS",
    "DatasetName",
    "Execution",
    "FullsizeModelName",
    "ModelName",
    "OptimizerName",
    "ScheduleKind",
]

# Full-size models for the clock (simdist/numerics/fullsize/): costed layer by layer from
# XLA's cost analysis, never allocated; they run with numerics: false.
FullsizeModelName = Literal[
    "resnet50",
    "resnet101",
    "resnet152",
    "resnet50_v1",
    "resnet152_v1",
    "vgg16",
    "inception_v3",
    "bert_base",
    "gpt2",
    "gpt",
]
# The zoo that trains (simdist/numerics/models.py), then the full-size models: a Literal
# nested in a Literal is flattened into it, so pydantic checks and lists every name.
ModelName = Literal["softmax", "mlp", "cnn", "resnet", "moe", FullsizeModelName]
DatasetName = Literal["digits", "synthetic_regression", "teacher", "npz"]
OptimizerName = Literal["sgd", "momentum", "adam"]
ScheduleKind = Literal["constant", "cosine", "exponential", "warmup_cosine", "piecewise_constant"]
# How a synchronous strategy computes its replicas' gradients (numerics/executor.py):
# one batched computation, one per real device, or ``auto`` to choose by the devices present.
Execution = Literal["auto", "batched", "devices"]

MODELS: tuple[str, ...] = typing.get_args(ModelName)
FULLSIZE_MODELS: tuple[str, ...] = typing.get_args(FullsizeModelName)
# The zoo's resnet when its options are left out: small enough to train on digits in seconds
# (ResNet-18 would be blocks [2, 2, 2, 2], width 64); momentum is Keras BatchNormalization's.
RESNET_DEFAULTS: dict[str, object] = {
    "blocks": [1, 1],
    "width": 16,
    "batch_norm_momentum": 0.99,
    "sync_batch_norm": False,
}
# The configurable ``gpt`` when its options are left out: GPT-2 124M's sizes (Radford et al.
# 2019, Table 2; openai/gpt-2 hparams: 12 layers, d_model 768, 12 heads, 1024 positions,
# vocabulary 50257). ``hidden`` is the model width, ``seq_len`` its positions.
GPT_DEFAULTS: dict[str, int] = {
    "layers": 12,
    "hidden": 768,
    "heads": 12,
    "seq_len": 1024,
    "vocab": 50257,
}
# The zoo's mixture-of-experts classifier (simdist/numerics/moe.py) when its options are left
# out: 8 tokens of a 32-wide model, 8 experts of width 64, top-2 routing (GShard, Lepikhin et
# al. 2020), capacity factor 1.25 and auxiliary-loss weight 0.01 (Switch Transformer, Fedus et
# al. 2021, Sec. 2.2: "alpha = 10^-2 ... throughout this work").
MOE_DEFAULTS: dict[str, object] = {
    "tokens": 8,
    "experts": 8,
    "top_k": 2,
    "capacity_factor": 1.25,
    "aux_loss_weight": 0.01,
}
# The generated ``teacher`` set (simdist/numerics/generated.py) when its options are left
# out: MNIST's size, large enough for large-batch runs; noise 0 labels by the teacher's argmax.
TEACHER_DEFAULTS: dict[str, int | float] = {"n_examples": 60_000, "n_features": 32, "noise": 0.0}
DATASETS: tuple[str, ...] = typing.get_args(DatasetName)
OPTIMIZERS: tuple[str, ...] = typing.get_args(OptimizerName)
SCHEDULES: tuple[str, ...] = typing.get_args(ScheduleKind)
