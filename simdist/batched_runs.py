"""Batched runs: the values of several runs computed together, each as it would be alone.

A run's clock does not depend on its values (a synchronous step's length, an
asynchronous worker's pull and push, are set by costs, links and seeded draws), so
several runs — typically the seeds of one scenario in ``simdist compare --seeds`` or a
trade-off study — can be *simulated* one after another with their numerics deferred,
and then *computed* together (:func:`simdist.runtime.engine.run_batch`). A strategy that
supports it (:meth:`simdist.strategies.base.Strategy.defers`) records during the
simulation what it would compute and leaves a :class:`DeferredRun`; runs whose DeferredRuns
have equal :attr:`~DeferredRun.key` (the same compiled programs) are computed in one
:meth:`~DeferredRun.execute`, which fills in each run's values (metrics, final parameters)
or, for a run whose loss turns out not to be finite, asks for a second pass
(``Strategy.rerun_with``), exactly as that run alone would.

Byte-identity is the rule: each run's report equals the report of that run alone
(tests/test_batched_runs.py). A batch computes nothing a run alone does not: each family's
step is written once, over runs' lanes, and a run alone takes it with one lane
(:mod:`simdist.numerics.lanes`: the synchronous family's ``SyncTrainer.step``, gpipe and
1f1b's ``PipelineTrainer.step``); parameter_server ``mode: sync`` puts every run's
gradients in the 8-wide waves a run alone fills
(:class:`~simdist.numerics.deferred.DeferredGradients`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from typing import ClassVar

__all__ = ["DeferredRun"]


class DeferredRun(ABC):
    """What a run whose numerics were deferred leaves at the end of its simulation."""

    #: Runs computed in one group, as soon as that many are simulated (fewer at the end of
    #: a batch): what the class's widest program holds, or less.
    group_runs: ClassVar[int] = 4

    @property
    @abstractmethod
    def key(self) -> Hashable:
        """DeferredRuns of the same class with equal keys may be computed in one
        :meth:`execute` (they share compiled programs)."""

    @classmethod
    @abstractmethod
    def execute(cls, members: Sequence[DeferredRun]) -> None:
        """Compute every member's numerics together, then let each finish its run: write
        the values it waited for, or set its strategy's ``rerun_with`` (a divergence)."""
