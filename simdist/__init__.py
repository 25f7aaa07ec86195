"""simdist: a deterministic discrete-event simulator of distributed deep-learning training.

Each strategy is executed for real on JAX devices — true gradients, true
updates, real data — while a SimPy event engine decides *when* each thing
happens.  Same scenario + same seed → byte-identical results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Result", "load_report", "load_scenario", "run"]

if TYPE_CHECKING:
    from simdist.api import Result, load_report, run
    from simdist.scenario import load_scenario


def __getattr__(name: str) -> Any:
    # Lazy, so ``import simdist`` stays cheap and JAX starts only when needed.
    if name in ("run", "load_report", "Result"):
        from simdist import api

        return getattr(api, name)
    if name == "load_scenario":
        from simdist.scenario import load_scenario

        return load_scenario
    raise AttributeError(name)
