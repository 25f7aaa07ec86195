"""Goodput studies: a horizon over many seeds, the checkpoint interval swept, the cluster
grown, stop-and-restart against elastic recovery, and the Llama 3 count checked.

Each study is many independent horizons (:func:`simdist.goodput.horizon.simulate_horizon`),
one per (setting, seed); the seeds of every setting are the same (common random numbers), so
two settings differ by the setting, not by their draws. Tables have one row per horizon;
:func:`simdist.bands.aggregate` turns them into mean, min–max and 95% interval per setting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from simdist.goodput.horizon import Plan, Tally, simulate_horizon
from simdist.goodput.rates import Cause, JobCause, Layout, job_causes
from simdist.goodput.young_daly import daly_interval, first_order_goodput, young_interval

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Study",
    "fit_optimum",
    "poisson_band",
]


@dataclass(frozen=True)
class Study:
    """A job over a horizon, and how it fails: what every goodput figure is computed from."""

    plan: Plan
    layout: Layout
    causes: tuple[Cause, ...]
    distribution: str = "exponential"
    shape: float = 1.0
    seeds: int = 20
    hosts_per_switch: int = 2

    def job_causes(self, plan: Plan | None = None, layout: Layout | None = None) -> list[JobCause]:
        """Each cause's rate for this job, and what it takes out under its recovery."""
        plan = plan or self.plan
        return job_causes(self.causes, layout or self.layout, plan.elastic)

    def mtbf_s(self, layout: Layout | None = None) -> float:
        """The job's mean time between interruptions, 1 / Λ."""
        total = sum(c.rate_per_s for c in job_causes(self.causes, layout or self.layout, False))
        return math.inf if total == 0 else 1.0 / total

    def horizon(self, seed: int, plan: Plan | None = None, layout: Layout | None = None) -> Tally:
        """One horizon under ``seed``."""
        plan = plan or self.plan
        causes = self.job_causes(plan, layout)
        return simulate_horizon(plan, causes, seed, self.distribution, self.shape)

    def rows(
        self, plan: Plan | None = None, layout: Layout | None = None, **labels: Any
    ) -> list[dict[str, Any]]:
        """One row per seed: ``labels``, the seed and the horizon's figures."""
        return [
            {**labels, "seed": seed, **self.horizon(seed, plan, layout).row()}
            for seed in range(self.seeds)
        ]

    def per_seed(self) -> pd.DataFrame:
        """The plan over every seed."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def recovery(self) -> pd.DataFrame:
        """Stop-and-restart against elastic recovery, per seed (same draws)."""
        import pandas as pd

        rows = []
        for elastic in (False, True):
            plan = replace(self.plan, elastic=elastic)
            rows += self.rows(plan, recovery="elastic" if elastic else "restart")
        return pd.DataFrame(rows)

    def interruptions(self) -> pd.DataFrame:
        """Interruptions by cause: expected from the rates, and as simulated over the seeds
        (mean, min, max)."""
        import pandas as pd

        causes = self.job_causes()
        counts = {c.cause.name: [] for c in causes}
        for seed in range(self.seeds):
            found = self.horizon(seed).interruptions
            for name in counts:
                counts[name].append(found.get(name, 0))
        rows = [
            {
                "cause": c.cause.name,
                "component": c.cause.component,
                "per_component_day": c.cause.per_day,
                "planned": c.cause.planned,
                "expected": c.rate_per_s * self.plan.horizon_s,
                "mean": sum(counts[c.cause.name]) / self.seeds,
                "min": min(counts[c.cause.name]),
                "max": max(counts[c.cause.name]),
            }
            for c in causes
        ]
        return pd.DataFrame(rows)

    def intervals(self, every_steps: Sequence[int] | None = None) -> pd.DataFrame:
        """Goodput against the checkpoint interval, per seed; by default 13 intervals from a
        quarter to four times Young's optimum."""
        import pandas as pd

        if every_steps is None:
            every_steps = self.default_intervals()
        rows = []
        for k in every_steps:
            plan = replace(self.plan, every_steps=int(k))
            rows += self.rows(plan, every_steps=int(k), interval_s=plan.interval_s)
        return pd.DataFrame(rows)

    def default_intervals(self) -> list[int]:
        """13 checkpoint intervals (in steps) spaced evenly in log from ¼ to 4 × Young's."""
        tau = young_interval(self.plan.checkpoint.blocking_s, self.mtbf_s())
        best = tau / self.plan.step_s
        steps = {max(1, round(best * 2 ** (i / 3))) for i in range(-6, 7)}
        return sorted(steps)

    def young(self) -> dict[str, float]:
        """The closed forms for this job: M, δ, Young's and Daly's τ and their goodput."""
        delta, mtbf = self.plan.checkpoint.blocking_s, self.mtbf_s()
        tau = young_interval(delta, mtbf)
        return {
            "mtbf_s": mtbf,
            "delta_s": delta,
            "restart_s": self.plan.recovery_s,
            "young_interval_s": tau,
            "daly_interval_s": daly_interval(delta, mtbf),
            "first_order_goodput": first_order_goodput(tau, delta, mtbf, self.plan.recovery_s),
        }

    def scaled(self, gpus: int) -> Layout:
        """This job's layout grown (or shrunk) to about ``gpus`` GPUs by its data-parallel
        copies, each copy's GPUs and hosts as now."""
        lay = self.layout
        per_replica = lay.gpus / lay.replicas
        replicas = max(1, round(gpus / per_replica))
        total = round(replicas * per_replica)
        per_host = lay.gpus / lay.hosts
        hosts = max(1, math.ceil(total / per_host))
        switches = max(1, math.ceil(hosts / self.hosts_per_switch))
        return Layout(total, hosts, switches, replicas, lay.replicas_per_host)

    def sizes(self, gpus: Sequence[int], seeds: int | None = None) -> pd.DataFrame:
        """Goodput against the job's size, per seed: stop-and-restart and elastic, each at the
        plan's checkpoint interval and at Young's optimum for that size (the step time and
        the bytes per GPU held as measured: weak scaling)."""
        import pandas as pd

        study = replace(self, seeds=seeds or self.seeds)
        rows = []
        for n in gpus:
            layout = self.scaled(n)
            tau = young_interval(self.plan.checkpoint.blocking_s, self.mtbf_s(layout))
            young_steps = max(1, round(tau / self.plan.step_s))
            for elastic in (False, True):
                for label, k in (("plan", self.plan.every_steps), ("young", young_steps)):
                    plan = replace(
                        self.plan, every_steps=k, elastic=elastic, replicas=layout.replicas
                    )
                    rows += study.rows(
                        plan,
                        layout,
                        gpus=layout.gpus,
                        recovery="elastic" if elastic else "restart",
                        interval=label,
                        every_steps=k,
                        mtbf_s=self.mtbf_s(layout),
                    )
        return pd.DataFrame(rows)


