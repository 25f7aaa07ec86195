"""Whether a run fits its devices' memory, checked before its first step.

Every strategy: one replica holds its parameters, their gradients, the optimizer state
(unless parameter servers or the host CPU hold it) and one batch's input and layer outputs
(what the backward pass needs), counted as a one-stage pipeline counts them
(:func:`simdist.strategies.pipeline.plan.stage_memory`). A pipeline: the stage and partition
counts against the model's layers, and each stage against its device, as
:class:`~simdist.strategies.pipeline.strategy.PipelineStrategy` places them (an ``auto``
partition is refused when no partition fits, the only case in which it fails).

The layers come from a :class:`~simdist.numerics.memory.Footprint` (a profile file, or the
zoo model costed at batch 1), so nothing here needs JAX. Refusals are
:class:`~simdist.errors.ScenarioError` naming the scenario's file and the field to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simdist.errors import ScenarioError, SimdistError

if TYPE_CHECKING:
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario
    from simdist.strategies.pipeline.plan import StageMemory

__all__ = ["check_device_memory", "check_pipeline", "clock_field"]

#: Strategies whose optimizer state lives off the training devices (on the parameter
#: servers, or the host CPU of central storage).
_OPTIMIZER_ELSEWHERE = ("parameter_server", "central_storage")


def clock_field(scenario: Scenario) -> str:
    """The field naming the model whose layers set the clock."""
    w = scenario.workload
    if w.profile is not None:
        return "workload.profile"
    return "workload.timing_model" if w.timing_model is not None else "workload.model"


def _optimizer_nbytes(scenario: Scenario, param_nbytes: int) -> int:
    """The optimizer state's bytes on a training device (the moments optax keeps)."""
    from simdist.numerics.memory import OPTIMIZER_COPIES

    if scenario.strategy.kind in _OPTIMIZER_ELSEWHERE:
        return 0
    return OPTIMIZER_COPIES.get(scenario.workload.optimizer.name, 2) * param_nbytes


def _parts(need: StageMemory) -> str:
    gb = 1e9
    return ", ".join(f"{k} {v / gb:,.3g}" for k, v in need.as_dict().items() if k != "total")


