"""What a report's figures read of a run: a picklable view of its result.

The painter (:mod:`simdist.report.painter`) sends it to the process that draws, and the
Chrome trace (:mod:`simdist.report.trace`) reads it there; both take it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from simdist.runtime.engine import Result
    from simdist.scenario import Scenario

__all__ = ["Drawn"]


@dataclass
class Drawn:
    """What the plots read of a run's result: a picklable view of it."""

    metrics: pd.DataFrame
    events: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    summary: dict[str, Any]
    scenario: Scenario

    @classmethod
    def of(cls, result: Result) -> Drawn:
        """The view of ``result`` the plots read (its params stay in this process)."""
        return cls(result.metrics, result.events, result.tables, result.summary, result.scenario)
