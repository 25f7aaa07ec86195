"""The sync/async trade-off in one figure: time to a target accuracy, split in two.

Time to target = updates needed ÷ update throughput. A strategy can lose on either
factor: synchronous SGD applies one update per step, averaged over all N workers, so its
updates are few and good, but a step waits for the slowest worker; asynchronous SGD
applies every worker's gradient on arrival, so its updates are many and cheap, but stale,
and it needs more of them (Dean et al. 2012; Chen et al. 2016, "Revisiting distributed
synchronous SGD", whose backup workers cut the wait for the slowest; Ho et al. 2013 for
SSP's bounded iteration gap). The study runs the **full grid**: every strategy at every
(worker count, straggler severity) cell, once per seed, so it makes
cells × strategies × seeds runs. For each run

* ``time_to_target_s`` T and ``updates_to_target`` U: where test accuracy crosses the
  target, **interpolated** linearly between the last evaluation below it and the first
  at or above it (:func:`crossing`), in simulated time and in updates alike, so U is
  fractional. Without it a strategy evaluated every 2 steps and one evaluated every 10
  updates would read the crossing late by different amounts;
* ``updates_per_s`` R = U / T: the update throughput until then (T = U / R exactly);
* ``gradients_per_update`` G: the worker gradients one update applies, from the run's
  definition (:func:`gradients_per_update`: N − b for synchronous SGD with b backups, 1
  for asynchronous and SSP), so that work compares in gradients as well as in updates:
  ``gradients_to_target`` = U × G and ``gradients_per_s`` = R × G;
* ``examples_per_update`` and ``examples_per_s`` = R × that, to compare per example.

Whether two strategies differ is read from their min–max bands of T over seeds
(:func:`band_separations`): bands that overlap cannot be told apart with that many seeds.

The study's logic is pure (no JAX, no SimPy): the runs (:func:`tradeoff_runs`), the
decomposition (:func:`decompose`, :func:`tradeoff_summary`), the bands. :func:`tradeoff`
(also ``simdist.api.tradeoff``) runs them (:func:`simdist.studies.runs.run_many`);
:mod:`simdist.report.tradeoff` draws the figure and words the bands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from simdist.bands import aggregate, band_separations
from simdist.errors import SimdistError
from simdist.runtime.preflight import preflight
from simdist.scenario.load import resolve_scenario
from simdist.scenario.overrides import override_strings
from simdist.studies.runs import ScenarioLike, run_many, seed_list, source_name
from simdist.studies.tradeoff_variants import (
    ALLREDUCE,
    LOCAL_SGD,
    STRATEGIES,
    backups_for,
    compressed_strategy,
    gradients_per_update,
    strategy_overrides,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULT_SEVERITIES",
    "DEFAULT_WORKERS",
    "STRATEGIES",
    "Tradeoff",
    "TradeoffRun",
    "backups_for",
    "crossing",
    "decompose",
    "gradients_per_update",
    "grid_points",
    "tradeoff",
    "tradeoff_runs",
    "tradeoff_summary",
]

#: Defaults: the full grid of 3 worker counts × 2 severities, i.e. 6 cells × 4 strategies
#: × 3 seeds = 72 runs of the digits MLP (about 50 s on 2 cores), wide enough to show
#: the trend.
DEFAULT_WORKERS = (4, 8, 16)
DEFAULT_SEVERITIES = (1.0, 4.0)
DEFAULT_PROBABILITY = 0.1
DEFAULT_STALENESS_BOUND = 2
#: Each worker's compute per step: 1 ms makes the digits MLP compute-bound (its own
#: roofline time, ~11 µs on the cpu profile, is far below the network's 50 µs latency, so
#: a straggler's extra compute would hide behind the parameter servers' queues).
DEFAULT_COMPUTE_TIME = "1ms"
#: Training length per kind of update: a synchronous step applies N gradients at once, at
#: N times the learning rate (linear scaling, Goyal et al. 2017), and reached 0.9 within
#: 18-71 steps on digits; asynchronous SGD applies one gradient per update and needed
#: 108-627 updates for 4-16 workers (with step-time variability, the default). Async on 16
#: workers without stragglers does not reach 0.9 within 700 updates (it ends at 48-70%:
#: a result, reported as "reached by 0 of 3"). Evaluations every 2 steps (sync) or 10 updates
#: (async); the crossing is interpolated between them (:func:`crossing`), so the two
#: granularities do not bias the comparison.
DEFAULT_SYNC_STEPS = 80
DEFAULT_ASYNC_STEPS = 700
SYNC_EVAL_EVERY = 2
ASYNC_EVAL_EVERY = 10
#: The columns of the per-seed table, after the run's labels.
FIGURES = (
    "time_to_target_s",
    "updates_to_target",
    "updates_per_s",
    "gradients_per_update",
    "gradients_to_target",
    "gradients_per_s",
    "examples_per_update",
    "examples_per_s",
    "final_test_accuracy",
    "simulated_time_s",
)


@dataclass(frozen=True)
class TradeoffRun:
    """One run of the study: its labels and the ``--set`` overrides that make it."""

    strategy: str
    workers: int
    severity: float
    seed: int
    overrides: tuple[str, ...]


def grid_points(workers: Sequence[int], severities: Sequence[float]) -> list[tuple[int, float]]:
    """The study's cells: every (workers, severity) pair, worker count first, each once.

    The full grid, not a cross through one corner: the effect of stragglers is then seen
    at every worker count, and that of scale at every severity.
    """
    return list(dict.fromkeys((n, float(s)) for n in workers for s in severities))


def tradeoff_runs(
    seeds: Sequence[int],
    *,
    workers: Sequence[int] = DEFAULT_WORKERS,
    severities: Sequence[float] = DEFAULT_SEVERITIES,
    probability: float = DEFAULT_PROBABILITY,
    staleness_bound: int = DEFAULT_STALENESS_BOUND,
    sync_steps: int = DEFAULT_SYNC_STEPS,
    async_steps: int = DEFAULT_ASYNC_STEPS,
    compute_time: str | None = DEFAULT_COMPUTE_TIME,
    learning_rate: float | None = None,
    strategies: Sequence[str] = STRATEGIES,
    compression: Sequence[str] = (),
    local_sgd: Sequence[int] = (),
) -> list[TradeoffRun]:
    """Every run of the study: each strategy in each cell of the full grid
    (:func:`grid_points`) for each seed, so cells × strategies × seeds runs. Ordered by
    seed (runs of one seed share a data order and initial parameters, and the engine
    reuses their compiled model), then cell, then strategy.

    ``severities`` are slowdown factors: at each step each worker straggles with
    ``probability`` and then computes ``severity`` times slower (1: no stragglers).
    The overrides apply to a parameter_server scenario (``cluster.worker`` is replaced
    by ``cluster.hosts``). ``compute_time`` sets each worker's compute per step (None:
    the scenario's device model). ``learning_rate`` is the scenario's: asynchronous runs
    use it, synchronous ones N times it (linear scaling for their N-fold batch; None:
    the scenario's rate for all). ``compression`` adds, per entry, a synchronous variant
    run as ``multi_worker_mirrored`` on the same hosts (one ring all-reduce, no PS tasks)
    with that gradient compression (:func:`compressed_strategy`), trained like sync;
    ``local_sgd``, per entry H, a ``local_sgd`` variant syncing every H steps.
    """
    strategies = [*strategies, *(compressed_strategy(v)[0] for v in compression)]
    strategies += [f"{LOCAL_SGD}{h}" for h in local_sgd]
    if not workers or not severities:
        raise ValueError("tradeoff: give at least one worker count and one severity")
    if any(n < 2 for n in workers):
        raise ValueError(f"workers: got {list(workers)}; expected counts >= 2, e.g. 4,8,16")
    if any(not s >= 1 for s in severities):
        raise ValueError(f"severities: got {list(severities)}; expected factors >= 1, e.g. 1,4")
    if not 0 < probability <= 1:
        raise ValueError(f"probability: got {probability}; expected a fraction in (0, 1]")
    runs = []
    for seed in seeds:
        for n, severity in grid_points(workers, severities):
            stragglers = (
                "faults.stragglers=[]"
                if severity == 1
                else f"faults.stragglers=[{{probability: {probability}, slowdown: {severity}}}]"
            )
            for strategy in strategies:
                sync = strategy.startswith(("sync", ALLREDUCE, LOCAL_SGD))
                steps = sync_steps if sync else async_steps
                every = SYNC_EVAL_EVERY if sync else ASYNC_EVAL_EVERY
                overrides = [
                    "cluster.worker=null",
                    f"cluster.hosts={n}",
                    stragglers,
                    f"workload.steps={steps}",
                    f"workload.eval_every={every}",
                    f"seed={seed}",
                    *strategy_overrides(strategy, n, staleness_bound),
                ]
                if compute_time is not None:
                    overrides.append(f"cluster.device.compute_time={compute_time}")
                if learning_rate is not None:
                    rate = learning_rate * n if sync else learning_rate
                    overrides.append(f"workload.optimizer.learning_rate={rate!r}")
                runs.append(TradeoffRun(strategy, n, float(severity), seed, tuple(overrides)))
    return runs


def crossing(metrics: pd.DataFrame, target: float) -> tuple[float, float] | None:
    """``(time_s, updates)`` at which test accuracy crosses ``target``, interpolated.

    ``metrics`` is a run's tidy ``time_s, step, metric, value`` frame; its
    ``test_accuracy`` rows are the evaluations, ``step`` the updates applied by then.
    Between the last evaluation below the target (t0, u0, a0) and the first at or above
    it (t1, u1, a1) accuracy is taken as linear, so
    ``t* = t0 + (target − a0) / (a1 − a0) · (t1 − t0)`` and likewise ``u*`` (fractional).
    Why: the first evaluation at or above the target is late by up to one evaluation
    interval, and sync (every 2 steps) and async (every 10 updates) have different ones.
    If the first evaluation already reaches the target, its own time and updates are
    returned. None when no evaluation reaches it (or none was made: timing-only runs).
    """
    evals = metrics[metrics["metric"] == "test_accuracy"].sort_values("time_s", kind="stable")
    accuracy = evals["value"].to_numpy(dtype=float)
    above = (accuracy >= target).nonzero()[0]
    if len(above) == 0:
        return None
    i = int(above[0])
    times, updates = evals["time_s"].to_numpy(float), evals["step"].to_numpy(float)
    if i == 0:
        return float(times[0]), float(updates[0])
    a0, a1 = accuracy[i - 1], accuracy[i]
    share = (target - a0) / (a1 - a0)  # a0 < target <= a1, so a1 > a0
    time_s = times[i - 1] + share * (times[i] - times[i - 1])
    return float(time_s), float(updates[i - 1] + share * (updates[i] - updates[i - 1]))


def decompose(
    time_to_target_s: float | None,
    updates_to_target: float | None,
    examples_per_update: float,
    gradients_per_update: float,
) -> dict[str, float]:
    """T, U, R = U / T, and the same per gradient and per example.

    ``gradients_to_target`` = U × ``gradients_per_update`` (work in worker gradients, the
    unit in which sync and async updates compare) and ``gradients_per_s`` = R × that.
    The per-update sizes are kept when the target was not reached; the rest is NaN.
    """
    sizes = {
        "gradients_per_update": float(gradients_per_update),
        "examples_per_update": examples_per_update,
    }
    if time_to_target_s is None or updates_to_target is None or not time_to_target_s > 0:
        nan = math.nan
        return {
            "time_to_target_s": nan,
            "updates_to_target": nan,
            "updates_per_s": nan,
            "gradients_to_target": nan,
            "gradients_per_s": nan,
            "examples_per_s": nan,
            **sizes,
        }
    rate = updates_to_target / time_to_target_s
    return {
        "time_to_target_s": time_to_target_s,
        "updates_to_target": float(updates_to_target),
        "updates_per_s": rate,
        "gradients_to_target": updates_to_target * gradients_per_update,
        "gradients_per_s": rate * gradients_per_update,
        "examples_per_s": rate * examples_per_update,
        **sizes,
    }


def run_row(
    run: TradeoffRun, summary: dict[str, Any], reached: tuple[float, float] | None
) -> dict[str, Any]:
    """One row of the per-seed table from a run's summary and its :func:`crossing`
    ``(time_s, updates)`` (None: the target was not reached)."""
    steps = summary.get("steps") or 0
    per_update = summary["examples"] / steps if steps else math.nan
    time_s, updates = (None, None) if reached is None else reached
    split = decompose(time_s, updates, per_update, gradients_per_update(run.strategy, run.workers))
    return {
        "strategy": run.strategy,
        "workers": run.workers,
        "severity": run.severity,
        "seed": run.seed,
        **{column: split[column] for column in FIGURES if column in split},
        "final_test_accuracy": summary.get("final_test_accuracy"),
        "simulated_time_s": summary.get("simulated_time_s"),
        "collapsed": bool(summary.get("collapsed", False)),
        "diverged": bool(summary.get("diverged", False)),
    }


def tradeoff_summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, workers, severity): :func:`simdist.bands.aggregate` of the figures
    (``X_mean``, ``X_min``, ``X_max``, ``X_ci95``, ``X_n``; ``time_to_target_s_n`` = the
    seeds that reached the target)."""
    frame = per_seed.copy()
    for column in (c for c in FIGURES if c in frame):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return aggregate(frame, ["strategy", "workers", "severity"])


# ---------------------------------------------------------------- running the study


@dataclass
class Tradeoff:
    """What :func:`tradeoff` produced: per-seed rows, their summary, and the folder."""

    per_seed: pd.DataFrame
    summary: pd.DataFrame
    target: float
    strategies: tuple[str, ...]
    out_dir: Path | None = None

    def plot(self, fig: Figure | None = None) -> Figure:
        """Draw the figure on ``fig`` (a new matplotlib Figure by default); return it."""
        from matplotlib.figure import Figure

        from simdist.report.tradeoff import draw_tradeoff, figure_size

        if fig is None:
            fig = Figure(figsize=figure_size(self.summary), layout="constrained")
        draw_tradeoff(fig, self.summary, self.target, self.strategies)
        return fig

    def separations(self) -> pd.DataFrame:
        """:func:`band_separations` of the per-seed rows: per cell, the fastest strategy
        and whose band of time to target overlaps it."""
        return band_separations(self.per_seed)


def tradeoff(
    scenario: ScenarioLike = "scenarios/ps_4w2s.yaml",
    *,
    workers: Sequence[int] | None = None,
    severities: Sequence[float] | None = None,
    probability: float | None = None,
    seeds: int | Sequence[int] = 3,
    target: float = 0.9,
    staleness_bound: int | None = None,
    sync_steps: int | None = None,
    async_steps: int | None = None,
    compute_time: str | None = "1ms",
    scale_sync_lr: bool = True,
    compression: Sequence[str] = (),
    local_sgd: Sequence[int] = (),
    overrides: Mapping[str, Any] | Sequence[str] = (),
    out: str | Path | None = None,
    parallel: bool | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
    on_run: Callable[[str], None] | None = None,
) -> Tradeoff:
    """Time to ``target`` accuracy = updates needed ÷ update throughput, for sync, sync +
    backups, SSP and async, at every (worker count, straggler severity) pair, across seeds.

    The full grid: every strategy in every cell for every seed, i.e. len(workers) ×
    len(severities) × 4 strategies × seeds runs. ``scenario`` is a parameter_server
    scenario (default ``scenarios/ps_4w2s.yaml``: the digits MLP, so the defaults — 4, 8,
    16 workers × slowdown ×1, ×4; 3 seeds; 6 × 4 × 3 = 72 runs — take about 50 s on two
    cores). Time to target is interpolated between evaluations (:func:`crossing`); work is
    counted in updates and in worker gradients (:func:`gradients_per_update`). Each worker
    straggles at each step with ``probability`` (default 0.1), computing ``severity``
    times slower, and computes for ``compute_time`` per step (default 1 ms, compute-bound;
    None: the scenario's device model). Sync + backups drops the last ``max(1, N // 8)`` gradients
    of a step; SSP bounds the iteration gap by ``staleness_bound`` (default 2).
    Synchronous runs train ``sync_steps`` steps (default 80) at N times the scenario's
    learning rate (linear scaling for their N-fold batch; ``scale_sync_lr=False`` keeps
    it), asynchronous ones ``async_steps`` updates (default 700). ``compression`` (e.g.
    ``["fp16", "powersgd:2", "topk:0.01"]``) adds compressed all-reduce variants
    (:func:`compressed_strategy`; none by default); ``local_sgd`` (e.g. ``[4, 16]``)
    local SGD variants syncing every H steps (none by default). ``overrides`` apply to
    every run. See :mod:`simdist.studies.tradeoff` for the decomposition, :func:`band_separations`
    for which strategies the seeds can tell apart, and :func:`run_many` for ``parallel``,
    ``processes`` and ``scheduler``. With ``out``, writes tradeoff.csv, per_seed.csv,
    tradeoff.md and tradeoff.png there.
    """
    if not 0 < target <= 1:
        raise SimdistError(f"target: got {target:g}; expected an accuracy in (0, 1], e.g. 0.9")
    options = {
        "workers": workers,
        "severities": severities,
        "probability": probability,
        "staleness_bound": staleness_bound,
        "sync_steps": sync_steps,
        "async_steps": async_steps,
        "compression": tuple(compression) or None,
        "local_sgd": tuple(local_sgd) or None,
    }
    given = {key: value for key, value in options.items() if value is not None}
    strings = override_strings(overrides)
    runs = _study_runs(scenario, strings, seed_list(seeds), compute_time, scale_sync_lr, given)
    scenarios = [resolve_scenario(scenario, [*strings, *r.overrides]) for r in runs]
    for item in scenarios:
        preflight(item, source=source_name(scenario))
    if out is not None:
        from simdist.report.tables import check_output_folder

        check_output_folder(Path(out))
    labels = [
        f"{r.strategy}, {r.workers} workers, slowdown ×{r.severity:g}, seed {r.seed}" for r in runs
    ]
    results = run_many(
        scenarios,
        parallel=parallel,
        processes=processes,
        scheduler=scheduler,
        on_run=on_run,
        labels=labels,
    )
    rows = [
        run_row(r, result.summary, crossing(result.metrics, target))
        for r, result in zip(runs, results, strict=True)
    ]
    per_seed = pd.DataFrame(rows)
    seen = set(per_seed["strategy"])
    strategies = tuple(s for s in STRATEGIES if s in seen) + tuple(
        dict.fromkeys(s for s in per_seed["strategy"] if s not in STRATEGIES)
    )
    found = Tradeoff(per_seed, tradeoff_summary(per_seed), target, strategies)
    if out is not None:
        from simdist.report.tradeoff import write_tradeoff

        found.out_dir = write_tradeoff(found.summary, per_seed, Path(out), target, strategies)
    return found


def _study_runs(
    scenario: ScenarioLike,
    strings: list[str],
    seeds: list[int],
    compute_time: str | None,
    scale_sync_lr: bool,
    given: dict[str, Any],
) -> list[TradeoffRun]:
    """:func:`tradeoff_runs` for ``scenario`` (its learning rate with ``scale_sync_lr``);
    a :class:`SimdistError` for bad options or a scenario that is not parameter_server."""
    base = resolve_scenario(scenario, strings)
    if scale_sync_lr:
        given = {**given, "learning_rate": base.workload.optimizer.learning_rate}
    try:
        runs = tradeoff_runs(seeds, compute_time=compute_time, **given)
    except ValueError as exc:
        raise SimdistError(f"tradeoff: {exc}") from None
    if not base.strategy.tradeoff_base:
        raise SimdistError(
            f"tradeoff: the scenario's strategy is {base.strategy.kind}; expected a "
            "parameter_server scenario (sync, backups, SSP and async are its modes), e.g. "
            "scenarios/ps_4w2s.yaml"
        )
    return runs
