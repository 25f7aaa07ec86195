"""Running a sweep on Dask: each point one independent run, stored as it arrives.

Points are independent runs, so they are executed as Dask tasks
(docs/seeds_and_sweeps.md): on a ``LocalCluster`` of worker processes by default, or on
an existing scheduler when its address is given.  A point that fails is stored with its
error and the others go on.  At the end the stored points are merged into
``<out>/sweep.csv`` and plotted into ``<out>/sweep_<metric>.png``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from simdist.errors import SimdistError
from simdist.sweep.grid import PreparedPoint, Sweep, prepare, safe_name
from simdist.sweep.plot import plot_sweep
from simdist.sweep.store import store_point, stored_point, sweep_table

if TYPE_CHECKING:
    from simdist.scenario.schema import Scenario

# ---------------------------------------------------------------- one point (a Dask task)


def devices_needed(prepared: Sequence[PreparedPoint]) -> int:
    """JAX devices a worker must create up front: the most any point runs on explicitly."""
    needed = 1
    for p in prepared:
        s = p.scenario
        if s is not None and s.runs_on_devices:
            needed = max(needed, s.numeric_devices)
    return needed


def run_point(scenario: Scenario, devices: int = 1) -> dict[str, Any]:
    """Run one point; never raises, so one bad point cannot stop the others.

    This is the Dask task.  ``devices`` is the same for every point of a
    sweep: JAX fixes its device count when a worker process first uses it,
    so the first point a worker runs must ask for as many as any point needs.
    Returns ``{"status": "ok", "summary", "metrics"}`` or ``{"status":
    "error", "error"}``.
    """
    try:
        if devices > 1 and scenario.numerics:
            from simdist.numerics.executor import ensure_devices

            ensure_devices(devices)
        from simdist.runtime.engine import run

        result = run(scenario)
    except SimdistError as exc:
        return {"status": "error", "error": str(exc)}
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "ok", "summary": result.summary, "metrics": result.metrics}


# ---------------------------------------------------------------- running on Dask

#: JAX's switch for taking 75 % of a GPU's memory when a process first uses it.
PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"


@contextmanager
def dask_client(scheduler: str | None = None, processes: int | None = None) -> Iterator[Any]:
    """A Dask client: on the scheduler at ``scheduler``, else on a new local cluster.

    The local cluster has ``processes`` worker processes with one thread
    each: every point is a whole run that keeps one core busy, and separate
    processes keep JAX's per-process state (devices, compiled code) apart.
    Its workers do not preallocate GPU memory (``XLA_PYTHON_CLIENT_PREALLOCATE=false``
    unless set): JAX's default, 75 % of the GPU per process, would leave the second worker
    on a GPU out of memory (docs/devices.md, "Several processes on one GPU").
    """
    import logging

    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except ValueError as exc:
            raise SimdistError(
                f"--scheduler: got {scheduler!r}, not a scheduler address ({exc}); "
                "expected e.g. tcp://scheduler-host:8786"
            ) from None
        except OSError as exc:
            raise SimdistError(
                f"--scheduler: cannot reach the Dask scheduler at {scheduler}: {exc}"
            ) from None
        with client:
            yield client
        return
    n = processes or os.cpu_count() or 1
    with (
        LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
            env={PREALLOCATE: os.environ.get(PREALLOCATE, "false")},
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@dataclass
class SweepResult:
    """What a sweep produced: the merged table and how many points ran, were reused, failed."""

    out_dir: Path
    table: pd.DataFrame
    ran: int = 0
    reused: int = 0
    failed: int = 0
    plot: Path | None = None
    errors: dict[str, str] = field(default_factory=dict)


def run_sweep(
    sweep: Sweep,
    out_dir: str | Path | None = None,
    *,
    client: Any | None = None,
    on_point: Callable[[str, str, int, int], None] | None = None,
) -> SweepResult:
    """Run every point not already finished, store each as it arrives, merge and plot.

    ``client`` is an existing Dask client; without one, a client is opened
    as :func:`dask_client` says (only when some point needs running).
    ``on_point(point, status, done, total)`` is called once per point,
    reused and invalid ones included.
    """
    out = Path(out_dir) if out_dir is not None else Path("reports") / sweep.name
    prepared = prepare(sweep)
    total = len(prepared)
    records: dict[str, dict[str, Any]] = {}
    result = SweepResult(out_dir=out, table=pd.DataFrame())
    notify = on_point or (lambda point, status, done, total: None)

    def finish(p: PreparedPoint, record: dict[str, Any], status: str) -> None:
        records[p.point.name] = record
        if record["status"] != "ok":
            result.failed += 1
            result.errors[p.point.name] = record["error"]
        notify(p.point.name, status, len(records), total)

    todo: list[PreparedPoint] = []
    for p in prepared:
        if p.scenario is None:
            finish(p, store_point(out, p, {"status": "error", "error": p.error}), "invalid")
            continue
        record = stored_point(out, p)
        if record is not None:
            result.reused += 1
            finish(p, record, "reused")
        else:
            todo.append(p)

    if todo:
        if client is None:
            n = min(sweep.processes or os.cpu_count() or 1, len(todo))
            with dask_client(sweep.scheduler, n) as own:
                _execute(own, todo, out, devices_needed(prepared), finish)
        else:
            _execute(client, todo, out, devices_needed(prepared), finish)
        result.ran = len(todo)

    ordered = [records[p.point.name] for p in prepared]
    result.table = sweep_table(ordered, [a.path for a in sweep.axes])
    from simdist.report.tables import write_csv

    write_csv(result.table, out / "sweep.csv")
    result.plot = out / f"sweep_{safe_name(sweep.metric)}.png"
    plot_sweep(result.table, sweep.axes, sweep.metric, result.plot, sweep.name)
    return result


def _execute(
    client: Any,
    todo: Sequence[PreparedPoint],
    out: Path,
    devices: int,
    finish: Callable[[PreparedPoint, dict[str, Any], str], None],
) -> None:
    from distributed import as_completed

    run_id = uuid.uuid4().hex[:8]
    futures = {
        client.submit(run_point, p.scenario, devices, key=f"simdist-{p.point.name}-{run_id}"): p
        for p in todo
    }
    for future in as_completed(futures):
        p = futures[future]
        try:
            outcome = future.result()
        except Exception as exc:  # the worker itself died or the task could not be sent
            outcome = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        finish(p, store_point(out, p, outcome), outcome["status"])
        future.release()
