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
    "GPT_LAYOUT_DEFAULTS",
    "GPT_MOE_DEFAULTS",
    "GPT_PRESETS",
    "MLP_HIDDEN_DEFAULT",
    "MODELS",
    "MOE_DEFAULTS",
    "MOE_HIDDEN_DEFAULT",
    "OPTIMIZERS",
    "RESNET_DEFAULTS",
    "SCHEDULES",
    "TEACHER_DEFAULTS",
    "DatasetName",
    "Execution",
    "FullsizeModelName",
    "GptPreset",
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
# The zoo's mlp when ``hidden`` is left out: one hidden layer of 128 units.
MLP_HIDDEN_DEFAULT: tuple[int, ...] = (128,)
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
# The configurable ``gpt``'s layout when its options are left out: GPT-2's (Radford et al.
# 2019): LayerNorm, a GELU MLP of 4 × hidden (``ffn_hidden``), learned positions, as many
# key/value heads as heads (``kv_heads``), the LM head tied to the token embedding, biases on
# every dense layer and dropout. None: derived from the sizes (4 × hidden, heads).
GPT_LAYOUT_DEFAULTS: dict[str, str | bool | float | None] = {
    "kv_heads": None,
    "ffn_hidden": None,
    "norm": "layernorm",
    "mlp": "gelu",
    "positions": "learned",
    "rope_theta": None,
    "tied_embeddings": True,
    "bias": True,
    "dropout": True,
}
# Published configurations of the configurable ``gpt`` by name (``model: {name: gpt, preset:
# llama3_8b}``): Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783),
# Table 3's layers, model dimension, FFN dimension, attention heads and key/value heads, RoPE
# base frequency 500,000, and the 128,256-token vocabulary of the released tokenizer
# (128,000 + 256 reserved special tokens; Table 3 rounds it to "128,000"); 8,192 positions,
# the main pre-training stage's sequence (Sec. 3.4.1, before the long-context stage).
# RMSNorm, SwiGLU, no biases, no dropout and an output head of its own: the reference
# implementation (github.com/meta-llama/llama3, llama/model.py), as Llama 2 (Touvron et al.
# 2023, Sec. 2.2).
GptPreset = Literal["llama3_8b", "llama3_70b", "llama3_405b"]
_LLAMA3: dict[str, int | str | bool | float] = {
    "seq_len": 8192,
    "vocab": 128_256,
    "kv_heads": 8,
    "norm": "rmsnorm",
    "mlp": "swiglu",
    "positions": "rotary",
    "rope_theta": 500_000.0,
    "tied_embeddings": False,
    "bias": False,
    "dropout": False,
}
GPT_PRESETS: dict[str, dict[str, int | str | bool | float]] = {
    "llama3_8b": {"layers": 32, "hidden": 4096, "ffn_hidden": 14_336, "heads": 32, **_LLAMA3},
    "llama3_70b": {"layers": 80, "hidden": 8192, "ffn_hidden": 28_672, "heads": 64, **_LLAMA3},
    "llama3_405b": {
        "layers": 126,
        "hidden": 16_384,
        "ffn_hidden": 53_248,
        "heads": 128,
        **_LLAMA3,
    },
}
# The zoo's mixture-of-experts classifier (simdist/numerics/moe.py) when its options are left
# out: 8 tokens of a 32-wide model, 8 experts of width 64, top-2 routing (GShard, Lepikhin et
# al. 2020), capacity factor 1.25 and auxiliary-loss weight 0.01 (Switch Transformer, Fedus et
# al. 2021, Sec. 2.2: "alpha = 10^-2 ... throughout this work").
MOE_HIDDEN_DEFAULT: tuple[int, ...] = (32, 64)  # [model width, each expert's width]
MOE_DEFAULTS: dict[str, object] = {
    "tokens": 8,
    "experts": 8,
    "top_k": 2,
    "capacity_factor": 1.25,
    "aux_loss_weight": 0.01,
}
# The configurable ``gpt``'s mixture-of-experts feed-forward layers when ``experts`` is given
# and the others are left out: top-2 routing (GShard, Lepikhin et al. 2020; Mixtral, Jiang et
# al. 2024, arXiv:2401.04088, Sec. 2.1), capacity factor 1.25 (Switch Transformer, Fedus et
# al. 2021, Sec. 2.2) and every block's MLP a MoE layer (Mixtral; ``moe_every: 2`` is GShard's
# and DeepSpeed-MoE's every other block). Each expert is the block's MLP (``mlp`` of
# ``ffn_hidden``). Without ``experts`` the gpt is dense and these stay unset.
GPT_MOE_DEFAULTS: dict[str, int | float] = {"top_k": 2, "capacity_factor": 1.25, "moe_every": 1}
# The generated ``teacher`` set (simdist/numerics/generated.py) when its options are left
# out: MNIST's size, large enough for large-batch runs; noise 0 labels by the teacher's argmax.
TEACHER_DEFAULTS: dict[str, int | float] = {"n_examples": 60_000, "n_features": 32, "noise": 0.0}
DATASETS: tuple[str, ...] = typing.get_args(DatasetName)
OPTIMIZERS: tuple[str, ...] = typing.get_args(OptimizerName)
SCHEDULES: tuple[str, ...] = typing.get_args(ScheduleKind)
