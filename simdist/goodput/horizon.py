"""The long horizon: days to months of wall clock at the level of steps, checkpoints,
failures and restarts, exact and fast.

Nothing here is drawn per step. Between two events (an interruption, a data-parallel copy
rejoining, the horizon) the job repeats one cycle — k steps of ``step_s``, a wait for the
previous asynchronous write if it is still going, a checkpoint's blocking part — so whole
cycles are advanced at once, and only the cycle an event falls in is walked through. Lost
work is exact: an interruption at time T throws away the steps computed since the last
*completed* checkpoint (an asynchronous one completes when its background write ends) and
the part of the step in progress at T.

Every second of the horizon is in exactly one of: ``useful`` (steps kept, at the full job's
step time), ``degraded`` (the extra time those steps took on fewer data-parallel copies,
elastic recovery only), ``checkpoint`` (blocking writes and waits for a previous write),
``restart`` (down: restarting, reloading, reconfiguring) and ``lost`` (compute thrown away).

* stop-and-restart: any interruption stops the whole job; it restarts after ``restart_s`` +
  the reload, from the last completed checkpoint, with every copy (spares replace the failed
  hosts). An interruption during the restart starts it again. A planned one (maintenance)
  writes a synchronous checkpoint first, so it loses only the step in progress.
* elastic (TorchElastic, Megatron's in-process restart): a GPU or host failure takes out the
  data-parallel copies on it; the others keep their state in memory and go on after
  ``reconfigure_s`` with the same global batch, so each step takes replicas / active times
  longer; the copies rejoin ``rejoin_s`` later (another pause of ``reconfigure_s``). The
  step in progress at a failure or rejoin is redone; a checkpoint being taken is taken
  again. Failures that stop the job (switches, software, maintenance), or that would leave
  fewer than ``min_replicas`` copies, stop and restart it as above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from simdist.goodput.checkpoint import CheckpointCost
from simdist.goodput.failures import Interruptions
from simdist.goodput.rates import JobCause

__all__ = ["Plan", "Tally", "simulate_horizon"]


@dataclass(frozen=True)
class Plan:
    """A job over a horizon: its step, checkpoints and recovery, in seconds."""

    step_s: float
    every_steps: int
    checkpoint: CheckpointCost
    restart_s: float
    horizon_s: float
    replicas: int = 1
    elastic: bool = False
    reconfigure_s: float = 0.0
    rejoin_s: float = math.inf
    min_replicas: int = 1

    @property
    def interval_s(self) -> float:
        """Compute time between two checkpoints (Young's τ)."""
        return self.every_steps * self.step_s

    @property
    def recovery_s(self) -> float:
        """Seconds down at a restart: the stated restart and the reload."""
        return self.restart_s + self.checkpoint.reload_s()


@dataclass
class Tally:
    """Where a horizon's wall clock went, and what interrupted it."""

    wall_s: float = 0.0
    useful_s: float = 0.0
    degraded_s: float = 0.0
    checkpoint_s: float = 0.0
    restart_s: float = 0.0
    lost_s: float = 0.0
    steps: int = 0
    checkpoints: int = 0
    rejoins: int = 0
    interruptions: dict[str, int] = field(default_factory=dict)

    @property
    def goodput(self) -> float:
        """Useful training time ÷ wall time."""
        return self.useful_s / self.wall_s

    @property
    def ettr(self) -> float:
        """Effective training time ratio: the share of the wall clock not lost to
        interruptions (restarts and recomputed work), the reading of Llama 3's "effective
        training time" and of Kokolis et al.'s ETTR; checkpoints count as training time."""
        return (self.wall_s - self.restart_s - self.lost_s) / self.wall_s

    def row(self) -> dict[str, float | int]:
        """The figures as one table row."""
        return {
            "goodput": self.goodput,
            "ettr": self.ettr,
            "wall_s": self.wall_s,
            "useful_s": self.useful_s,
            "degraded_s": self.degraded_s,
            "checkpoint_s": self.checkpoint_s,
            "restart_s": self.restart_s,
            "lost_s": self.lost_s,
            "steps": self.steps,
            "checkpoints": self.checkpoints,
            "rejoins": self.rejoins,
            "interruptions": sum(self.interruptions.values()),
        }


class _Run:
    """One horizon's state; :func:`simulate_horizon` drives it from event to event."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.tally = Tally(wall_s=plan.horizon_s)
        self.t = 0.0
        self.active = plan.replicas
        self.j = 0  # steps done in the current cycle
        self.steps = 0
        self.comp = 0.0  # wall seconds of compute of those steps
        self.saved = (0, 0.0)  # (steps, comp) of the last completed checkpoint
        self.pending: tuple[float, int, float] | None = None  # (write end, steps, comp)
        self.fresh = False  # a checkpoint's blocking part just ended at t
        self.save_until = 0.0  # a planned stop's synchronous save
        self.down_until = 0.0
        self.restarting_until = 0.0  # a whole-job restart: everything that fails restarts it
        self.phase = "compute"
        self.partial = 0.0

    @property
    def step_s(self) -> float:
        return self.plan.step_s * self.plan.replicas / self.active

    def _written(self) -> None:
        """The pending write, if it has ended by now, becomes the last completed checkpoint."""
        if self.pending is not None and self.pending[0] <= self.t:
            self.saved = (self.pending[1], self.pending[2])
            self.pending = None
            self.tally.checkpoints += 1

    def run_until(self, end: float) -> None:
        """Train from ``t`` to ``end``; ``phase`` and ``partial`` say where ``end`` fell."""
        p, tally = self.plan, self.tally
        self.partial = 0.0
        if self.t < self.save_until:
            d = min(self.save_until, end) - self.t
            tally.checkpoint_s += d
            self.t += d
        if self.t < self.down_until:
            d = min(self.down_until, end) - self.t
            tally.restart_s += d
            self.t += d
        if self.t >= end:
            self.phase = "down"
            return
        k, S = p.every_steps, self.step_s
        c, w = p.checkpoint.blocking_s, p.checkpoint.background_s
        while True:
            self._written()
            if self.j == 0 and self.fresh:
                cycle = c + max(k * S, w)
                n = math.floor((end - self.t) / cycle) - 1
                if n >= 1:
                    self.t += n * cycle
                    self.steps += n * k
                    self.comp += n * k * S
                    tally.checkpoint_s += n * (cycle - k * S)
                    tally.checkpoints += n
                    if w > 0:
                        self.saved = (self.steps - k, self.comp - k * S)
                        self.pending = (self.t + w, self.steps, self.comp)
                    else:
                        self.saved = (self.steps, self.comp)
            self.fresh = False
            need = (k - self.j) * S
            if self.t + need > end:
                done = min(int((end - self.t) // S), k - self.j - 1)
                self.steps += done
                self.comp += done * S
                self.j += done
                self.partial = end - self.t - done * S
                self.t = end
                self._written()
                self.phase = "compute"
                return
            self.steps += k - self.j
            self.comp += need
            self.t += need
            self.j = k
            self._written()
            if self.pending is not None:
                if self.pending[0] > end:
                    tally.checkpoint_s += end - self.t
                    self.t = end
                    self.phase = "stall"
                    return
                tally.checkpoint_s += self.pending[0] - self.t
                self.t = self.pending[0]
                self._written()
            if self.t + c > end:
                tally.checkpoint_s += end - self.t
                self.t = end
                self.phase = "blocking"
                return
            tally.checkpoint_s += c
            self.t += c
            if w > 0:
                self.pending = (self.t + w, self.steps, self.comp)
            else:
                self.saved = (self.steps, self.comp)
                tally.checkpoints += 1
            self.j = 0
            self.fresh = True

    def _pause(self) -> None:
        """The step in progress is redone; a checkpoint being taken is taken again."""
        self.tally.lost_s += self.partial
        if self.phase == "blocking":
            self.j = self.plan.every_steps

    def stop(self, planned: bool) -> None:
        """The whole job stops at ``t`` and restarts from its last completed checkpoint."""
        p, tally = self.plan, self.tally
        tally.lost_s += self.partial
        self.save_until = self.t
        if planned and self.phase != "down":
            self.saved = (self.steps, self.comp)
            self.save_until = self.t + p.checkpoint.save_s
        tally.lost_s += self.comp - self.saved[1]
        self.steps, self.comp = self.saved
        self.pending = None
        self.active = p.replicas
        self.j = 0
        self.fresh = False
        self.down_until = self.save_until + p.recovery_s
        self.restarting_until = self.down_until

    def lose(self, replicas: int) -> None:
        """Elastic: ``replicas`` copies drop out at ``t``; the others reconfigure."""
        self._pause()
        self.active -= replicas
        self.fresh = False
        self.down_until = max(self.down_until, self.t + self.plan.reconfigure_s)

    def rejoin(self, replicas: int) -> None:
        """Elastic: ``replicas`` copies come back at ``t``."""
        self._pause()
        self.active = min(self.plan.replicas, self.active + replicas)
        self.fresh = False
        self.tally.rejoins += 1
        self.down_until = max(self.down_until, self.t + self.plan.reconfigure_s)

    def close(self) -> Tally:
        """The horizon's tally: steps still unsaved at the end are kept (a final checkpoint
        would save them); the step in progress is not."""
        tally = self.tally
        tally.lost_s += self.partial
        tally.steps = self.steps
        tally.useful_s = self.steps * self.plan.step_s
        tally.degraded_s = self.comp - tally.useful_s
        return tally


def simulate_horizon(
    plan: Plan,
    causes: Sequence[JobCause],
    seed: int,
    distribution: str = "exponential",
    shape: float = 1.0,
    *,
    failures: Sequence[tuple[float, int]] | None = None,
) -> Tally:
    """Train ``plan`` over its horizon under ``causes``' interruptions (drawn from ``seed``,
    or the given ``failures``: (time, cause index) pairs in time order, for hand cases)."""
    run = _Run(plan)
    if failures is None:
        stream = Interruptions(causes, seed, distribution, shape)
        draw = stream.next
    else:
        given = iter([*failures, (math.inf, -1)])

        def draw() -> tuple[float, int]:
            return next(given)

    next_t, kind = draw()
    rejoins: list[tuple[float, int]] = []
    while True:
        rejoin_t = rejoins[0][0] if rejoins else math.inf
        end = min(next_t, rejoin_t, plan.horizon_s)
        run.run_until(end)
        if end >= plan.horizon_s:
            break
        if rejoin_t <= next_t:
            _, count = rejoins.pop(0)
            run.rejoin(count)
            continue
        cause = causes[kind]
        name = cause.cause.name
        run.tally.interruptions[name] = run.tally.interruptions.get(name, 0) + 1
        lost = cause.replicas_lost if plan.elastic else 0
        restarting = run.t < run.restarting_until
        if lost and not restarting and run.active - lost >= plan.min_replicas:
            run.lose(lost)
            rejoins.append((run.t + plan.rejoin_s, lost))
            rejoins.sort()
        else:
            run.stop(cause.cause.planned)
            rejoins.clear()
        next_t, kind = draw()
    return run.close()