def fit_optimum(summary: pd.DataFrame) -> tuple[float, float]:
    """The interval of least waste and its goodput, from a sweep's means: a least-squares fit
    of waste = a/τ + b·τ + c (the form of the first-order waste), whose minimum is at
    τ = √(a/b). Reading the optimum off a fit rather than the best point keeps the seeds'
    noise, which is flat near the optimum, from choosing it."""
    import numpy as np

    tau = summary["interval_s"].to_numpy(dtype=float)
    waste = 1.0 - summary["goodput_mean"].to_numpy(dtype=float)
    design = np.column_stack([1.0 / tau, tau, np.ones_like(tau)])
    (a, b, c), *_ = np.linalg.lstsq(design, waste, rcond=None)
    if a <= 0 or b <= 0:
        best = int(np.argmin(waste))
        return float(tau[best]), float(1.0 - waste[best])
    opt = math.sqrt(a / b)
    return opt, float(1.0 - (a / opt + b * opt + c))


def poisson_band(mean: float, confidence: float = 0.95) -> tuple[int, int]:
    """The central ``confidence`` interval of a Poisson count of ``mean``: the smallest
    [low, high] with P(X < low) ≤ (1 − confidence)/2 and P(X > high) ≤ (1 − confidence)/2."""
    tail = (1.0 - confidence) / 2.0
    if mean <= 0:
        return 0, 0
    cdf, low = 0.0, None
    k = 0
    while True:
        cdf += math.exp(k * math.log(mean) - mean - math.lgamma(k + 1))
        if low is None and cdf > tail:
            low = k
        if cdf >= 1.0 - tail:
            return low if low is not None else k, k
        k += 1
