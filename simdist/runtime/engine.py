"""The engine: owns the one SimPy environment, wires cluster + workload + strategy, runs.

Nothing else in simdist keeps time.  The engine has the per-step costs
measured once (:mod:`simdist.runtime.costs`: XLA cost analysis of the real gradient
function, the real byte size of the parameters), hands them to the strategy,
runs the SimPy clock to the end and returns a :class:`Result` — the tidy
tables, a summary and the final parameters.  It keeps the last few JAX
Workloads per process (:func:`cached_workload`).  Writing the report folder is
:mod:`simdist.report`'s job.
"""

from __future__ import annotations

import gc
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from simdist.errors import SimdistError
from simdist.memo import remember
from simdist.memory.accounting import memory_per_device, off_device_memory
from simdist.network import Network
from simdist.network.telemetry import link_frames, network_links
from simdist.runtime.assembly import build_floor, place, until_settled
from simdist.runtime.costs import file_stamp, full_size, measure_costs
from simdist.runtime.recorder import Recorder
from simdist.scenario import Scenario, load_scenario
from simdist.step_costs import Costs
from simdist.strategies.base import Replayed
from simdist.strategies.sync import resolve_execution
from simdist.summary import build_summary

if TYPE_CHECKING:
    from simdist.network.link import Link
    from simdist.numerics.executor import Workload
    from simdist.strategies.base import Strategy


@dataclass
class Result:
    """Everything a run produced: what the report folder holds, as Python objects.

    ``tables`` are the extra tables by name: the strategy's (``updates``, …) and the
    per-link telemetry (``links``, ``link_buckets``, ``link_load``:
    :mod:`simdist.network.telemetry`).
    """

    scenario: Scenario
    metrics: pd.DataFrame
    events: pd.DataFrame
    summary: dict[str, Any]
    params: Any | None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    out_dir: Path | None = None


def build_workload(scenario: Scenario) -> Workload:
    """The JAX side of the run: model, data, optimizer, initial parameters."""
    from simdist.numerics.executor import Workload

    w = scenario.workload
    return Workload(
        w.model,
        w.dataset,
        w.optimizer,
        seed=scenario.seed,
        total_steps=w.total_steps,
        init_from=w.init_from,
    )


_workloads: OrderedDict[str, Workload] = OrderedDict()
# Fields that do not change what a timing-only run reads from its Workload (shapes, bytes,
# data set sizes); the clock's layer profile is cached apart
# (:func:`simdist.runtime.costs.clock_profile`).
_TIMING_IRRELEVANT = ("batch_size", "global_batch_size", "steps", "epochs", "eval_every")


def needs_workload(scenario: Scenario) -> bool:
    """Whether the run builds a JAX :class:`~simdist.numerics.executor.Workload`.

    Numerics always do. A timing-only run does too when its clock model is a small zoo
    model trained on a data set (the shapes and sizes come from the real thing, so the
    clock equals the full run's); full-size models, profile files and runs without a
    data set are costed abstractly instead (:func:`~simdist.runtime.costs.measure_costs`), without
    allocating a parameter.
    """
    w = scenario.workload
    if scenario.numerics:
        return True
    return (
        w.dataset is not None
        and w.model is not None
        and not w.surrogate
        and w.timing_model is None
        and not w.input_shape
        and not full_size(w.model)
    )


def cached_workload(scenario: Scenario) -> Workload:
    """The run's Workload, reused from a recent run in this process when nothing shaping it changed.

    Building one traces and compiles the model's jitted functions (about half a
    second for a small MLP), which dominates short runs; sweep workers and
    benchmarks run many scenarios on the same workload, so the last few are
    kept. Timing-only runs read only shapes and sizes from it, which do not
    depend on the seed, the batch count or the step count: they share one
    Workload.
    """
    spec = scenario.workload.model_dump(mode="json")
    if not scenario.numerics:
        for name in _TIMING_IRRELEVANT:
            spec.pop(name, None)
    dataset = scenario.workload.dataset
    key = json.dumps(
        [
            spec,
            file_stamp(dataset.path if dataset is not None else None),
            file_stamp(scenario.workload.init_from),
            scenario.seed if scenario.numerics else None,
        ],
        sort_keys=True,
    )
    return remember(_workloads, key, lambda: build_workload(scenario))


