"""Asynchronous training: each worker loops on its own; each PS applies a shard on arrival.

A worker's iteration: wait for the staleness bound (SSP), read every PS's
values and versions, pull the shards, compute a gradient from those possibly
stale values, push each gradient shard to its PS. A PS applies a shard the
moment it arrives; a gradient applied on every PS is one global step.

Two staleness measures are recorded per applied shard (``updates.csv``):
``staleness`` = the PS's version at apply − the version pulled (how many other
updates landed in between), and ``ssp_staleness`` = the worker's clock − the
slowest worker's clock when it pulled (staleness in the SSP sense, in
iterations; ``staleness_bound`` bounds this one).

The run ends when the budget of gradients is claimed and none is in flight —
not when every worker process has returned, so a worker still sitting out a
restart does not stretch the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import simpy

from simdist.strategies.parameter_server.dataflow import Loss
from simdist.strategies.parameter_server.host_updates import HostUpdates
from simdist.strategies.parameter_server.recovery import Recovery

if TYPE_CHECKING:
    from simdist.strategies.parameter_server.workers import ParameterServerWorkers


class InFlight:
    """A worker's gradient from its pull until every PS has applied its shard.

    Updated in place (its ticket, the PS tasks still waiting for their shard): a copy per
    applied shard took 2% of a timing-only run.
    """

    __slots__ = ("applied", "iteration", "pulled", "ssp", "ticket", "versions", "waiting")

    def __init__(
        self,
        iteration: int,
        ssp: int,
        versions: tuple[int, ...],
        waiting: int,
        pulled: Any = None,
    ) -> None:
        self.iteration = iteration  # the worker's clock when it pulled
        self.ssp = ssp  # its clock − the slowest worker's clock at the pull
        self.versions = versions  # the version of each PS it pulled
        self.waiting = waiting  # PS tasks that have not applied their shard yet
        self.ticket: int | None = None  # its gradient in the dataflow (numerics only)
        self.pulled = pulled  # what it read: values, or the state ids of a dataflow run
        self.applied: simpy.Event | None = None  # its worker waiting for the last PS's apply


class AsyncTraining:
    """The worker processes of one asynchronous run, their clocks and their gradients."""

    def __init__(
        self,
        strategy: ParameterServerWorkers,
        advance: Callable[[Callable[[], list[Any]]], None] | None = None,
    ) -> None:
        """``advance(reading)`` runs after every global step (the strategy's dataflow replay
        moving on; ``reading()`` gives the state ids pulled by gradients without a ticket)."""
        self.strategy = strategy
        self.advance = advance
        self.env = strategy.env
        n = strategy.n_workers
        self.clock = [0] * n  # completed iterations per worker (a restore sets it back)
        self.inflight: list[InFlight | None] = [None] * n
        # The workers whose ``inflight`` entry is set: ``check_finished`` asks whether any is,
        # at every tick once the budget is claimed (a scan of ``inflight`` there was O(W²)).
        self.flying: set[int] = set()
        self.claimed = 0  # gradients started (the budget is strategy.total_steps)
        self.stopped = False  # training diverged
        self.procs: list[simpy.Process] = []
        self.progress = self.env.event()  # fires whenever a worker's clock ticks
        self.finished = self.env.event()
        self.hosts: dict[int, HostUpdates] = {}  # each PS host's updates in progress
        self.recovery = Recovery(strategy, self)

    def run(self) -> Generator[Any, Any, None]:
        """Start the workers (and the failures); return when training is done."""
        env, s = self.env, self.strategy
        self.procs = [env.process(self.worker(w)) for w in range(s.n_workers)]
        if s.scenario.faults.failures:
            env.process(self.recovery.failures())
        yield env.any_of([env.all_of(self.procs), self.finished])
        # Lost gradients (worker failures) spend budget, so the last applied step
        # may not be an evaluation point: evaluate the final parameters anyway.
        applied = s.progress.applied
        if s.numeric and s.diverged_at is None and applied and not s.eval_due(applied):
            s.evaluate(applied, s.servers.current())

    @property
    def clock(self) -> list[int]:
        """Completed iterations per worker. Read it only: :meth:`tick` advances an entry and
        assigning a whole list (a restore) resets it, each keeping :attr:`slowest` right."""
        return self._clock

    @clock.setter
    def clock(self, values: Sequence[int]) -> None:
        # How many workers stand at each clock value, and the lowest: ``slowest`` then costs
        # nothing per gradient (``min`` over a thousand workers did, per gradient).
        self._clock = list(values)
        self._at: dict[int, int] = {}
        for value in self._clock:
            self._at[value] = self._at.get(value, 0) + 1
        self._slowest = min(self._clock)

    @property
    def slowest(self) -> int:
        """The slowest worker's clock: ``min(self.clock)``."""
        return self._slowest

    @property
    def spent(self) -> bool:
        """Whether no worker may start another gradient (diverged, or the budget is claimed)."""
        return self.stopped or self.claimed >= self.strategy.total_steps

    def worker(self, w: int) -> Generator[Any, Any, None]:
        """Worker ``w``'s loop; a failure interrupts it wherever it is."""
        cause: Any = None
        while True:
            try:
                if cause is not None:
                    pending, cause = cause, None
                    yield from self.recovery.sit_out(w, pending)
                if self.spent:
                    return
                yield from self.iteration(w)
            except simpy.Interrupt as interrupt:
                self.abandon(w)
                cause = interrupt.cause

    def iteration(self, w: int) -> Generator[Any, Any, None]:
        """Pull, compute, push: one gradient of worker ``w``."""
        s = self.strategy
        yield from self.ssp_wait(w)
        if self.spent:
            return
        self.claimed += 1
        iteration = self.clock[w]
        pulled = s.servers.pull_all()  # the values are read when the request is issued
        gradient = InFlight(
            iteration, iteration - self.slowest, pulled.versions, s.n_ps, pulled=pulled.values
        )
        self.inflight[w] = gradient
        self.flying.add(w)

        def submit() -> None:
            if pulled.values is not None:
                gradient.ticket = s.submit(w, iteration, pulled.values)

        yield from s.work(w, iteration, partial(self.arrived, w), submit)
        if gradient.waiting > 0 and not self.stopped:
            # The PS tasks are still applying it: the worker's step ends with their applies
            # (TensorFlow runs them in the step it calls, on the PS devices).
            gradient.applied = self.env.event()
            yield gradient.applied
        self.inflight[w] = None
        self.flying.discard(w)
        self.tick(w)

    def ssp_wait(self, w: int) -> Generator[Any, Any, None]:
        """Stale synchronous parallel: wait while ``w`` is more than the bound ahead."""
        bound = self.strategy.options.staleness_bound
        if bound is None:
            return
        start = self.env.now
        while self.clock[w] - self.slowest > bound:
            yield self.progress
        devices = self.strategy.cluster.workers[w].devices
        self.strategy.record_devices(
            devices, start, self.env.now, "idle", self.clock[w], "staleness bound"
        )

    def arrived(self, w: int, ps: int) -> None:
        """A gradient shard of ``w`` has reached PS ``ps``: its host applies it, sharing its
        CPU with the updates already in progress (:class:`.host_updates.HostUpdates`; alone,
        :attr:`apply_s`), then :meth:`apply`."""
        s = self.strategy
        seconds = s.apply_s[ps]
        gradient = self.inflight[w]
        if seconds <= 0 or gradient is None or self.stopped:
            self.apply(w, ps)
            return
        start = self.env.now

        def applied() -> None:
            s.record_apply(ps, start, self.env.now, gradient.iteration, f"apply worker {w}")
            if self.inflight[w] is gradient:  # not lost to a failure meanwhile
                self.apply(w, ps)

        host = self.hosts.get(ps)
        if host is None:
            host = self.hosts[ps] = HostUpdates(self.env)
        host.submit(seconds, applied)

    def apply(self, w: int, ps: int) -> None:
        """A gradient shard of ``w`` has reached PS ``ps``: apply it there (asynchronous SGD).

        With numerics the shard is recorded in the dataflow and its values come
        later (:mod:`.replay`): the loss is a placeholder until then. A run found
        to diverge runs again up to the shard whose gradient's loss was not finite
        (``strategy.stop_at`` shards applied before it) and stops there.
        """
        gradient = self.inflight[w]
        if gradient is None or self.stopped:
            return  # training diverged, or the worker failed (its moves are cancelled)
        s = self.strategy
        staleness = s.servers.versions[ps] - gradient.versions[ps]
        loss: Any = math.nan
        if s.dataflow is not None:
            if s.dataflow.applies == s.stop_at:
                self.diverge()
                return
            assert gradient.ticket is not None
            scale = 1.0 / max(1, staleness) if s.options.lr_staleness == "inverse" else 1.0
            loss = Loss(gradient.ticket)
            version = s.servers.apply_ticket(ps, gradient.ticket, scale)
        else:
            version = s.servers.apply(ps, None)
        s.progress.staleness.append(staleness)
        now = self.env.now
        s.log.row(
            "updates",
            time_s=now,
            worker=w,
            ps=ps,
            iteration=gradient.iteration,
            version=version,
            staleness=staleness,
            ssp_staleness=gradient.ssp,
            loss=loss,
        )
        s.log.metric(now, s.progress.applied, "staleness", staleness)
        gradient.waiting -= 1
        if gradient.waiting == 0:
            self.step_done(loss)
            if gradient.applied is not None:
                gradient.applied.succeed()

    def step_done(self, loss: float) -> None:
        """One more gradient is applied on every PS: a global step."""
        s = self.strategy
        s.progress.applied += 1
        applied, now = s.progress.applied, self.env.now
        if s.numeric:
            s.log.metric(now, applied, "train_loss", loss)
            if s.eval_due(applied):
                s.evaluate(applied, s.servers.current())
        if now > 0:
            rate = applied * s.examples_per_step / now
            s.log.metric(now, applied, "examples_per_s", rate)
        s.steps_done = applied
        s.on_step(applied)
        self.recovery.checkpoint_if_due()
        if self.advance is not None:
            self.advance(self.reading)

    def reading(self) -> list[Any]:
        """The state ids read by pulls whose gradients have no ticket yet (the replay keeps
        them for those gradients)."""
        return [g.pulled for g in self.inflight if g is not None and g.ticket is None]

    def diverge(self) -> None:
        """A non-finite loss: stop training (the step it would have made is reported).

        That step counts as done, as in the synchronous loop, so summary.json's
        ``steps`` equals its ``diverged_at_step``.
        """
        if not self.stopped:
            self.stopped = True
            s = self.strategy
            s.diverged_at = s.steps_done = s.progress.applied + 1
            # A worker waiting for its gradient's applies goes on: none will come now.
            for gradient in self.inflight:
                if gradient is not None and gradient.applied is not None:
                    if not gradient.applied.triggered:
                        gradient.applied.succeed()

    def tick(self, w: int) -> None:
        """Worker ``w`` completed an iteration: wake workers waiting on the staleness bound."""
        value, at = self._clock[w], self._at
        self._clock[w] = value + 1
        at[value + 1] = at.get(value + 1, 0) + 1
        at[value] -= 1
        if not at[value]:
            del at[value]
            if value == self._slowest:  # ``w`` was the last at the lowest clock
                self._slowest = value + 1
        event, self.progress = self.progress, self.env.event()
        if event.callbacks:  # a step calling nobody would move no other event: skipped
            event.succeed()
        self.check_finished()

    def abandon(self, w: int) -> None:
        """Worker ``w`` stops (a failure): its transfers are cut, its gradient is lost."""
        s = self.strategy
        s.cut(w)
        gradient = self.inflight[w]
        if gradient is not None:
            s.progress.lost_gradients += 1
        self.inflight[w] = None
        self.flying.discard(w)
        s.pipelines[w] = None
        self.check_finished()

    def check_finished(self) -> None:
        """Training ends when the budget is spent and nothing is in flight.

        Not when every worker process has returned: a worker still sitting
        out a restart must not stretch the run past its last update.
        """
        if self.finished.triggered:
            return
        spent = self.claimed >= self.strategy.total_steps and not self.recovery.restoring
        if self.stopped or (spent and not self.flying):
            self.finished.succeed()
