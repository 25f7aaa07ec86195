"""The engine: owns the one SimPy environment, wires cluster + workload + strategy, runs.

Nothing else in simdist keeps time.  The engine measures the per-step costs
once (XLA cost analysis of the real gradient function, the real byte size of
the parameters), hands them to the strategy, runs the SimPy clock to the end
and returns a :class:`Result` — the tidy tables, a summary and the final
parameters.  Writing the report folder is :mod:`simdist.report`'s job.
"""

from __future__ import annotations

import gc
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import simpy

from simdist.cluster import Cluster, effective_profile
from simdist.network import Network, build_topology
from simdist.recorder import Recorder
from simdist.scenario import Scenario, load_scenario
from simdist.strategies import strategy_class
from simdist.strategies.base import Costs
from simdist.strategies.sync import resolve_execution
from simdist.summary import build_summary


@dataclass
class Result:
    """Everything a run produced: what the report folder holds, as Python objects."""

    scenario: Scenario
    metrics: pd.DataFrame
    events: pd.DataFrame
    summary: dict[str, Any]
    params: Any | None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    out_dir: Path | None = None


def build_workload(scenario: Scenario) -> Any:
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


_WORKLOAD_CACHE_SIZE = 4
_workloads: OrderedDict[str, Any] = OrderedDict()
# Fields that do not change what a timing-only run reads from its Workload (shapes, FLOPs per
# batch, bytes): cost analysis is cached per batch inside the Workload itself.
_TIMING_IRRELEVANT = ("batch_size", "global_batch_size", "steps", "epochs", "eval_every")


def _file_stamp(path: Path | None) -> list[Any] | None:
    if path is None:
        return None
    stat = Path(path).stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]


def cached_workload(scenario: Scenario) -> Any:
    """The run's Workload, reused from a recent run in this process when nothing shaping it changed.

    Building one traces and compiles the model's jitted functions (about half a
    second for a small MLP), which dominates short runs; sweep workers and
    benchmarks run many scenarios on the same workload, so the last few are
    kept.  Timing-only runs read only costs from it (FLOPs from XLA's cost
    analysis, parameter shapes and bytes), which do not depend on the seed,
    the batch count or the step count: they share one Workload, so the cost
    analysis runs once per model and batch size.
    """
    spec = scenario.workload.model_dump(mode="json")
    if not scenario.numerics:
        for name in _TIMING_IRRELEVANT:
            spec.pop(name, None)
    key = json.dumps(
        [
            spec,
            _file_stamp(scenario.workload.dataset.path),
            _file_stamp(scenario.workload.init_from),
            scenario.seed if scenario.numerics else None,
        ],
        sort_keys=True,
    )
    workload = _workloads.pop(key, None)
    if workload is None:
        workload = build_workload(scenario)
    _workloads[key] = workload
    while len(_workloads) > _WORKLOAD_CACHE_SIZE:
        _workloads.popitem(last=False)
    return workload


def measure_costs(scenario: Scenario, workload: Any, peak_flops: float, efficiency: float) -> Costs:
    """Per-replica compute time of one step and the gradient's byte size.

    Compute time = FLOPs of the jitted gradient function for the per-replica
    batch, from XLA's own cost analysis, / (peak FLOP/s × efficiency) — unless
    the scenario fixes ``cluster.device.compute_time``.
    """
    fixed = scenario.cluster.device.compute_time_s
    flops = (
        0.0 if fixed is not None else float(workload.flops_per_step(scenario.workload.batch_size))
    )
    compute_s = fixed if fixed is not None else flops / (peak_flops * efficiency)
    import jax

    shapes = [tuple(leaf.shape) for leaf in jax.tree_util.tree_leaves(workload.params)]
    opt_state = workload.init_opt_state(workload.params)
    opt_nbytes = sum(
        int(leaf.size * leaf.dtype.itemsize) for leaf in jax.tree_util.tree_leaves(opt_state)
    )
    x = workload.dataset.x_train
    return Costs(
        compute_s=compute_s,
        grad_nbytes=int(workload.param_bytes),
        flops_per_replica_step=flops,
        total_steps=scenario.workload.total_steps(workload.batches.n_train),
        param_leaves=tuple(
            (path, shape, nbytes)
            for (path, nbytes), shape in zip(workload.param_leaves, shapes, strict=True)
        ),
        opt_state_nbytes=opt_nbytes,
        example_nbytes=int(x[0].size * x.dtype.itemsize),
        test_examples=len(workload.dataset.x_test),
    )


def prepare_devices(scenario: Scenario) -> None:
    """Ask JAX for enough emulated CPU devices before its backend starts, if needed."""
    execution = getattr(scenario.strategy, "execution", None)
    if execution == "devices":
        from simdist.numerics.executor import ensure_devices

        ensure_devices(scenario.replicas)


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
) -> Result:
    """Simulate ``scenario`` to the end and return its :class:`Result` (writes nothing)."""
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario, overrides)
    elif overrides:
        raise TypeError("overrides apply to scenario files; change the Scenario object instead")
    if scenario.numerics:
        prepare_devices(scenario)

    workload = cached_workload(scenario)
    profile = effective_profile(scenario.cluster.device)
    costs = measure_costs(scenario, workload, profile.peak_flops, profile.efficiency)
    progress = (lambda step: on_step(step, costs.total_steps)) if on_step else None
    return simulate(scenario, costs, workload if scenario.numerics else None, on_step=progress)


def simulate(
    scenario: Scenario,
    costs: Costs,
    workload: Any | None = None,
    *,
    on_step: Callable[[int], None] | None = None,
) -> Result:
    """Run ``scenario``'s strategy on the SimPy clock with the given per-step ``costs``.

    With ``workload=None`` nothing numeric happens (no JAX): the timing half
    alone, as in timing-only runs and in tests that pin step times from
    hand-made :class:`Costs`.
    """
    env = simpy.Environment()
    recorder = Recorder()
    cls = strategy_class(scenario.strategy.kind)
    cluster = Cluster(scenario.cluster)
    network = Network(env, build_topology(cls.topology, env, cluster, scenario), recorder)
    strategy = cls(scenario, env, cluster, network, recorder, workload, costs, on_step=on_step)
    main = env.process(strategy.process())
    # Until training ends: background processes (failure renewals, a checkpoint
    # being written) must not move the clock past the last step.
    with gc_paused():
        env.run(until=main)
        metrics = recorder.metrics_frame()
        events = recorder.events_frame()
    summary = build_summary(
        scenario=scenario,
        metrics=metrics,
        events=events,
        sim_time_s=float(env.now),
        steps=strategy.steps_done,
        costs=costs,
        devices=[d.name for d in strategy.training_devices],
        examples_per_step=strategy.examples_per_step,
        diverged_at=strategy.diverged_at,
        extra={**strategy.fault_summary(), **strategy.summary()},
    )
    summary["execution"] = (
        resolve_execution(getattr(scenario.strategy, "execution", "batched"), scenario.replicas)
        if workload is not None
        else "none"
    )
    return Result(
        scenario=scenario,
        metrics=metrics,
        events=events,
        summary=summary,
        params=strategy.final_params,
        tables=recorder.table_frames(),
    )