def prepare_devices(scenario: Scenario) -> None:
    """Ask JAX for enough emulated CPU devices before its backend starts, if needed."""
    if scenario.requested_execution == "devices":
        from simdist.numerics.executor import ensure_devices

        ensure_devices(scenario.numeric_devices)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, as it was after.

    A run keeps every recorded event alive until its tables are built; each
    full collection walks all of them again, which made big runs 30–50 %
    slower.  A run makes almost no reference cycles (a few hundred objects,
    measured), so nothing piles up meanwhile.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run(
    scenario: Scenario | str | Path,
    *,
    overrides: tuple[str, ...] | list[str] = (),
    on_step: Callable[[int, int], None] | None = None,
    on_time: Callable[[float], None] | None = None,
) -> Result:
    """Simulate ``scenario`` to the end and return its :class:`Result` (writes nothing).

    ``on_step(step, total)`` and ``on_time(simulated_s)`` are called after every step.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario, overrides)
    elif overrides:
        raise TypeError("overrides apply to scenario files; change the Scenario object instead")
    scenario = _checked(scenario)
    workload, costs = _prepared(scenario)
    progress = (lambda step: on_step(step, costs.total_steps)) if on_step else None
    result = simulate(
        scenario, costs, workload if scenario.numerics else None, on_step=progress, on_time=on_time
    )
    return _noted(scenario, result)


def run_batch(
    scenarios: Sequence[Scenario], on_run: Callable[[int], None] | None = None
) -> list[Result]:
    """:func:`run` of each scenario, computing together the numerics of runs that share
    programs (:mod:`simdist.batched_runs`): the seeds of one scenario, chiefly.

    Each run is simulated in turn; a strategy that :meth:`~Strategy.defers` leaves its
    numerics for later, and the runs whose :class:`~simdist.batched_runs.DeferredRun` share a
    key are computed in one go. Every Result equals :func:`run`'s for that scenario,
    byte for byte (tests/test_batched_runs.py); a run found to diverge is simulated again
    alone, stopping there, as :func:`run` does. ``on_run(k)`` is called as run ``k``'s
    simulation starts.
    """
    batch = [_checked(scenario) for scenario in scenarios]
    with gc_paused():
        passes = []
        groups: dict[tuple[type, Any], list[Any]] = {}
        for k, scenario in enumerate(batch):
            if on_run is not None:
                on_run(k)
            workload, costs = _prepared(scenario)
            numeric = workload if scenario.numerics else None
            defer = len(batch) > 1 and numeric is not None
            sim = simulate_pass(scenario, costs, numeric, defer=defer)
            passes.append(sim)
            deferred = sim.strategy.deferred_run
            if deferred is None:
                continue
            group = groups.setdefault((type(deferred), deferred.key), [])
            group.append(deferred)
            if len(group) == deferred.group_runs:  # its rows can go before the next runs'
                type(deferred).execute(group)
                group.clear()
        for (kind, _), members in groups.items():
            if members:
                kind.execute(members)
        results = []
        for sim in passes:
            if sim.strategy.rerun_with is not None:
                result = simulate(sim.scenario, sim.costs, sim.strategy.rerun_with)
            else:
                result = finish(sim)
            results.append(_noted(sim.scenario, result))
    return results


def _checked(scenario: Scenario) -> Scenario:
    """``scenario`` if the engine can run it (not ``jobs:``); devices asked of JAX before
    its backend starts."""
    if scenario.jobs is not None:
        raise SimdistError(
            f"{scenario.name}: a scenario with jobs: (several jobs on one cluster) runs with "
            "simdist.api.run (simdist run), which runs every job and compares them"
        )
    if scenario.numerics:
        prepare_devices(scenario)
    return scenario


def _prepared(scenario: Scenario) -> tuple[Workload | None, Costs]:
    """The run's Workload (None when it needs none) and its per-step costs."""
    workload = cached_workload(scenario) if needs_workload(scenario) else None
    return workload, measure_costs(scenario, workload)


def _noted(scenario: Scenario, result: Result) -> Result:
    """``result`` with the surrogate sentence first in its summary, when there is one."""
    note = surrogate_note(scenario)
    if note:
        result.summary = {"_surrogate": note, **result.summary}
    return result


def surrogate_note(scenario: Scenario) -> str | None:
    """One sentence saying that the clock follows another model than the one trained."""
    w = scenario.workload
    if not (scenario.numerics and w.surrogate):
        return None
    clock = f"the layers of {w.profile}" if w.profile is not None else w.clock_model.name
    return (
        f"surrogate: {w.model.name} trains for real on {w.dataset.name}, while the clock "
        f"follows {clock} (its compute, gradient and parameter bytes)"
    )


@dataclass
class Simulated:
    """A run whose SimPy pass is over: what :func:`finish` turns into its :class:`Result`
    (after its deferred numerics, if any, were computed: :func:`run_batch`)."""

    scenario: Scenario
    costs: Costs
    workload: Workload | None
    strategy: Strategy
    recorder: Recorder
    network: Network
    end_s: float


