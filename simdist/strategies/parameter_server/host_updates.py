"""A parameter-server task's host CPU applying gradient shards, the updates sharing it.

TensorFlow runs each worker's apply ops on the PS task as they arrive, side by side (the
server's inter-op threads; a variable is updated without a lock by default,
``use_locking=False``), so the updates in progress share the host's memory bandwidth: n of
them each progress at 1/n of it, *processor sharing*. One virtual clock (the work each
update in progress has done since the host was last idle, at full speed) gives every
update's finish as a fixed tag, kept in a heap (Demers, Keshav & Shenker 1989, as
:mod:`simdist.network.groups` does for flows). An update alone takes its seconds
(memory-bound: :attr:`simdist.step_costs.Costs.host_optimizer_step_s`'s share); updates of
one size that arrive together end together, whatever order they arrived in.

Pure bookkeeping on a SimPy clock: no JAX.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class HostUpdates:
    """One host's updates in progress; :meth:`submit` calls ``done()`` when one has ended."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.virtual = 0.0  # the work each update in progress has done, at full speed
        self.since = 0.0  # the simulated time ``virtual`` was taken at
        self.tags: list[tuple[float, int, Callable[[], None]]] = []  # (finish, order, done)
        self.order = 0  # arrivals so far: ties end in arrival order
        self.wake = 0  # the wake-up that counts (earlier ones are stale)

    def submit(self, seconds: float, done: Callable[[], None]) -> None:
        """An update of ``seconds`` (alone) starts now; ``done()`` when it has ended."""
        self._advance()
        heapq.heappush(self.tags, (self.virtual + seconds, self.order, done))
        self.order += 1
        self._schedule()

    def _advance(self) -> None:
        now = self.env.now
        if self.tags:
            self.virtual += (now - self.since) / len(self.tags)
        self.since = now

    def _schedule(self) -> None:
        self.wake += 1
        if not self.tags:
            return
        wake = self.wake
        delay = (self.tags[0][0] - self.virtual) * len(self.tags)
        self.env.timeout(max(delay, 0.0)).callbacks.append(lambda _: self._ended(wake))

    def _ended(self, wake: int) -> None:
        if wake != self.wake:
            return
        self._advance()
        finish = self.tags[0][0]
        self.virtual = finish  # the first tag has been reached (rounding aside)
        ended = []
        while self.tags and self.tags[0][0] <= finish:
            ended.append(heapq.heappop(self.tags)[2])
        self._schedule()
        for done in ended:
            done()
