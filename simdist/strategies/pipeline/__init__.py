"""``pipeline``: the model cut into S stages on S devices, micro-batches flowing through them.

Modules:

* :mod:`.spec` — the scenario's ``strategy:`` section (``Spec``) and its cross-checks;
* :mod:`.plan` — the schedules, the partition and the memory of a stage (pure);
* :mod:`.strategy` — :class:`PipelineStrategy`: stages × copies on the clock, the numerics.

Importing this package loads neither SimPy, JAX nor pandas (scenario loading reads
``Spec``); the strategy class is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simdist.strategies.pipeline.spec import Spec

if TYPE_CHECKING:
    from simdist.strategies.pipeline.strategy import PipelineStrategy

__all__ = ["PipelineStrategy", "Spec"]


def __getattr__(name: str) -> Any:
    """``PipelineStrategy``, imported on first use — PEP 562."""
    if name == "PipelineStrategy":
        from simdist.strategies.pipeline.strategy import PipelineStrategy

        return PipelineStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
