"""The sync/async trade-off in one figure: time to a target accuracy, split in two.

Time to target = updates needed ÷ update throughput. A strategy can lose on either
factor: synchronous SGD applies one update per step, averaged over all N workers, so its
updates are few and good, but a step waits for the slowest worker; asynchronous SGD
applies every worker's gradient on arrival, so its updates are many and cheap, but stale,
and it needs more of them (Dean et al. 2012; Chen et al. 2016, "Revisiting distributed
synchronous SGD", whose backup workers cut the wait for the slowest; Ho et al. 2013 for
SSP's bounded iteration gap). For each run

* ``updates_to_target`` U: applied updates at the first evaluation at or above the target
  (a synchronous update applies the N − b gradients of a step; an asynchronous one, one
  worker's gradient);
* ``updates_per_s`` R = U / T: the update throughput until then;
* ``time_to_target_s`` T = U / R, exactly, by construction;

and, to compare per example, ``examples_per_update`` and ``examples_per_s`` = R × that.

The study's logic is pure (no JAX, no SimPy): it lists the runs
(:func:`tradeoff_runs`: strategies × worker counts × straggler severities) and turns each
run's figures into the decomposition (:func:`decompose`, :func:`tradeoff_summary`).
:func:`tradeoff` (also ``simdist.api.tradeoff``) runs them across seeds through the API,
imported when called; :mod:`simdist.report.tradeoff` draws the figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from simdist.bands import aggregate
from simdist.errors import SimdistError

__all__ = [
    "DEFAULT_SEVERITIES",
    "DEFAULT_WORKERS",
    "STRATEGIES",
    "Tradeoff",
    "TradeoffRun",
    "backups_for",
    "decompose",
    "tradeoff",
    "tradeoff_runs",
    "tradeoff_summary",
]

#: The strategies compared, in plotting order.
STRATEGIES = ("sync", "sync + backups", "SSP", "async")
#: Defaults: small enough that 4 strategies × 4 points × 3 seeds of the digits MLP run in
#: well under a minute, wide enough to show the trend.
DEFAULT_WORKERS = (4, 8, 16)
DEFAULT_SEVERITIES = (1.0, 4.0)
DEFAULT_PROBABILITY = 0.1
DEFAULT_STALENESS_BOUND = 2
#: Each worker's compute per step: 1 ms makes the digits MLP compute-bound (its own
#: roofline time, ~11 µs on the cpu profile, is far below the network's 50 µs latency, so
#: a straggler's extra compute would hide behind the parameter servers' queues).
DEFAULT_COMPUTE_TIME = "1ms"
#: Training length per kind of update: a synchronous step applies N gradients at once, at
#: N times the learning rate (linear scaling, Goyal et al. 2017), and reached 0.95 within
#: 60 steps on digits; asynchronous SGD applies one gradient per update and needed
#: 100-780 updates for 4-16 workers. Evaluations every 2 steps (sync) or 10 updates (async)
#: keep the measured time to target within a few percent of the true crossing.
DEFAULT_SYNC_STEPS = 80
DEFAULT_ASYNC_STEPS = 700
SYNC_EVAL_EVERY = 2
ASYNC_EVAL_EVERY = 10
#: The columns of the per-seed table, after the run's labels.
FIGURES = (
    "time_to_target_s",
    "updates_to_target",
    "updates_per_s",
    "examples_per_update",
    "examples_per_s",
    "final_test_accuracy",
)


def backups_for(workers: int) -> int:
    """Backup workers for ``workers``: one in eight, at least one (Chen et al. 2016 used
    4 of 100, and found a few percent enough; a small cluster needs one to gain at all)."""
    return max(1, workers // 8)


@dataclass(frozen=True)
class TradeoffRun:
    """One run of the study: its labels and the ``--set`` overrides that make it."""

    strategy: str
    workers: int
    severity: float
    seed: int
    overrides: tuple[str, ...]


def _strategy_overrides(strategy: str, workers: int, staleness_bound: int) -> list[str]:
    if strategy == "sync":
        return ["strategy.mode=sync", "strategy.backup_workers=0"]
    if strategy == "sync + backups":
        return ["strategy.mode=sync", f"strategy.backup_workers={backups_for(workers)}"]
    if strategy == "SSP":
        return ["strategy.mode=async", f"strategy.staleness_bound={staleness_bound}"]
    if strategy == "async":
        return ["strategy.mode=async", "strategy.staleness_bound=null"]
    raise ValueError(f"strategy: got {strategy!r}; expected one of {', '.join(STRATEGIES)}")


def grid_points(workers: Sequence[int], severities: Sequence[float]) -> list[tuple[int, float]]:
    """(workers, severity) points: every worker count at the largest severity, then every
    severity at the largest worker count (the shared point once)."""
    fixed_severity, fixed_workers = max(severities), max(workers)
    points = [(n, fixed_severity) for n in workers]
    points += [(fixed_workers, s) for s in severities if (fixed_workers, s) not in points]
    return points


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
) -> list[TradeoffRun]:
    """Every run of the study, ordered by seed (runs of one seed share a data order and
    initial parameters, and the engine reuses their compiled model).

    ``severities`` are slowdown factors: at each step each worker straggles with
    ``probability`` and then computes ``severity`` times slower (1: no stragglers).
    The overrides apply to a parameter_server scenario (``cluster.worker`` is replaced
    by ``cluster.hosts``). ``compute_time`` sets each worker's compute per step (None:
    the scenario's device model). ``learning_rate`` is the scenario's: asynchronous runs
    use it, synchronous ones N times it (linear scaling for their N-fold batch; None:
    the scenario's rate for all).
    """
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
                sync = strategy.startswith("sync")
                steps = sync_steps if sync else async_steps
                every = SYNC_EVAL_EVERY if sync else ASYNC_EVAL_EVERY
                overrides = [
                    "cluster.worker=null",
                    f"cluster.hosts={n}",
                    stragglers,
                    f"workload.steps={steps}",
                    f"workload.eval_every={every}",
                    f"seed={seed}",
                    *_strategy_overrides(strategy, n, staleness_bound),
                ]
                if compute_time is not None:
                    overrides.append(f"cluster.device.compute_time={compute_time}")
                if learning_rate is not None:
                    rate = learning_rate * n if sync else learning_rate
                    overrides.append(f"workload.optimizer.learning_rate={rate!r}")
                runs.append(TradeoffRun(strategy, n, float(severity), seed, tuple(overrides)))
    return runs


def decompose(
    time_to_target_s: float | None,
    updates_to_target: int | None,
    examples_per_update: float,
) -> dict[str, float]:
    """T, U, R = U / T and the same per example; all NaN when the target was not reached."""
    if time_to_target_s is None or updates_to_target is None or not time_to_target_s > 0:
        nan = math.nan
        return {
            "time_to_target_s": nan,
            "updates_to_target": nan,
            "updates_per_s": nan,
            "examples_per_update": examples_per_update,
            "examples_per_s": nan,
        }
    rate = updates_to_target / time_to_target_s
    return {
        "time_to_target_s": time_to_target_s,
        "updates_to_target": float(updates_to_target),
        "updates_per_s": rate,
        "examples_per_update": examples_per_update,
        "examples_per_s": rate * examples_per_update,
    }


def run_row(run: TradeoffRun, summary: dict[str, Any], reached: Any) -> dict[str, Any]:
    """One row of the per-seed table from a run's summary and ``(time_s, step)`` of reaching
    the target (None: not reached)."""
    steps = summary.get("steps") or 0
    per_update = summary["examples"] / steps if steps else math.nan
    time_s, step = (None, None) if reached is None else reached
    return {
        "strategy": run.strategy,
        "workers": run.workers,
        "severity": run.severity,
        "seed": run.seed,
        **decompose(time_s, step, per_update),
        "final_test_accuracy": summary.get("final_test_accuracy"),
        "collapsed": bool(summary.get("collapsed", False)),
        "diverged": bool(summary.get("diverged", False)),
    }


def tradeoff_summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per (strategy, workers, severity): :func:`simdist.bands.aggregate` of the figures
    (``X_mean``, ``X_min``, ``X_max``, ``X_ci95``, ``X_n``; ``time_to_target_s_n`` = the
    seeds that reached the target)."""
    frame = per_seed.copy()
    for column in FIGURES:
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

    def plot(self, fig: Any = None) -> Any:
        """Draw the figure on ``fig`` (a new matplotlib Figure by default); return it."""
        from matplotlib.figure import Figure

        from simdist.report.tradeoff import draw_tradeoff

        fig = fig if fig is not None else Figure(figsize=(10, 9), layout="constrained")
        draw_tradeoff(fig, self.summary, self.target, self.strategies)
        return fig


def tradeoff(
    scenario: str | Path | Any = "scenarios/ps_4w2s.yaml",
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
    overrides: Mapping[str, Any] | Sequence[str] = (),
    out: str | Path | None = None,
    parallel: bool | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
    on_run: Callable[[str], None] | None = None,
) -> Tradeoff:
    """Time to ``target`` accuracy = updates needed ÷ update throughput, for sync, sync +
    backups, SSP and async, against worker count and straggler severity, across seeds.

    ``scenario`` is a parameter_server scenario (default ``scenarios/ps_4w2s.yaml``: the
    digits MLP, so the defaults — 4, 8, 16 workers at slowdown ×4, and ×1, ×4 at 16
    workers; 3 seeds; 48 runs — take well under a minute). Each worker straggles at each
    step with ``probability`` (default 0.1), computing ``severity`` times slower, and
    computes for ``compute_time`` per step (default 1 ms, compute-bound; None: the
    scenario's device model). Sync + backups drops the last ``max(1, N // 8)`` gradients
    of a step; SSP bounds the iteration gap by ``staleness_bound`` (default 2).
    Synchronous runs train ``sync_steps`` steps (default 80) at N times the scenario's
    learning rate (linear scaling for their N-fold batch; ``scale_sync_lr=False`` keeps
    it), asynchronous ones ``async_steps`` updates (default 700). ``overrides`` apply to
    every run. See :mod:`simdist.tradeoff` for the decomposition and :func:`run_many`
    for ``parallel``, ``processes`` and ``scheduler``. With ``out``, writes
    tradeoff.csv, per_seed.csv, tradeoff.md and tradeoff.png there.
    """
    from simdist.api import _source, override_strings, preflight, resolve_scenario
    from simdist.report.compare import time_to_target
    from simdist.runs import run_many, seed_list

    if not 0 < target <= 1:
        raise SimdistError(f"target: got {target:g}; expected an accuracy in (0, 1], e.g. 0.9")
    options = {
        "workers": workers,
        "severities": severities,
        "probability": probability,
        "staleness_bound": staleness_bound,
        "sync_steps": sync_steps,
        "async_steps": async_steps,
    }
    given = {key: value for key, value in options.items() if value is not None}
    strings = override_strings(overrides)
    base = resolve_scenario(scenario, strings)
    kind = base.strategy.kind
    if scale_sync_lr:
        given["learning_rate"] = base.workload.optimizer.learning_rate
    try:
        runs = tradeoff_runs(seed_list(seeds), compute_time=compute_time, **given)
    except ValueError as exc:
        raise SimdistError(f"tradeoff: {exc}") from None
    if kind != "parameter_server":
        raise SimdistError(
            f"tradeoff: the scenario's strategy is {kind}; expected a parameter_server "
            "scenario (sync, backups, SSP and async are its modes), e.g. scenarios/ps_4w2s.yaml"
        )
    scenarios = [resolve_scenario(scenario, [*strings, *r.overrides]) for r in runs]
    for item in scenarios:
        preflight(item, source=_source(scenario))
    if out is not None:
        from simdist.report.tables import check_output_folder

        check_output_folder(Path(out))
    results = run_many(
        scenarios, parallel=parallel, processes=processes, scheduler=scheduler, on_run=on_run
    )
    import pandas as pd

    rows = [
        run_row(r, result.summary, time_to_target(result.metrics, target))
        for r, result in zip(runs, results, strict=True)
    ]
    per_seed = pd.DataFrame(rows)
    strategies = tuple(s for s in STRATEGIES if s in set(per_seed["strategy"]))
    found = Tradeoff(per_seed, tradeoff_summary(per_seed), target, strategies)
    if out is not None:
        from simdist.report.tradeoff import write_tradeoff

        found.out_dir = write_tradeoff(found.summary, per_seed, Path(out), target, strategies)
    return found
