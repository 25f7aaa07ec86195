"""How a strategy splits a replica's model state and activations over devices.

Pure data (no SimPy, no JAX), read by the memory model: one copy of the parameters, of
their gradients, of the optimizer state and of a batch's activations is split over this
many devices. Data parallelism splits nothing (all 1); ZeRO stage 1 splits the optimizer
state over the data-parallel group, stage 2 the gradients too, stage 3 the parameters too
(Rajbhandari et al. 2020, "ZeRO", Sec. 5); Megatron tensor parallelism splits the
parameters, gradients and optimizer state of its blocks over the tensor group (Shoeybi et
al. 2019). Activations (:mod:`simdist.activation_memory`): the tensors Megatron splits
inside a block are split over ``tensor`` devices; with sequence parallelism every stored
tensor is, over ``activations`` devices (Korthikanti et al. 2022, Table 2). Context
parallelism splits every sequence, and so every stored tensor, over ``context`` devices
(each holds s/CP positions: :mod:`simdist.strategies.context_ring`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Sharding"]


@dataclass(frozen=True)
class Sharding:
    """Devices one copy of each part of the model state is split over (1: replicated), and
    the tensor group that splits a block's inner activations."""

    params: int = 1
    gradients: int = 1
    optimizer: int = 1
    activations: int = 1
    tensor: int = 1
    context: int = 1

    def __post_init__(self) -> None:
        parts = {
            "params": self.params,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "tensor": self.tensor,
            "context": self.context,
        }
        for name, value in parts.items():
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"Sharding.{name} must be an int >= 1, got {value!r}")
