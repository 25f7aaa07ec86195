"""``mode: sync`` with ``backup_workers: b``: synchronous steps that drop the b late gradients.

Chen, Pan, Monga, Bengio & Jozefowicz 2016, "Revisiting distributed
synchronous SGD": every step all N workers pull the same version, compute and
push; the first N−b gradients to arrive are averaged and applied on every PS,
and the b late ones are dropped — their workers are cut off wherever they are.
With b = 0 a step is one_device's step with the global batch. Failures and
checkpoints are not simulated in this mode (the scenario rejects them).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple

import simpy

from simdist.seeds import rng
from simdist.strategies.parameter_server.sync_mean import apply_mean, apply_step
from simdist.strategies.reserved_rows import DEFERRED

if TYPE_CHECKING:
    from simdist.strategies.parameter_server.sync_seeds import PsSyncSeedRun
    from simdist.strategies.parameter_server.workers import ParameterServerWorkers


class Arrival(NamedTuple):
    """A worker whose gradient of the step has reached every PS, at ``time_s``."""

    worker: int
    ticket: int | None  # its deferred gradient evaluation (numerics only)
    time_s: float


def first_arrivals(arrivals: list[Arrival], needed: int, seed: int, step: int) -> list[Arrival]:
    """The arrivals in the order the step takes them: by time, simultaneous ones in a seeded
    random order (never by worker index or the event engine's order); the first ``needed``
    are applied.

    Workers at identical speeds (variability off) arrive together; which of them is late
    is then a draw of the stream ``backup_ties`` for this step, as a race would decide.
    """
    times = [arrival.time_s for arrival in arrivals]
    if len(arrivals) <= needed or len(set(times)) == len(times):
        return sorted(arrivals, key=lambda arrival: arrival.time_s)
    draw = rng(seed, "backup_ties", step).permutation(max(a.worker for a in arrivals) + 1)
    return sorted(arrivals, key=lambda arrival: (arrival.time_s, draw[arrival.worker]))


class SyncWithBackups:
    """The synchronous loop: N workers per step, the first N−b gradients applied."""

    def __init__(self, strategy: ParameterServerWorkers) -> None:
        self.strategy = strategy
        self.env = strategy.env
        self.needed = strategy.n_workers - strategy.options.backup_workers
        #: A deferring run's record of what to compute (:mod:`.sync_seeds`), else None.
        self.seeds: PsSyncSeedRun | None = None
        if strategy.defer:
            from simdist.strategies.parameter_server.sync_seeds import PsSyncSeedRun

            self.seeds = PsSyncSeedRun(strategy)

    def run(self) -> Generator[Any, Any, None]:
        """Every step: all workers pull, compute and push; apply the mean of the first N−b."""
        s, env, needed = self.strategy, self.env, self.needed
        for step in range(s.total_steps):
            start = env.now
            arrivals: list[Arrival] = []
            enough = env.event()
            procs = [
                env.process(self.worker_step(w, step, arrivals, enough)) for w in range(s.n_workers)
            ]
            yield enough
            yield env.timeout(0)  # the other arrivals of this instant land too
            ordered = first_arrivals(arrivals, needed, s.scenario.seed, step)
            accepted = {arrival.worker for arrival in ordered[:needed]}
            for w, proc in enumerate(procs):
                if w not in accepted and proc.is_alive:
                    proc.interrupt("late: backup worker dropped")
            # Let the interrupted processes record their drop at this instant.
            yield env.timeout(0)
            for late in ordered[needed:]:  # arrived at the same instant, too late
                self.drop(late.worker, step, late.ticket)
            yield from s.servers_update(step)
            loss = self.apply(step, ordered[:needed])
            s.progress.applied = step + 1
            if not s.end_step(start, s.progress.applied, loss, lambda: s.final_params):
                return
        if self.seeds is not None:
            s.deferred_run = self.seeds

    def worker_step(
        self, w: int, step: int, arrivals: list[Arrival], enough: simpy.Event
    ) -> Generator[Any, Any, None]:
        """Worker ``w``'s part of step ``step``: pull, compute, push every shard."""
        s = self.strategy
        ticket = None

        def submit() -> None:
            nonlocal ticket
            if pulled.values is not None:
                ticket = s.submit(w, step, pulled.values)

        try:
            pulled = s.servers.pull_all()  # the values are read when the request is issued
            yield from s.work(w, step, on_pulled=submit)
            arrivals.append(Arrival(w, ticket, self.env.now))
            if len(arrivals) == self.needed:
                enough.succeed()
        except simpy.Interrupt:
            # A late (backup) worker: its transfers are cut and its gradient dropped.
            s.cut(w)
            self.drop(w, step, ticket)

    def drop(self, w: int, step: int, ticket: int | None) -> None:
        """Worker ``w``'s gradient of ``step`` came too late: it is dropped."""
        s = self.strategy
        if ticket is not None:
            s.discard(ticket)
        s.progress.dropped += 1
        s.recorder.row("dropped", time_s=self.env.now, worker=w, step=step)

    def apply(self, step: int, accepted: list[Arrival]) -> Any:
        """Every PS applies its shard of the mean accepted gradient; return the mean loss
        (None timing-only; :data:`DEFERRED` when computed later with other runs')."""
        s = self.strategy
        loss = None
        if self.seeds is not None:  # the same, later (sync_seeds); the versions move now
            self.seeds.accepted.append([arrival.worker for arrival in accepted])
            loss = DEFERRED
            apply_mean(s.servers, None, None)
        elif s.numeric:
            results = [s.gradient(a.ticket) for a in accepted if a.ticket is not None]
            if s.compressors is not None:  # what each worker pushed, decompressed by the PS
                results = [
                    (loss, s.compressors.compress(arrival.worker, grads), moments)
                    for arrival, (loss, grads, moments) in zip(accepted, results, strict=True)
                ]
            loss = apply_step(s.servers, results)
        else:  # timing only: the versions move
            apply_mean(s.servers, None, None)
        version = s.servers.versions[0]
        for arrival in accepted:
            s.progress.staleness.append(0)
            row = {
                "time_s": self.env.now,
                "worker": arrival.worker,
                "ps": -1,
                "iteration": step,
                "version": version,
                "staleness": 0,
                "ssp_staleness": 0,
            }
            if self.seeds is not None:  # written with its loss once computed
                self.seeds.rows.append(row)
            else:
                s.recorder.row("updates", **row, loss=math.nan if loss is None else loss)
        return loss
