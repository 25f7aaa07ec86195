"""``expert_parallel``: a mixture-of-experts model with its experts spread over devices.

Modules:

* :mod:`.spec` — the scenario's ``strategy:`` section (``Spec``): the ``data`` × ``expert``
  mesh, the routing of timing-only runs, its cross-checks and memory;
* :mod:`.plan` — the tokens each device sends each other from one step's routing, the
  expert compute they cost, and one step as a walk of compute spans and all-to-alls (pure);
* :mod:`.strategy` — :class:`ExpertParallelStrategy`: the walk on the clock, the
  gradient all-reduces, the numerics, the routing tables.

Importing this package loads neither SimPy, JAX nor pandas (scenario loading reads
``Spec``); the strategy class is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simdist.strategies.expert_parallel.spec import Spec

if TYPE_CHECKING:
    from simdist.strategies.expert_parallel.strategy import ExpertParallelStrategy

__all__ = ["ExpertParallelStrategy", "Spec"]


def __getattr__(name: str) -> Any:
    """``ExpertParallelStrategy``, imported on first use — PEP 562."""
    if name == "ExpertParallelStrategy":
        from simdist.strategies.expert_parallel.strategy import ExpertParallelStrategy

        return ExpertParallelStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