def check_device_memory(scenario: Scenario, footprint: Footprint, source: str) -> None:
    """Refuse a replica that does not fit on the smallest of the cluster's devices."""
    from simdist.cluster import Cluster
    from simdist.strategies.pipeline.plan import stage_memory
    from simdist.units import format_size

    device = min(Cluster(scenario.cluster).profiles.values(), key=lambda p: p.memory_nbytes)
    capacity = device.memory_nbytes
    if capacity <= 0:  # not known
        return
    w = scenario.workload
    batch = int(w.batch_size)
    need = stage_memory(
        param_nbytes=footprint.param_nbytes,
        opt_state_nbytes=_optimizer_nbytes(scenario, footprint.param_nbytes),
        input_nbytes=float(footprint.example_nbytes) * batch,
        activation_nbytes=sum(footprint.outputs_at(batch)),
        peak=1,
        schedule="gpipe",
        rematerialization=False,
    )
    if need.total <= capacity:
        return
    fixed = need.params + need.gradients + need.optimizer
    per_example = footprint.example_nbytes + footprint.activation_nbytes
    if not footprint.per_example:  # the outputs are the step's, at any batch
        per_example = footprint.example_nbytes
        fixed += need.activations - footprint.example_nbytes * batch
    fits = int((capacity - fixed) // per_example) if per_example and capacity > fixed else 0
    if fits >= 1:
        field, advice = "workload.batch_size", f"use a smaller batch, e.g. batch_size: {fits:,}"
    elif w.input_shape and fixed < capacity:
        field, advice = "workload.input_shape", "one example alone does not fit: smaller inputs"
    else:
        field = clock_field(scenario)
        advice = "use a smaller model, or strategy: pipeline to split it over devices"
    gb = 1e9
    raise ScenarioError(
        source,
        field,
        f"does not fit: one replica needs {need.total / gb:,.3g} GB on a "
        f"{capacity / gb:.3g} GB {device.name} (params {need.params / gb:.3g}, grads "
        f"{need.gradients / gb:.3g}, optimizer {need.optimizer / gb:.3g}, activations "
        f"{need.activations / gb:,.3g} for {batch:,} examples of "
        f"{format_size(per_example)}); {advice}",
    )


def _check_counts(scenario: Scenario, names: tuple[str, ...], source: str) -> None:
    """Stages and a partition list against the clock model's layers."""
    spec = scenario.strategy
    S, n = spec.stages, len(names)
    shown = ", ".join(names) if n <= 12 else f"{', '.join(names[:12])}, ..."
    if n < S:
        raise ScenarioError(
            source,
            "strategy.stages",
            f"got {S}; each stage holds at least one layer and the model has {n} ({shown}), "
            f"e.g. stages: {max(1, n)}",
        )
    if isinstance(spec.partition, list) and sum(spec.partition) != n:
        raise ScenarioError(
            source,
            "strategy.partition",
            f"{spec.partition} covers {sum(spec.partition)} layers; the model has {n} "
            f"({shown}): give counts that add up to {n}, e.g. partition: auto",
        )


def check_pipeline(
    scenario: Scenario, footprint: Footprint, source: str, total_steps: int = 1
) -> None:
    """A pipeline's stages against the model's layers, and each stage against its device."""
    from simdist.cluster import Cluster
    from simdist.mesh import Mesh
    from simdist.strategies.pipeline.plan import (
        partition_auto,
        peak_in_flight,
        stage_memory,
        stage_ops,
    )
    from simdist.units import format_size

    _check_counts(scenario, footprint.layer_names, source)
    spec, w = scenario.strategy, scenario.workload
    S, M, R = spec.stages, spec.micro_batches, spec.pipeline_replicas
    cluster = Cluster(scenario.cluster)
    grid = Mesh.of(cluster.devices, {"data": R, "pipeline": S}).groups("pipeline")
    capacities = [
        min(float(cluster.profile_of(row[s]).memory_nbytes) for row in grid) for s in range(S)
    ]
    # pipedream streams M x steps micro-batches; a stage's peak is min(S - s, stream) either
    # way, so a stream of S + M shows the same peaks.
    stream = M * max(1, total_steps) if spec.schedule == "pipedream" else M
    peaks = [peak_in_flight(ops) for ops in stage_ops(spec.schedule, S, min(stream, S + M))]
    batch = int(w.batch_size)
    outputs = footprint.outputs_at(batch)
    params = footprint.layer_param_nbytes
    total = sum(params)
    opt_total = _optimizer_nbytes(scenario, total)

    def need(s: int, first: int, stop: int) -> StageMemory:
        own = sum(params[first:stop])
        inputs = footprint.example_nbytes * (batch // M) if first == 0 else outputs[first - 1] / M
        return stage_memory(
            param_nbytes=own,
            opt_state_nbytes=round(opt_total * own / total) if total else 0,
            input_nbytes=inputs,
            activation_nbytes=sum(outputs[first:stop]) / M,
            peak=peaks[s],
            schedule=spec.schedule,
            rematerialization=spec.rematerialization,
        )

    def fits(s: int, first: int, stop: int) -> bool:
        return capacities[s] <= 0 or need(s, first, stop).total <= capacities[s]

    advice = (
        "use more stages, fewer micro-batches in flight, rematerialization: true or a smaller batch"
    )
    if spec.partition == "auto":
        try:
            partition_auto(len(params), S, lambda s, first, stop: 0.0, fits)
        except SimdistError:
            whole = need(0, 0, len(params))
            raise ScenarioError(
                source,
                "strategy.stages",
                f"no partition of the model's {len(params)} layers into {S} stages fits in "
                f"device memory (all of them on one device would need {whole.total / 1e9:,.3g} "
                f"GB: {_parts(whole)}); {advice}",
            ) from None
        return
    first = 0
    for s, count in enumerate(spec.partition):
        stop = first + int(count)
        if not fits(s, first, stop):
            stage, names = need(s, first, stop), footprint.layer_names
            device = min(
                (row[s] for row in grid), key=lambda d: cluster.profile_of(d).memory_nbytes
            )
            parts = ", ".join(
                f"{k} {format_size(v)}" for k, v in stage.as_dict().items() if k != "total" and v
            )
            raise ScenarioError(
                source,
                "strategy.partition",
                f"pipeline stage {s} (layers {names[first]}..{names[stop - 1]}) does not fit on "
                f"{device.name}: it needs {format_size(stage.total)} ({parts}) and a "
                f"{cluster.profile_of(device).name} has {format_size(capacities[s])}; {advice}",
            )
        first = stop
