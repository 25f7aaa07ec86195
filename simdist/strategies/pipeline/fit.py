"""Whether a pipeline's stages fit the model's layers and their devices' memory, checked
before its first step (the pipeline spec's ``check_memory``).

Each stage against its device, as
:class:`~simdist.strategies.pipeline.strategy.PipelineStrategy` places them
(:class:`simdist.memory.accounting.StagedReplica`); an ``auto`` partition is refused when
no partition fits, the only case in which it fails. The hybrid layout's stages
(:mod:`simdist.strategies.hybrid`) are cut by the same helpers. Nothing here needs JAX:
the layers come from a :class:`~simdist.numerics.memory.Footprint`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simdist.errors import ScenarioError, SimdistError
from simdist.strategies.pipeline.plan import (
    bounds,
    chunks_at_peak,
    interleaved_ops,
    partition_auto,
    peak_in_flight,
    stage_ops,
)

if TYPE_CHECKING:
    from simdist.memory.accounting import DeviceMemory, StagedReplica
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario

__all__ = ["check_chunks", "check_partition", "check_pipeline", "chunk_memories", "staged"]


def staged(scenario: Scenario, footprint: Footprint, precision: str, M: int) -> StagedReplica:
    """The footprint's layers on the scenario's batch, cut into stages of M micro-batches."""
    from simdist.memory.accounting import ReplicaLayers, StagedReplica

    layers = ReplicaLayers.of_footprint(footprint, int(scenario.workload.batch_size))
    return StagedReplica(scenario, layers, precision, M)


def _parts(need: DeviceMemory) -> str:
    gb = 1e9
    return ", ".join(f"{k} {v / gb:,.3g}" for k, v in need.parts().items())


def chunk_memories(
    cut: StagedReplica,
    spans: list[tuple[int, int]],
    stages: int,
    virtual_stages: int,
    micro_batches: int,
    rematerialization: bool = False,
) -> list[DeviceMemory]:
    """Each stage's device under the interleaved schedule holding its model chunks
    (``spans``: the S·V chunks' layers): their model state and, at the moment its stashed
    activations weigh most (:func:`~.plan.chunks_at_peak`), each chunk's micro-batches in
    flight (:meth:`~simdist.memory.accounting.StagedReplica.chunks`). For equal chunks and
    M ≥ S stage 0 then holds ``1 + (S − 1)/(S·V)`` times 1f1b's S micro-batches of its
    layers (Korthikanti et al. 2022, "Reducing activation recomputation in large
    transformer models", Sec. 4.2.3; Megatron-LM's ``interleaved_schedule_memory_penalty``,
    megatron/training/theoretical_memory_usage.py at 00caa53)."""
    S = stages
    out = []
    for s, ops in enumerate(interleaved_ops(S, virtual_stages, micro_batches)):
        mine = range(s, len(spans), S)
        weights = {j: cut.stashed(*spans[j], rematerialization) for j in mine}
        peak = chunks_at_peak(ops, weights.__getitem__)
        held = [peak.get(j, 0) for j in mine]
        out.append(cut.chunks([spans[j] for j in mine], held, rematerialization))
    return out


def check_chunks(names: tuple[str, ...], stages: int, virtual_stages: int, source: str) -> None:
    """The interleaved schedule's S·V model chunks hold one layer at least each."""
    n, chunks = len(names), stages * virtual_stages
    if n < chunks:
        shown = ", ".join(names) if n <= 12 else f"{', '.join(names[:12])}, ..."
        raise ScenarioError(
            source,
            "strategy.virtual_stages",
            f"got {virtual_stages}; schedule interleaved cuts the model into {stages} stages "
            f"x {virtual_stages} = {chunks} model chunks of one layer at least, and the model "
            f"has {n} layers ({shown}), e.g. virtual_stages: {max(2, n // stages)}",
        )


def _check_counts(scenario: Scenario, names: tuple[str, ...], source: str) -> None:
    """Stages and a partition list against the clock model's layers."""
    spec = scenario.strategy
    S, n = spec.stages, len(names)
    shown = ", ".join(names) if n <= 12 else f"{', '.join(names[:12])}, ..."
    if spec.schedule == "interleaved":
        check_chunks(names, S, spec.virtual_stages, source)
        S *= spec.virtual_stages
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
    from simdist.units import format_size

    _check_counts(scenario, footprint.layer_names, source)
    spec = scenario.strategy
    S, M, R = spec.stages, spec.micro_batches, spec.pipeline_replicas
    cluster = Cluster(scenario.cluster)
    grid = Mesh.of(cluster.devices, {"data": R, "pipeline": S}).groups("pipeline")
    capacities = [
        min(float(cluster.profile_of(row[s]).memory_nbytes) for row in grid) for s in range(S)
    ]
    if spec.schedule == "interleaved":
        _check_interleaved(scenario, footprint, source, grid, capacities)
        return
    # pipedream streams M x steps micro-batches; a stage's peak is min(S - s, stream) either
    # way, so a stream of S + M shows the same peaks.
    stream = M * max(1, total_steps) if spec.schedule == "pipedream" else M
    peaks = [peak_in_flight(ops) for ops in stage_ops(spec.schedule, S, min(stream, S + M))]
    params = footprint.layer_param_nbytes
    cut = staged(scenario, footprint, cluster.profile.precision, M)

    def need(s: int, first: int, stop: int) -> DeviceMemory:
        return cut.stage(
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


def _check_interleaved(
    scenario: Scenario,
    footprint: Footprint,
    source: str,
    grid: list,
    capacities: list[float],
) -> None:
    """An interleaved pipeline's devices against their memory, for a partition list (an
    ``auto`` partition balances the chunks' times, which only the strategy knows: it
    checks the devices it gives, before the first step)."""
    from simdist.hardware.cluster import Cluster
    from simdist.units import format_size

    spec = scenario.strategy
    if spec.partition == "auto":
        return
    cluster = Cluster(scenario.cluster)
    S, V, M = spec.stages, spec.virtual_stages, spec.micro_batches
    cut = staged(scenario, footprint, cluster.profile.precision, M)
    spans = bounds(tuple(int(n) for n in spec.partition))
    names = footprint.layer_names
    for s, need in enumerate(chunk_memories(cut, spans, S, V, M, spec.rematerialization)):
        if 0 < capacities[s] < need.total:
            device = min(
                (row[s] for row in grid), key=lambda d: cluster.profile_of(d).memory_nbytes
            )
            layers = ", ".join(f"{names[a]}..{names[b - 1]}" for a, b in spans[s::S])
            raise ScenarioError(
                source,
                "strategy.partition",
                f"pipeline stage {s} (model chunks {', '.join(map(str, range(s, S * V, S)))}: "
                f"layers {layers}) does not fit on {device.name}: it needs "
                f"{format_size(need.total)} ({need.described()}) and a "
                f"{cluster.profile_of(device).name} has {format_size(capacities[s])}; use more "
                "stages, fewer micro-batches in flight, recompute: full, rematerialization: "
                "true or a smaller batch",
            )


def check_partition(names: tuple[str, ...], counts: tuple[int, ...], S: int, source: str) -> None:
    """A hybrid partition list: one count per stage, adding up to the model's layers."""
    if len(counts) != S or sum(counts) != len(names):
        raise ScenarioError(
            source,
            "strategy.partition",
            f"got {list(counts)}; give {S} layer counts adding up to the model's "
            f"{len(names)} layers, e.g. partition: auto",
        )
