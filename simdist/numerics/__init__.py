"""Real JAX numerics: models, data, optimizers and gradient execution (never imports simpy)."""

from simdist.numerics.data import DATASETS, BatchStream, Dataset, load_dataset, shard
from simdist.numerics.executor import (
    EXECUTIONS,
    DeferredGradients,
    Workload,
    ensure_devices,
    load_params,
    save_params,
    tree_paths,
)
from simdist.numerics.models import MODELS, make_model
from simdist.numerics.optim import OPTIMIZERS, SCHEDULES, apply_updates, make_optimizer

__all__ = [
    "DATASETS",
    "EXECUTIONS",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULES",
    "BatchStream",
    "Dataset",
    "DeferredGradients",
    "Workload",
    "apply_updates",
    "ensure_devices",
    "load_dataset",
    "load_params",
    "make_model",
    "make_optimizer",
    "save_params",
    "shard",
    "tree_paths",
]
