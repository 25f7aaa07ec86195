"""Whether a hybrid layout's stages fit their devices' memory, checked before its first
step (the hybrid spec's ``check_memory``): the pipeline's stage memory
(:mod:`simdist.strategies.pipeline.fit`) divided as the spec's sharding says, on the
smallest device of each stage; an ``auto`` partition is refused when no cut of the layers
fits. Nothing here needs JAX: the layers come from a
:class:`~simdist.numerics.memory.Footprint`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simdist.errors import ScenarioError, SimdistError
from simdist.strategies.pipeline.fit import check_chunks, check_partition, chunk_memories, staged
from simdist.strategies.pipeline.plan import bounds, partition_auto, peak_in_flight, stage_ops
from simdist.strategies.tensor_parallel.plan import layer_roles

if TYPE_CHECKING:
    from simdist.hardware.cluster import Cluster, Device
    from simdist.memory.accounting import DeviceMemory
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario

__all__ = ["check_hybrid"]


def check_hybrid(scenario: Scenario, footprint: Footprint, source: str) -> None:
    """A hybrid layout's stages against each device: the pipeline's stage memory divided
    as the spec's sharding says (:func:`simdist.strategies.hybrid.plan.device_memory`); an
    ``auto`` partition is refused when no cut of the layers fits."""
    from simdist.hardware.cluster import Cluster

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
    if spec.schedule == "interleaved":
        _check_interleaved(scenario, footprint, source, stage_devices, cluster)
        return
    peaks = [peak_in_flight(ops) for ops in stage_ops(spec.schedule, S, M)]
    roles = layer_roles(w.clock_model.name, names)
    params = footprint.layer_param_nbytes
    cut = staged(scenario, footprint, cluster.profile.precision, M)

    def need(s: int, first: int, stop: int) -> DeviceMemory:
        return cut.stage(first, stop, peaks[s], pipedream=False, rematerialization=False)

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
        check_partition(names, counts, S, source)
    for s, (first, stop) in enumerate(bounds(counts)):
        device = smallest(s)
        layers = f"layers {names[first]}..{names[stop - 1]}"
        _refuse_stage(source, s, layers, device, cluster, need(s, first, stop))


def _check_interleaved(
    scenario: Scenario,
    footprint: Footprint,
    source: str,
    stage_devices: list[list[Device]],
    cluster: Cluster,
) -> None:
    """An interleaved hybrid layout: S·V model chunks of one layer at least, a partition
    list of one count per chunk, and each stage's devices holding their chunks
    (:func:`simdist.strategies.pipeline.fit.chunk_memories`) for a partition list (an
    ``auto`` partition balances the chunks' times, which the strategy checks)."""
    spec, names = scenario.strategy, footprint.layer_names
    S, V, M = spec.mesh.pipeline, spec.virtual_stages, spec.micro_batches
    check_chunks(names, S, V, source)
    if spec.partition == "auto":
        return
    counts = tuple(int(n) for n in spec.partition)
    check_partition(names, counts, S * V, source)
    spans = bounds(counts)
    cut = staged(scenario, footprint, cluster.profile.precision, M)
    for s, need in enumerate(chunk_memories(cut, spans, S, V, M)):
        device = min(stage_devices[s], key=lambda d: cluster.profile_of(d).memory_nbytes)
        chunks = range(s, S * V, S)
        layers = ", ".join(f"{names[spans[j][0]]}..{names[spans[j][1] - 1]}" for j in chunks)
        label = f"model chunks {', '.join(map(str, chunks))}: layers {layers}"
        _refuse_stage(source, s, label, device, cluster, need)


def _refuse_stage(
    source: str,
    s: int,
    layers: str,
    device: Device,
    cluster: Cluster,
    stage: DeviceMemory,
) -> None:
    """Refuse hybrid stage ``s`` (its ``layers`` in words) if ``stage`` exceeds
    ``device``'s memory, naming the device, the need and the capacity."""
    from simdist.units import format_size

    profile = cluster.profile_of(device)
    capacity = profile.memory_nbytes
    if 0 < capacity < stage.total:
        parts = stage.described()
        raise ScenarioError(
            source,
            "strategy.mesh",
            f"hybrid stage {s} ({layers}) does not fit on {device.name}: each "
            f"device of its tensor group needs {format_size(stage.total)} ({parts}) and a "
            f"{profile.name} has {format_size(capacity)}; use more stages, a larger tensor "
            "group, zero: 1 or 2, fewer micro-batches in flight or a smaller batch",
        )
