"""From a scenario to a goodput :class:`~simdist.goodput.study.Study`: the steady-state step
time and the checkpoint bytes measured by the engine on a few steps of the real layout.

The scenario may be a slice of the job (a few of its data-parallel copies), so that the
engine simulates it in seconds; ``goodput.job`` holds the overrides (``--set`` forms) that
make the full job from it. Then:

* the **step time** is the engine's, on the slice, over ``measure_steps`` steps (timing-only
  when the scenario is; checkpoints, faults and the goodput section left out), in steady
  state: the time from the end of the first step to the end of the last, per step (the
  first step also fills the pipeline and warms nothing else up). With one step, that step.
  Weak scaling is assumed from the slice to the job: the same batch per copy, the
  data-parallel reduction of more copies not re-simulated. ``goodput.step_time`` replaces
  the measurement;
* the **checkpoint bytes** of a device are its parameters and optimizer state as the
  memory model counts them (summary.json's ``memory_per_device``; the most loaded device
  sets the pace), each rescaled from the slice's sharding to the job's
  (:meth:`~simdist.strategies.spec_base.StrategySpecBase.sharding`: ZeRO's shards over 128 copies
  hold a 64th of those over 2);
* the **layout** (GPUs, hosts, switches, data-parallel copies) is the job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from simdist.errors import ScenarioError, SimdistError
from simdist.goodput.checkpoint import CheckpointCost
from simdist.goodput.horizon import Plan
from simdist.goodput.rates import Layout, rates_of
from simdist.goodput.study import Study
from simdist.scenario.load import dump_scenario, scenario_from_dict
from simdist.scenario.overrides import apply_overrides, override_strings

if TYPE_CHECKING:
    from simdist.scenario import Scenario

__all__ = ["Measured", "build_study", "job_scenario", "layout_of", "measure"]


@dataclass(frozen=True)
class Measured:
    """What the engine measured on the slice, for the job."""

    step_s: float
    measured_step_s: float
    steps: int
    checkpoint_nbytes: float
    params_nbytes: float
    optimizer_nbytes: float
    slice_devices: int
    job_devices: int


def _data(scenario: Scenario) -> dict[str, Any]:
    """The resolved scenario as a dict, without its goodput section."""
    data = yaml.safe_load(dump_scenario(scenario))
    data.pop("goodput", None)
    return data


def job_scenario(scenario: Scenario, source: str) -> Scenario:
    """The full job: ``scenario`` with ``goodput.job``'s overrides (the scenario itself when
    there are none)."""
    spec = scenario.goodput
    if spec is None or not spec.job:
        return scenario
    strings = override_strings(spec.job)
    data = apply_overrides(_data(scenario), strings, f"{source}: goodput.job")
    try:
        return scenario_from_dict(data, source)
    except ScenarioError as exc:
        raise ScenarioError(
            source, "goodput.job", f"the job it makes is refused at {exc.field}: {exc.message}"
        ) from None


def layout_of(job: Scenario, hosts_per_switch: int) -> Layout:
    """The job's GPUs, hosts, switches (``hosts_per_switch`` under each) and copies."""
    c = job.cluster
    gpus, hosts, replicas = c.n_devices, c.hosts, job.replicas
    per_replica = gpus / replicas
    per_host = gpus / hosts
    switches = -(-hosts // hosts_per_switch)
    return Layout(gpus, hosts, switches, replicas, max(1, round(per_host / per_replica)))


def measure(scenario: Scenario, job: Scenario, source: str) -> Measured:
    """Simulate ``goodput.measure_steps`` steps of ``scenario`` and read the job's step time
    and checkpoint bytes per device from them (module doc)."""
    from simdist.runtime.engine import run
    from simdist.runtime.preflight import preflight

    spec = scenario.goodput
    assert spec is not None
    data = _data(scenario)
    for key in ("checkpoint", "faults"):
        data.pop(key, None)
    data["workload"].pop("epochs", None)
    data["workload"]["steps"] = spec.measure_steps
    slice_ = scenario_from_dict(data, source)
    preflight(slice_, source=source)  # what simdist run refuses (memory, partitions) first
    ends: list[float] = []
    result = run(slice_, on_time=ends.append)
    if len(ends) >= 2:
        measured = (ends[-1] - ends[0]) / (len(ends) - 1)
    elif ends:
        measured = ends[0]
    else:
        raise SimdistError(f"{source}: goodput: the engine simulated no step to time")
    memory = result.summary.get("memory_per_device") or {}
    if not memory:
        raise SimdistError(f"{source}: goodput: the run reported no memory per device")
    mine = slice_.strategy.sharding(slice_.cluster)
    theirs = job.strategy.sharding(job.cluster)
    params = max(m["params"] for m in memory.values()) * mine.params / theirs.params
    optimizer = max(m["optimizer"] for m in memory.values()) * mine.optimizer / theirs.optimizer
    nbytes = max(
        m["params"] * mine.params / theirs.params
        + m["optimizer"] * mine.optimizer / theirs.optimizer
        for m in memory.values()
    )
    step_s = spec.step_time_s if spec.step_time_s is not None else measured
    return Measured(
        step_s=step_s,
        measured_step_s=measured,
        steps=len(ends),
        checkpoint_nbytes=nbytes,
        params_nbytes=params,
        optimizer_nbytes=optimizer,
        slice_devices=slice_.cluster.n_devices,
        job_devices=job.cluster.n_devices,
    )


def build_study(scenario: Scenario, source: str) -> tuple[Study, Measured]:
    """The goodput study of a scenario with a ``goodput:`` section, and what was measured."""
    spec = scenario.goodput
    if spec is None:
        raise ScenarioError(
            source,
            "goodput",
            "missing; simdist goodput needs the long horizon's settings, e.g. goodput: "
            "{horizon: 54 days, restart: 10 min, checkpoint: {every_steps: 100, "
            "storage_bandwidth: 2GB/s}}",
        )
    if scenario.jobs is not None:
        raise ScenarioError(
            source, "jobs", "simdist goodput studies one job; give a scenario without jobs:"
        )
    ckpt = spec.checkpoint or scenario.checkpoint
    if ckpt is None:
        raise ScenarioError(
            source,
            "goodput.checkpoint",
            "missing (and the scenario has no checkpoint: section); a checkpoint's cost is "
            "its bytes / storage bandwidth, e.g. checkpoint: {every_steps: 100, "
            "storage_bandwidth: 2GB/s}",
        )
    job = job_scenario(scenario, source)
    measured = measure(scenario, job, source)
    layout = layout_of(job, spec.hosts_per_switch)
    cost = CheckpointCost(
        nbytes=measured.checkpoint_nbytes,
        storage_Bps=ckpt.storage_bandwidth_Bps,
        mode=getattr(ckpt, "mode", "sync"),
        host_copy_Bps=getattr(ckpt, "host_copy_bandwidth_Bps", 25e9),
        read_Bps=getattr(ckpt, "read_bandwidth_Bps", None),
    )
    if ckpt.every_steps is not None:
        every = ckpt.every_steps
    else:
        every = max(1, round(ckpt.every_s / measured.step_s))
    e = spec.elastic
    plan = Plan(
        step_s=measured.step_s,
        every_steps=every,
        checkpoint=cost,
        restart_s=spec.restart_s,
        horizon_s=spec.horizon_s,
        replicas=layout.replicas,
        elastic=spec.recovery == "elastic",
        reconfigure_s=e.reconfigure_s,
        rejoin_s=e.rejoin_after_s,
        min_replicas=min(e.min_replicas, layout.replicas),
    )
    study = Study(
        plan=plan,
        layout=layout,
        causes=rates_of(spec.rates),
        distribution=spec.distribution,
        shape=spec.weibull_shape,
        seeds=spec.seeds,
        hosts_per_switch=spec.hosts_per_switch,
    )
    return study, measured
