"""A diagnostic: run SimPy with simultaneous events taken in a seeded random order.

SimPy processes the events of one simulated instant (and one priority) in the order they
were scheduled, and simdist keeps that order wherever it saves events
(``links.Countdown``, ``FairShare.later``). No result may *depend* on that order: it is an
artefact of the engine, not something a cluster does. :func:`random_ties` breaks the ties
by a seeded random key instead (time and priority still first), so that a run can be
repeated under other tie orders and its figures compared (``benchmarks/tie_order.py``,
``tests/test_variability.py``). It patches SimPy's ``Environment.schedule`` for the whole
process while it is active: a tool for benchmarks and tests, never used by a run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import simpy.core

from simdist.network.fair import FairShare
from simdist.sim import next_event_id, schedule_keyed


@contextmanager
def random_ties(seed: int) -> Iterator[None]:
    """Within the block, events of equal time and priority run in a seeded random order.

    Arrivals batched in one event (``FairShare.later``) get a timeout each again: a batch
    keeps the order of its members, which is what is being varied here.
    """
    draw = random.Random(seed).random

    def schedule(
        env: simpy.core.Environment, event: Any, priority: int = simpy.core.NORMAL, delay: float = 0
    ) -> None:
        schedule_keyed(env, event, delay, (draw(), next_event_id(env)), priority)

    def later(self: FairShare, delay_s: float, call: Any) -> None:
        self.env.timeout(delay_s).callbacks.append(call)

    original = simpy.core.Environment.schedule, FairShare.later
    simpy.core.Environment.schedule = schedule  # type: ignore[method-assign]
    FairShare.later = later  # type: ignore[method-assign]
    try:
        yield
    finally:
        simpy.core.Environment.schedule, FairShare.later = original  # type: ignore[method-assign]
