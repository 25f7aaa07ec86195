"""Whether a run fits its devices' memory, checked before its first step.

Every strategy: each device's share of a replica — parameters, gradients, optimizer state
(unless parameter servers or the host CPU hold it) and one batch's activations, split as
the strategy's :class:`~simdist.sharding.Sharding` says, with its recomputation, at each
device class's precision (:mod:`simdist.memory.accounting`, which summary.json's
``memory_per_device`` also reports). A strategy that places its devices otherwise (the
pipeline's and the hybrid layout's stages) checks them itself, in its spec's
``StrategySpecBase.check_memory`` (:mod:`simdist.strategies.pipeline.fit`).

The layers come from a :class:`~simdist.numerics.memory.Footprint` (a profile file, or the
zoo model costed at batch 1), so nothing here needs JAX. Refusals are
:class:`~simdist.errors.ScenarioError` naming the scenario's file and the field to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from simdist.errors import ScenarioError

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.hardware.profiles import DeviceProfile
    from simdist.memory.accounting import DeviceMemory
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario
    from simdist.strategies.spec_base import StrategySpecBase

__all__ = ["check_device_memory", "clock_field"]


def clock_field(scenario: Scenario) -> str:
    """The field naming the model whose layers set the clock."""
    w = scenario.workload
    if w.profile is not None:
        return "workload.profile"
    return "workload.timing_model" if w.timing_model is not None else "workload.model"


def _split_advice(spec: StrategySpecBase, others: Sequence[str]) -> str:
    """``split the replica over devices (strategy kind pipeline, zero (stage 1, 2 or 3), ...
    or hybrid)``: ``others`` are the other registered strategies whose spec says it splits a
    replica (their ``splits_replica``). A strategy that already splits is told to split
    further, and of the others."""
    listed = ", ".join(others[:-1]) + f" or {others[-1]}" if len(others) > 1 else others[0]
    if spec.splits_replica:
        return (
            f"split it further (more devices in the {spec.kind} layout), or with another "
            f"strategy (kind {listed})"
        )
    return f"split the replica over devices (strategy kind {listed})"


def check_device_memory(
    scenario: Scenario, footprint: Footprint, source: str, splitters: Sequence[str]
) -> None:
    """Refuse a layout whose share of a replica does not fit on one of the cluster's devices
    (:mod:`simdist.memory.accounting`: the strategy's sharding, each device class's
    precision), advising the strategies that split a replica (``splitters``: the other
    registered specs' ``splits_replica``, the caller's to know)."""
    from simdist.hardware.cluster import Cluster

    cluster = Cluster(scenario.cluster)
    firsts: dict[str, Device] = {}
    for device in cluster.devices:
        firsts.setdefault(device.profile, device)
    for device in firsts.values():
        _check_device(
            scenario, footprint, source, device.name, cluster.profile_of(device), splitters
        )


def _check_device(
    scenario: Scenario,
    footprint: Footprint,
    source: str,
    name: str,
    profile: DeviceProfile,
    splitters: Sequence[str],
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
    split = _split_advice(scenario.strategy, splitters)
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
