"""Checkpoints and failures of an asynchronous parameter-server run, and the restore.

* Checkpoints: when one is due (after a global step), the coordinator
  (``cluster.coordinator``) snapshots the PS tasks and writes them in the
  background, without stopping the workers; the snapshot becomes the restore
  point once written. A PS failure during the write voids it.
* A worker fails (``worker N`` or ``device N``) at its failure time: it is
  interrupted wherever it is, its in-flight gradient is lost, and it rejoins
  after its restart with a fresh pull while the others go on. A failure of a
  worker that is already down, or has finished, is moot.
* A PS fails: every task stops; after the PS's restart and the restore of the
  last checkpoint (or of the initial state, for free) all PS tasks, the
  workers' clocks and the step count are rolled back and everyone resumes.
  While a restore is under way another PS's failure is moot, and the restoring
  entry's own next failure waits for the restore to end: a failure entry is
  handled one failure at a time.

The failure times of all entries come from one :class:`~simdist.hardware.faults.FailureSchedule`,
consumed in time order by one process.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from simdist.hardware.faults import FailureSchedule, ProgressWatch
from simdist.strategies.parameter_server.servers import ServerState

if TYPE_CHECKING:
    import simpy

    from simdist.scenario.effects import FailureSpec
    from simdist.strategies.parameter_server.workers import ParameterServerWorkers

#: The interrupt cause of a worker stopped by a PS failure (a worker failure's is its restart_s).
ROLLBACK = "ps"


class Snapshot(NamedTuple):
    """What a PS failure rolls every task back to.

    ``saved_s`` is when the tasks last held this state (the checkpoint was
    written, or a restore finished); ``written`` is False for the implicit
    snapshot of the initial state, which costs nothing to restore.
    """

    applied: int
    clock: tuple[int, ...]
    servers: ServerState
    saved_s: float
    written: bool


class Training(Protocol):
    """What the recovery reads and rolls back of the asynchronous loop
    (:class:`~.async_loop.AsyncTraining`)."""

    clock: Sequence[int]  # completed iterations per worker
    claimed: int  # gradients started
    stopped: bool  # training diverged
    procs: list[simpy.Process]  # the worker processes


class Recovery:
    """Checkpoints, failures and restores of one asynchronous run."""

    def __init__(self, strategy: ParameterServerWorkers, training: Training) -> None:
        self.strategy = strategy
        self.training = training
        self.env = strategy.env
        self.saved = self.snapshot(float(self.env.now), written=False)
        self.checkpointing = False
        self.restoring = False  # a PS failure is being recovered: workers wait for resume
        self.resume = self.env.event()
        self.epoch = 0  # PS failures so far; a checkpoint begun before one is void
        self.failing: FailureSpec | None = None  # the failure entry whose PS is being restored
        self.again: list[FailureSpec] = []  # its failures during that restore: each fires after one
        self.down = [False] * strategy.n_workers  # sitting out a restart
        self.watch = ProgressWatch()  # failures without the run getting further

    def snapshot(self, saved_s: float, written: bool) -> Snapshot:
        """The state of the run now: references, so later updates do not change it."""
        s = self.strategy
        return Snapshot(
            s.progress.applied, tuple(self.training.clock), s.servers.state(), saved_s, written
        )

    # -- checkpoints -----------------------------------------------------------

    def checkpoint_if_due(self) -> None:
        """After a global step: start writing a checkpoint if one is due and none is under way."""
        s = self.strategy
        if not self.checkpointing and s.checkpoint_due(s.progress.applied, self.saved.saved_s):
            self.env.process(self.write_checkpoint())

    def write_checkpoint(self) -> Generator[Any, Any, None]:
        """The coordinator saves the PS variables in the background; valid once written."""
        s = self.strategy
        self.checkpointing = True
        start, epoch = self.env.now, self.epoch
        state = self.snapshot(start, written=True)
        yield self.env.timeout(s.checkpoint_s)
        if epoch != self.epoch:  # a PS failed while the coordinator was reading it
            self.checkpointing = False
            return
        s.record_task(
            s.cluster.coordinator,
            start,
            self.env.now,
            "checkpoint",
            state.applied,
            "write",
            s.costs.checkpoint_nbytes,
        )
        self.saved = state._replace(saved_s=self.env.now)
        self.checkpointing = False

    # -- failures --------------------------------------------------------------

    def failures(self) -> Generator[Any, Any, None]:
        """Fire every failure at its time (the engine stops when training ends)."""
        s = self.strategy
        schedule = FailureSchedule(
            s.scenario.faults.failures, s.scenario.seed, ("worker", "device", "ps")
        )
        while (head := schedule.peek()) is not None:
            at, spec = head
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            schedule.pop_before(math.inf)
            if self.training.stopped or s.progress.applied >= s.total_steps:
                return
            if spec.role == "ps":
                if not self.restoring:
                    self.ps_failure(spec)
                elif spec is self.failing:  # it fails again as soon as it is restored
                    self.again.append(spec)
                # else another PS failed while everyone is down for a restore: moot
            else:
                self.worker_failure(spec)

    def worker_failure(self, spec: FailureSpec) -> None:
        """Worker ``spec`` targets fails now: interrupt it (unless it is down or done)."""
        s, training = self.strategy, self.training
        w = spec.index if spec.role == "worker" else spec.index // s.cluster.devices_per_host
        if self.down[w] or not training.procs[w].is_alive:
            return
        self.watch.failed(s.progress.applied, self.env.now)
        s.failures += 1
        host = s.cluster.workers[w].name
        now = self.env.now
        s.record_task(host, now, now + spec.restart_s, "failure", training.clock[w], spec.target)
        training.procs[w].interrupt(spec.restart_s)

    def sit_out(self, w: int, cause: float | str) -> Generator[Any, Any, None]:
        """Worker ``w`` sits out its restart, or waits for the PS tasks to be restored."""
        s, env = self.strategy, self.env
        devices = s.cluster.workers[w].devices
        start = env.now
        if cause == ROLLBACK:
            yield self.resume
            s.record_devices(
                devices,
                start,
                env.now,
                "restore",
                self.training.clock[w],
                "PS rolled back to the last checkpoint",
            )
        else:
            restart_s = float(cause)
            self.down[w] = True
            yield env.timeout(restart_s)
            self.down[w] = False
            s.record_devices(devices, start, env.now, "restart", self.training.clock[w])
            s.time_lost_s += restart_s
            while self.restoring:  # restarted while the PS tasks are being restored
                waited = env.now
                yield self.resume
                s.record_devices(devices, waited, env.now, "restore", self.training.clock[w])
        s.pipelines[w] = s.new_pipeline()

    def ps_failure(self, spec: FailureSpec) -> None:
        """A PS task fails now: everyone stops; all PS tasks roll back to the last checkpoint."""
        s, env = self.strategy, self.env
        self.watch.failed(s.progress.applied, env.now)
        s.failures += 1
        saved, now = self.saved, env.now
        restart_s = spec.restart_s
        restore_s = s.checkpoint_s if saved.written else 0.0
        host = s.cluster.ps_hosts[spec.index].name
        s.record_task(host, now, now + restart_s, "failure", s.progress.applied, spec.target)
        s.record_task(
            host,
            now + restart_s,
            now + restart_s + restore_s,
            "restore",
            saved.applied,
            "checkpoint" if saved.written else "initial state",
            s.costs.checkpoint_nbytes if saved.written else 0,
        )
        self.resume = env.event()
        self.restoring = True
        self.failing = spec
        self.epoch += 1
        self.checkpointing = False
        for w, proc in enumerate(self.training.procs):
            if proc.is_alive:
                proc.interrupt(ROLLBACK)
            self.down[w] = False
        s.lost_steps += s.progress.applied - saved.applied
        s.time_lost_s += (now - saved.saved_s) + restart_s + restore_s
        env.timeout(restart_s + restore_s).callbacks.append(lambda _: self.restored(saved))

    def restored(self, saved: Snapshot) -> None:
        """The PS tasks are back as ``saved`` holds them: everyone resumes from there."""
        s, training = self.strategy, self.training
        s.progress.applied = training.claimed = saved.applied
        training.clock = list(saved.clock)
        s.servers.restore(saved.servers)
        self.saved = saved._replace(saved_s=self.env.now)
        self.restoring = False
        self.failing = None
        self.resume.succeed()
        if self.again:
            spec = self.again.pop(0)
            if not (training.stopped or s.progress.applied >= s.total_steps):
                self.ps_failure(spec)
