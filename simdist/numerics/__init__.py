"""Real JAX numerics: models, data, optimizers and gradient execution (never imports simpy).

The names below are loaded on first use (PEP 562), so ``simdist.numerics.data`` (digits,
npz headers; what ``simdist validate`` reads) comes without JAX, Flax or Optax.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "DATASETS": "data",
    "BatchStream": "data",
    "Dataset": "dataset",
    "load_dataset": "data",
    "shard": "data",
    "EXECUTIONS": "executor",
    "DeferredGradients": "deferred",
    "Workload": "executor",
    "ensure_devices": "executor",
    "load_params": "param_files",
    "save_params": "param_files",
    "tree_paths": "param_files",
    "MODELS": "models",
    "make_model": "models",
    "OPTIMIZERS": "optim",
    "SCHEDULES": "optim",
    "apply_updates": "optim",
    "make_optimizer": "optim",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'simdist.numerics' has no attribute {name!r}")
    return getattr(import_module(f"simdist.numerics.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