def simulate(
    scenario: Scenario,
    costs: Costs,
    workload: Workload | Replayed | None = None,
    *,
    on_step: Callable[[int], None] | None = None,
    on_time: Callable[[float], None] | None = None,
) -> Result:
    """Run ``scenario``'s strategy on the SimPy clock with the given per-step ``costs``.

    With ``workload=None`` nothing numeric happens (no JAX): the timing half
    alone, as in timing-only runs and in tests that pin step times from
    hand-made :class:`Costs`.
    """
    with gc_paused():
        sim = until_settled(
            lambda w: simulate_pass(scenario, costs, w, on_step=on_step, on_time=on_time),
            workload,
            lambda sim: sim.strategy.rerun_with,
        )
        return finish(sim)


def simulate_pass(
    scenario: Scenario,
    costs: Costs,
    workload: Workload | Replayed | None = None,
    *,
    on_step: Callable[[int], None] | None = None,
    on_time: Callable[[float], None] | None = None,
    defer: bool = False,
) -> Simulated:
    """The SimPy pass of :func:`simulate`, up to the end of training, wired by
    :mod:`simdist.runtime.assembly`. With ``defer`` a strategy that :meth:`~Strategy.defers` leaves
    its numerics in ``strategy.deferred_run`` (:func:`run_batch` computes them). Call it
    with the cyclic collector paused."""
    floor = build_floor(scenario, [scenario.strategy.kind])
    env = floor.env
    if on_time is not None:
        step_done = on_step

        def on_step(step: int) -> None:
            on_time(env.now)
            if step_done is not None:
                step_done(step)

    run = place(floor, scenario, floor.cluster, workload, costs, on_step=on_step, defer=defer)
    # Until training ends: background processes (failure renewals, a checkpoint
    # being written) must not move the clock past the last step.
    env.run(until=run.main)
    plain = workload.workload if isinstance(workload, Replayed) else workload
    return Simulated(
        scenario, costs, plain, run.strategy, run.recorder, run.network, float(env.now)
    )


def finish(sim: Simulated) -> Result:
    """The :class:`Result` of a finished pass (its numerics computed). Call it with the
    cyclic collector paused (:func:`gc_paused`)."""
    links = network_links(sim.network)
    result = run_result(
        sim.scenario, sim.costs, sim.workload, sim.strategy, sim.recorder, links, sim.end_s
    )
    for link in links:
        link.rates = []  # in the tables now; see Recorder.clear
    return result


def _memory(scenario: Scenario, costs: Costs, strategy: Strategy) -> dict[str, Any]:
    """summary.json's memory figures: each training device's share of a replica
    (:mod:`simdist.memory.accounting`) and what parameter servers or the host CPU hold."""
    cluster = strategy.cluster
    devices = strategy.training_devices
    out: dict[str, Any] = {
        "memory_per_device": memory_per_device(scenario, costs, cluster, devices)
    }
    off = off_device_memory(scenario, costs, cluster)
    if off:
        out["memory_off_device"] = off
    return out


def run_result(
    scenario: Scenario,
    costs: Costs,
    workload: Workload | None,
    strategy: Strategy,
    recorder: Recorder,
    links: Sequence[Link],
    end_s: float,
) -> Result:
    """A finished run's :class:`Result`: its frames, ``links``' telemetry up to ``end_s``
    and the summary. The recorder's rows are dropped once they are in frames
    (:meth:`Recorder.clear`); call it with the cyclic collector paused (:func:`gc_paused`)."""
    metrics = recorder.metrics_frame()
    events = recorder.events_frame()
    tables = recorder.table_frames()
    recorder.clear()  # before the links' tables: a big run's rows are gigabytes
    tables.update(link_frames(links, end_s))
    extra = {**strategy.fault_summary(), **strategy.summary()}
    if "memory_per_device" not in extra:  # a pipeline gives its stages' own
        extra.update(_memory(scenario, costs, strategy))
    summary = build_summary(
        scenario=scenario,
        metrics=metrics,
        events=events,
        sim_time_s=end_s,
        steps=strategy.steps_done,
        costs=costs,
        devices=[d.name for d in strategy.training_devices],
        examples_per_step=strategy.examples_per_step,
        diverged_at=strategy.diverged_at,
        extra=extra,
    )
    summary["execution"] = (
        resolve_execution(scenario.requested_execution, scenario.replicas)
        if workload is not None
        else "none"
    )
    return Result(
        scenario=scenario,
        metrics=metrics,
        events=events,
        summary=summary,
        params=strategy.final_params,
        tables=tables,
    )
