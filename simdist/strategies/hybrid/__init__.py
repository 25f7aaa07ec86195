"""``hybrid``: 3D parallelism — data × pipeline × tensor on the device mesh, with ZeRO, a
context axis (context parallelism: ring attention, :mod:`simdist.strategies.context_ring`)
and an expert axis (a mixture-of-experts gpt's experts, :mod:`.experts`).

Modules:

* :mod:`.spec` — the scenario's ``strategy:`` section (``Spec``), its layout checks and
  its sharding;
* :mod:`.plan` — one stage's tensor-parallel micro-batch ops, its memory and its
  data-axis reduction (pure);
* :mod:`.experts` — the expert axis: a MoE gpt's experts over groups carved out of data ×
  context, each MoE layer's all-to-alls, the routing drawn each step;
* :mod:`.strategy` — :class:`HybridStrategy`: the pipeline schedule on the clock with
  every stage a tensor group, and the data-axis reduction after the flush.

Importing this package loads neither SimPy, JAX nor pandas (scenario loading reads
``Spec``); the strategy class is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simdist.strategies.hybrid.spec import Spec

if TYPE_CHECKING:
    from simdist.strategies.hybrid.strategy import HybridStrategy

__all__ = ["HybridStrategy", "Spec"]


def __getattr__(name: str) -> Any:
    """``HybridStrategy``, imported on first use — PEP 562."""
    if name == "HybridStrategy":
        from simdist.strategies.hybrid.strategy import HybridStrategy

        return HybridStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
