"""Whether a run fits its devices' memory, checked before its first step.

Every strategy: each device's share of a replica — parameters, gradients, optimizer state
(unless parameter servers or the host CPU hold it) and one batch's activations, split as
the strategy's :class:`~simdist.sharding.Sharding` says, with its recomputation, at each
device class's precision (:mod:`simdist.memory.accounting`, which summary.json's
``memory_per_device`` also reports). Each strategy's spec picks its check
(``StrategySpecBase.check_memory``): a pipeline checks the stage and partition counts
against the model's layers, and each stage against its device, as
:class:`~simdist.strategies.pipeline.strategy.PipelineStrategy` places them
(:class:`simdist.memory.accounting.StagedReplica`; an ``auto`` partition is refused when no
partition fits, the only case in which it fails).

The layers come from a :class:`~simdist.numerics.memory.Footprint` (a profile file, or the
zoo model costed at batch 1), so nothing here needs JAX. Refusals are
:class:`~simdist.errors.ScenarioError` naming the scenario's file and the field to change.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simdist.errors import ScenarioError, SimdistError

if TYPE_CHECKING:
    from simdist.hardware.cluster import Cluster, Device
    from simdist.hardware.profiles import DeviceProfile
    from simdist.memory.accounting import DeviceMemory, StagedReplica
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario
    from simdist.strategies.spec_base import StrategySpecBase

__all__ = ["check_device_memory", "check_hybrid", "check_pipeline", "clock_field"]


def clock_field(scenario: Scenario) -> str:
    """The field naming the model whose layers set the clock."""
    w = scenario.workload
    if w.profile is not None:
        return "workload.profile"
    return "workload.timing_model" if w.timing_model is not None else "workload.model"


def _staged(scenario: Scenario, footprint: Footprint, precision: str, M: int) -> StagedReplica:
    """The footprint's layers on the scenario's batch, cut into stages of M micro-batches."""
    from simdist.memory.accounting import ReplicaLayers, StagedReplica

    layers = ReplicaLayers.of_footprint(footprint, int(scenario.workload.batch_size))
    return StagedReplica(scenario, layers, precision, M)


def _parts(need: DeviceMemory) -> str:
    gb = 1e9
    return ", ".join(f"{k} {v / gb:,.3g}" for k, v in need.parts().items())


def _split_advice(spec: StrategySpecBase) -> str:
    """``split the replica over devices (strategy kind pipeline, zero (stage 1, 2 or 3), ...
    or hybrid)``: the registered strategies whose spec says it splits a replica
    (``splits_replica``). A strategy that already splits is told to split further, and of
    the others."""
    from simdist.strategies import spec_classes

    own = type(spec)
    kinds = [c.splits_replica for c in spec_classes() if c.splits_replica and c is not own]
    listed = ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]
    if own.splits_replica:
        return (
            f"split it further (more devices in the {spec.kind} layout), or with another "
            f"strategy (kind {listed})"
        )
    return f"split the replica over devices (strategy kind {listed})"


def check_device_memory(scenario: Scenario, footprint: Footprint, source: str) -> None:
    """Refuse a layout whose share of a replica does not fit on one of the cluster's devices
    (:mod:`simdist.memory.accounting`: the strategy's sharding, each device class's precision)."""
    from simdist.hardware.cluster import Cluster

    cluster = Cluster(scenario.cluster)
    firsts: dict[str, Device] = {}
    for device in cluster.devices:
        firsts.setdefault(device.profile, device)
    for device in firsts.values():
        _check_device(scenario, footprint, source, device.name, cluster.profile_of(device))


def _check_device(
    scenario: Scenario, footprint: Footprint, source: str, name: str, profile: DeviceProfile
) -> None:
    """Refuse device ``name`` of ``profile`` when its share does not fit, with advice."""
    from simdist.memory.accounting import ReplicaLayers, scenario_memory
    from simdist.units import format_size

    capacity = profile.memory_nbytes
    w = scenario.workload
    batch = int(w.batch_size)

    layers = ReplicaLayers.of_footprint(footprint, batch)

    def need(b: int) -> DeviceMemory:
        return scenario_memory(scenario, replace(layers, batch=b), profile.precision)

    held = need(batch)
    if capacity <= 0 or held.total <= capacity:  # fits, or not known
        return
    fits, over = 0, batch  # the largest batch that fits: the need grows with the batch
    while over - fits > 1:
        mid = (fits + over) // 2
        fits, over = (mid, over) if need(mid).total <= capacity else (fits, mid)
    split = _split_advice(scenario.strategy)
    if fits >= 1:
        field = "workload.batch_size"
        recompute = "" if scenario.strategy.recompute == "full" else ", recompute: full"
        advice = f"{split}{recompute} or use a smaller batch, e.g. batch_size: {fits:,}"
    elif w.input_shape and need(0).total < capacity:
        field, advice = "workload.input_shape", "one example alone does not fit: smaller inputs"
    else:
        field = clock_field(scenario)
        advice = f"{split} or use a smaller model"
    gb = 1e9
    raise ScenarioError(
        source,
        field,
        f"does not fit: {name} needs {held.total / gb:,.3g} GB and a {profile.name} has "
        f"{capacity / gb:.3g} GB (params {held.params / gb:.3g}, grads "
        f"{held.gradients / gb:.3g}, optimizer {held.optimizer / gb:.3g}, activations "
        f"{held.activations / gb:,.3g} for {batch:,} examples of "
        f"{format_size(need(1).activations - need(0).activations)}); {advice}",
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
    from simdist.hardware.cluster import Cluster
    from simdist.hardware.mesh import Mesh
    from simdist.strategies.pipeline.plan import partition_auto, peak_in_flight, stage_ops
    from simdist.units import format_size

    _check_counts(scenario, footprint.layer_names, source)
    spec = scenario.strategy
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
    params = footprint.layer_param_nbytes
    staged = _staged(scenario, footprint, cluster.profile.precision, M)

    def need(s: int, first: int, stop: int) -> DeviceMemory:
        return staged.stage(
            first,
            stop,
            peaks[s],
            pipedream=spec.schedule == "pipedream",
            rematerialization=spec.rematerialization,
        )

    def fits(s: int, first: int, stop: int) -> bool:
        return capacities[s] <= 0 or need(s, first, stop).total <= capacities[s]

    advice = (
        "use more stages, fewer micro-batches in flight, recompute: full, rematerialization: "
        "true or a smaller batch"
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
            parts = stage.described()
            raise ScenarioError(
                source,
                "strategy.partition",
                f"pipeline stage {s} (layers {names[first]}..{names[stop - 1]}) does not fit on "
                f"{device.name}: it needs {format_size(stage.total)} ({parts}) and a "
                f"{cluster.profile_of(device).name} has {format_size(capacities[s])}; {advice}",
            )
        first = stop


def check_hybrid(scenario: Scenario, footprint: Footprint, source: str) -> None:
    """A hybrid layout's stages against each device: the pipeline's stage memory divided
    as the spec's sharding says (:func:`simdist.strategies.hybrid.plan.device_memory`); an
    ``auto`` partition is refused when no cut of the layers fits."""
    from simdist.hardware.cluster import Cluster
    from simdist.strategies.pipeline.plan import bounds, partition_auto, peak_in_flight, stage_ops
    from simdist.strategies.tensor_parallel.plan import layer_roles

    spec, w = scenario.strategy, scenario.workload
    S, M, names = spec.mesh.pipeline, spec.micro_batches, footprint.layer_names
    if len(names) < S:
        raise ScenarioError(
            source,
            "strategy.mesh.pipeline",
            f"got {S}; each stage holds at least one layer and the model has {len(names)}",
        )
    cluster = Cluster(scenario.cluster)
    mesh = spec.mesh_of(list(cluster.devices))
    stage_devices = [
        [d for d in mesh.devices if mesh.coordinate(d)["pipeline"] == s] for s in range(S)
    ]
    peaks = [peak_in_flight(ops) for ops in stage_ops(spec.schedule, S, M)]
    roles = layer_roles(w.clock_model.name, names)
    params = footprint.layer_param_nbytes
    staged = _staged(scenario, footprint, cluster.profile.precision, M)

    def need(s: int, first: int, stop: int) -> DeviceMemory:
        return staged.stage(first, stop, peaks[s], pipedream=False, rematerialization=False)

    def smallest(s: int) -> Device:
        return min(stage_devices[s], key=lambda d: cluster.profile_of(d).memory_nbytes)

    def fits(s: int, first: int, stop: int) -> bool:
        pairs = roles[first] != "row" and roles[stop - 1] != "column"
        capacity = cluster.profile_of(smallest(s)).memory_nbytes
        return pairs and (capacity <= 0 or need(s, first, stop).total <= capacity)

    if spec.partition == "auto":
        try:
            partition_auto(len(params), S, lambda s, first, stop: 0.0, fits)
            return
        except SimdistError:
            counts = partition_auto(len(params), S, lambda s, first, stop: 0.0)
    else:
        counts = tuple(int(n) for n in spec.partition)
        _check_partition(names, counts, S, source)
    for s, (first, stop) in enumerate(bounds(counts)):
        device = smallest(s)
        _refuse_stage(
            source, s, names[first], names[stop - 1], device, cluster, need(s, first, stop)
        )


def _refuse_stage(
    source: str,
    s: int,
    first: str,
    last: str,
    device: Device,
    cluster: Cluster,
    stage: DeviceMemory,
) -> None:
    """Refuse hybrid stage ``s`` (layers ``first``..``last``) if ``stage`` exceeds
    ``device``'s memory, naming the device, the need and the capacity."""
    from simdist.units import format_size

    profile = cluster.profile_of(device)
    capacity = profile.memory_nbytes
    if 0 < capacity < stage.total:
        parts = stage.described()
        raise ScenarioError(
            source,
            "strategy.mesh",
            f"hybrid stage {s} (layers {first}..{last}) does not fit on {device.name}: each "
            f"device of its tensor group needs {format_size(stage.total)} ({parts}) and a "
            f"{profile.name} has {format_size(capacity)}; use more stages, a larger tensor "
            "group, zero: 1 or 2, fewer micro-batches in flight or a smaller batch",
        )


def _check_partition(names: tuple[str, ...], counts: tuple[int, ...], S: int, source: str) -> None:
    """A hybrid partition list: one count per stage, adding up to the model's layers."""
    if len(counts) != S or sum(counts) != len(names):
        raise ScenarioError(
            source,
            "strategy.partition",
            f"got {list(counts)}; give {S} layer counts adding up to the model's "
            f"{len(names)} layers, e.g. partition: auto",
        )
