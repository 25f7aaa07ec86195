"""Comparing runs: run or load every source, then write one comparison report folder.

A source is a scenario file (run here) or a report folder (read back). With one seed the
folder compares one run per source (:func:`simdist.report.compare.write_compare`); with
several seeds each scenario file runs once per seed and the folder compares their bands
(:func:`simdist.report.compare.write_compare_seeds`). The Python API (:mod:`simdist.api`)
and ``simdist compare`` call :func:`compare`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from simdist.errors import SimdistError
from simdist.runtime.preflight import preflight
from simdist.runtime.readback import load_report
from simdist.scenario.load import load_scenario
from simdist.scenario.schema import Scenario
from simdist.studies.runs import run, run_many, seed_list

if TYPE_CHECKING:
    import pandas as pd

    from simdist.runtime.engine import Result

__all__ = ["compare"]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"


def _out_dir(out: str | Path | None, names: Sequence[str]) -> Path:
    """``out``, or ``reports/compare_<name>_<name>…`` after the compared runs."""
    if out is not None:
        return Path(out)
    return Path("reports") / ("compare_" + "_".join(_slug(name) for name in names))


def _load_sources(
    sources: Sequence[str | Path], overrides: Sequence[str], seeds: list[int] | None
) -> list[list[Result | Scenario]]:
    """Per source, its loaded report (one Result) or its validated, preflighted scenarios
    (one, or one per seed of ``seeds``): every input checked before anything runs."""
    loaded: list[list[Result | Scenario]] = []
    for source in map(Path, sources):
        if source.is_dir():
            loaded.append([load_report(source)])
        elif source.is_file() and seeds is None:
            loaded.append([load_scenario(source, overrides)])
        elif source.is_file():
            loaded.append([load_scenario(source, [*overrides, f"seed={s}"]) for s in seeds])
        else:
            raise SimdistError(
                f"{source}: not found; expected a scenario .yaml file or a report folder"
            )
        for item in loaded[-1]:
            if isinstance(item, Scenario):
                if item.jobs is not None:
                    raise SimdistError(
                        f"{source}: a scenario with jobs: (several jobs on one cluster) is not "
                        f"one run; run it, then compare its jobs' report folders, e.g. simdist "
                        f"compare {' '.join(f'reports/{item.name}/{j.name}' for j in item.jobs)}"
                    )
                preflight(item, source=str(source))
    return loaded


def _run_name(result: Result) -> str:
    """The name a compared run goes by: its summary's, else its scenario's."""
    return result.summary.get("name", result.scenario.name)


def _compare_one_seed(
    loaded: list[list[Result | Scenario]],
    sources: Sequence[str | Path],
    out: str | Path | None,
    target: float,
    on_run: Callable[[str], None] | None,
) -> tuple[Path, pd.DataFrame]:
    """:func:`compare` without seeds: each scenario run once, here, one after another."""
    from simdist.report.compare import write_compare

    results = []
    for [item], source in zip(loaded, sources, strict=True):
        if isinstance(item, Scenario):
            if on_run is not None:
                on_run(item.name)
            item = run(item, source=str(source))
        results.append(item)
    out_dir = _out_dir(out, [_run_name(r) for r in results])
    table = write_compare(results, out_dir, target, [str(s) for s in sources])
    return out_dir, table


def _compare_seeds(
    loaded: list[list[Result | Scenario]],
    sources: Sequence[str | Path],
    out: str | Path | None,
    target: float,
    ran: list[Result],
) -> tuple[Path, pd.DataFrame]:
    """:func:`compare` with seeds: each source's runs (``ran`` holds the scenarios' Results,
    in order) under a label of its own, its name with `` (2)``… when names repeat."""
    from simdist.report.compare import write_compare_seeds

    results_of_scenarios = iter(ran)
    by_label: dict[str, list[Result]] = {}
    labels: dict[str, str] = {}
    for items, source in zip(loaded, sources, strict=True):
        results = [
            next(results_of_scenarios) if isinstance(item, Scenario) else item for item in items
        ]
        name = _run_name(results[0])
        label, k = name, 1
        while label in by_label:
            k += 1
            label = f"{name} ({k})"
        by_label[label], labels[label] = results, str(source)
    out_dir = _out_dir(out, list(by_label))
    summary, _ = write_compare_seeds(by_label, out_dir, target, labels)
    return out_dir, summary


def compare(
    sources: Sequence[str | Path],
    *,
    out: str | Path | None = None,
    target: float | None = None,
    overrides: Sequence[str] = (),
    on_run: Callable[[str], None] | None = None,
    seeds: int | Sequence[int] | None = None,
    parallel: bool | None = None,
    processes: int | None = None,
    scheduler: str | None = None,
) -> tuple[Path, pd.DataFrame]:
    """Run or load every source, then write one comparison report; return (folder, table).

    A source is a scenario file (``overrides`` — ``--set`` strings — apply to
    it) or a report folder (:func:`~simdist.runtime.readback.load_report`).  Every scenario is
    validated and every report loaded before anything runs, so a bad input fails fast.
    ``target`` is the test accuracy of "time to target" (default
    :data:`simdist.report.compare.DEFAULT_TARGET`, 0.9).  ``out`` defaults to
    ``reports/compare_<name>_<name>…``.  ``on_run(name)`` is called before each
    simulation.  The table is :func:`simdist.report.compare.compare_table`'s,
    as written to ``compare.csv``.

    ``seeds`` (a count N for seeds 0…N−1, or a list) runs every scenario file once per
    seed (a report folder is one run, its own seed), on Dask when there are many
    (:func:`~simdist.studies.runs.run_many`: ``parallel``, ``processes``, ``scheduler``). The
    table is then :func:`simdist.report.compare.seeds_summary`'s — one row per scenario
    with each figure's mean, min, max, t-based 95% interval and count of seeds (for time
    to target, how many reached it) — and the folder also holds ``per_seed.csv``.
    """
    from simdist.report.compare import DEFAULT_TARGET
    from simdist.report.tables import check_output_folder

    target = DEFAULT_TARGET if target is None else target
    if not sources:
        raise SimdistError("compare needs at least one scenario file or report folder")
    if not 0 < target <= 1:
        raise SimdistError(f"--target: got {target:g}; expected an accuracy in (0, 1], e.g. 0.9")
    seeds_given = seed_list(seeds) if seeds is not None else None
    loaded = _load_sources(sources, overrides, seeds_given)
    if out is not None:
        check_output_folder(Path(out))
    if seeds_given is None:
        return _compare_one_seed(loaded, sources, out, target, on_run)
    todo = [item for items in loaded for item in items if isinstance(item, Scenario)]
    ran = run_many(todo, parallel=parallel, processes=processes, scheduler=scheduler, on_run=on_run)
    return _compare_seeds(loaded, sources, out, target, ran)
