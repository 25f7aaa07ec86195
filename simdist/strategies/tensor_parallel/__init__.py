"""``tensor_parallel``: Megatron-LM's tensor parallelism, each layer's matmuls split over T devices.

Modules:

* :mod:`.spec` — the scenario's ``strategy:`` section (``Spec``), its cross-checks and the
  split models' sizes;
* :mod:`.plan` — which layers are split and how, and one step as a walk of compute spans
  and tensor-group collectives (pure);
* :mod:`.strategy` — :class:`TensorParallelStrategy`: the walk on the clock, the
  data-parallel all-reduce, the numerics.

Importing this package loads neither SimPy, JAX nor pandas (scenario loading reads
``Spec``); the strategy class is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simdist.strategies.tensor_parallel.spec import Spec

if TYPE_CHECKING:
    from simdist.strategies.tensor_parallel.strategy import TensorParallelStrategy

__all__ = ["Spec", "TensorParallelStrategy"]


def __getattr__(name: str) -> Any:
    """``TensorParallelStrategy``, imported on first use — PEP 562."""
    if name == "TensorParallelStrategy":
        from simdist.strategies.tensor_parallel.strategy import TensorParallelStrategy

        return TensorParallelStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
