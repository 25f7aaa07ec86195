"""``simdist goodput``: a scenario's long horizon, from the engine's step to the figures.

Measure the step and the checkpoint bytes on the scenario (:mod:`simdist.goodput.measure`),
then run the horizon over every seed, stop-and-restart against elastic, the interval sweep
and the cluster-size sweep (:mod:`simdist.goodput.study`), and write them into a report
folder (:mod:`simdist.goodput.report`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simdist.goodput.measure import Measured, build_study
from simdist.goodput.study import Study, fit_optimum

if TYPE_CHECKING:
    import pandas as pd

    from simdist.scenario import Scenario

__all__ = ["DEFAULT_SIZES", "Goodput", "goodput", "summarize"]


@dataclass
class Goodput:
    """A goodput study's inputs, tables and figures' numbers; ``out_dir`` once written."""

    name: str
    study: Study
    measured: Measured | None
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    out_dir: Path | None = None


#: The cluster sizes of the size figure, GPUs: 1k to 128k.
DEFAULT_SIZES = (1024, 4096, 16384, 65536, 131072)


def summarize(
    study: Study,
    measured: Measured | None = None,
    *,
    intervals: Sequence[int] | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    size_seeds: int = 5,
) -> Goodput:
    """Every table of a study and the summary of its numbers (no files). The size sweep runs
    ``size_seeds`` seeds (its largest jobs fail thousands of times a horizon)."""
    from simdist.bands import aggregate

    per_seed = study.per_seed()
    recovery = study.recovery()
    swept = study.intervals(intervals)
    interval_bands = aggregate(swept.drop(columns="seed"), ["every_steps", "interval_s"])
    grown = study.sizes(sizes, seeds=min(study.seeds, size_seeds))
    size_bands = aggregate(grown.drop(columns="seed"), ["gpus", "recovery", "interval"])
    recovery_bands = aggregate(recovery.drop(columns="seed"), ["recovery"])
    optimum_s, optimum_goodput = fit_optimum(interval_bands)
    plan = study.plan
    bands = aggregate(per_seed.drop(columns="seed").assign(plan="plan"), ["plan"]).iloc[0]
    summary: dict[str, Any] = {
        "horizon_s": plan.horizon_s,
        "seeds": study.seeds,
        "gpus": study.layout.gpus,
        "hosts": study.layout.hosts,
        "switches": study.layout.switches,
        "replicas": study.layout.replicas,
        "step_s": plan.step_s,
        "every_steps": plan.every_steps,
        "interval_s": plan.interval_s,
        "checkpoint_nbytes_per_device": plan.checkpoint.nbytes,
        "checkpoint_mode": plan.checkpoint.mode,
        "checkpoint_blocking_s": plan.checkpoint.blocking_s,
        "checkpoint_background_s": plan.checkpoint.background_s,
        "recovery": "elastic" if plan.elastic else "restart",
        "simulated_optimum_interval_s": optimum_s,
        "simulated_optimum_goodput": optimum_goodput,
        **study.young(),
    }
    for column in ("goodput", "ettr", "interruptions", "checkpoint_s", "restart_s", "lost_s",
                   "degraded_s", "useful_s"):  # fmt: skip
        for stat in ("mean", "min", "max", "ci95"):
            summary[f"{column}_{stat}"] = float(bands[f"{column}_{stat}"])
    for row in recovery_bands.itertuples(index=False):
        summary[f"goodput_{row.recovery}_mean"] = float(row.goodput_mean)
    if measured is not None:
        summary["measured_step_s"] = measured.measured_step_s
        summary["measured_steps"] = measured.steps
        summary["slice_devices"] = measured.slice_devices
    tables = {
        "per_seed": per_seed,
        "interruptions": study.interruptions(),
        "recovery": recovery,
        "intervals": swept,
        "interval_bands": interval_bands,
        "sizes": grown,
        "size_bands": size_bands,
    }
    return Goodput("goodput", study, measured, summary, tables)


def goodput(
    scenario: str | Path | Scenario | Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | Sequence[str] = (),
    out: str | Path | None = None,
    source: str | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> Goodput:
    """The goodput study of a scenario with a ``goodput:`` section; its report written into
    ``out`` when given. Bad input raises one :class:`~simdist.errors.ScenarioError`."""
    from simdist.scenario.load import resolve_scenario
    from simdist.studies.runs import source_name

    say = on_phase or (lambda what: None)
    resolved = resolve_scenario(scenario, overrides)
    source = source or source_name(scenario) or f"<scenario {resolved.name}>"
    if out is not None:
        from simdist.report.tables import check_output_folder

        check_output_folder(Path(out))
    say("measuring the step time and checkpoint bytes (engine)")
    study, measured = build_study(resolved, source)
    say("simulating the horizon over the seeds and the sweeps")
    spec = resolved.goodput
    assert spec is not None
    found = summarize(study, measured, intervals=spec.intervals, sizes=spec.cluster_sizes)
    found.name = resolved.name
    found.summary = {"name": resolved.name, **found.summary}
    if out is not None:
        from simdist.goodput.report import write_goodput

        say("writing the report")
        found.out_dir = write_goodput(found.name, found.summary, found.tables, Path(out))
    return found
