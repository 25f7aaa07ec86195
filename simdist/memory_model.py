"""The memory model: the bytes each training device holds at its peak, for every strategy.

Pure arithmetic (no SimPy, no JAX) on a replica's layers — parameter bytes and output bytes
on the per-replica batch, counted in float32 as profiles count them — and on the
:class:`~simdist.sharding.Sharding` a strategy's spec declares. The same functions serve
the check before a run (:mod:`simdist.device_memory`, from a
:class:`~simdist.numerics.memory.Footprint`) and summary.json's ``memory_per_device``
after it (from the run's :class:`~simdist.strategies.base.Costs`), so both say the same.

Model state, after ZeRO's accounting (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models", Sec. 3.1 and Fig. 1), for Ψ parameters:

* fp32 / tf32 (simdist's default): parameters 4Ψ, gradients 4Ψ, optimizer state 4Ψ per
  copy optax keeps (:data:`~simdist.numerics.memory.OPTIMIZER_COPIES`: sgd 0, momentum 1,
  Adam 2);
* fp16 / bf16 (mixed precision, Micikevicius et al. 2018 Sec. 3.1: half-precision weights
  and gradients, a float32 master copy the optimizer updates): parameters 2Ψ, gradients 2Ψ,
  optimizer KΨ with K = 4 (the master copy) + 4 per optax copy — K = 12 for Adam, ZeRO's
  figure.

Each part is split over the devices its ``Sharding`` divisor says, padded as DeepSpeed
pads its flat buffers (each device holds ⌈Ψ / N⌉ elements): ZeRO stage 1 (optimizer N) is
4Ψ + KΨ/N in mixed precision, stage 2 (gradients and optimizer N) 2Ψ + (2 + K)Ψ/N, stage 3
(all three N) (4 + K)Ψ/N. Strategies whose optimizer runs elsewhere (parameter servers,
central storage's host CPU) hold no optimizer state on their devices; what those hold is
:func:`off_device_memory`. A strategy that keeps more parameter-sized float32 buffers per
device (``StrategySpecBase.extra_state_copies``: local_sgd's anchor and outer momentum, 4Ψ
each) has them counted with the optimizer state.

Activations: what the backward pass needs of one step on the per-replica batch, the batch's
input and every layer's output (each layer's saved activations are its output, the only
size a profile gives), at the precision's element size (half of float32's at fp16 / bf16,
as the roofline reads them). With recomputation (a spec's ``rematerialization: true``) the
layers are cut into ⌈√L⌉-layer segments (Chen et al. 2016, "Training Deep Nets with
Sublinear Memory Cost", Sec. 4.1): only each segment's input is kept, and a segment's
outputs exist again only while it is recomputed for its backward; Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models", Sec. 5) keep the input of
each transformer layer, the same rule with a segment per layer. The activations are divided
by ``Sharding.activations`` (sequence parallelism).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simdist.numerics.memory import OPTIMIZER_COPIES
from simdist.profiles import ELEMENT_NBYTES
from simdist.sharding import Sharding

if TYPE_CHECKING:
    from simdist.cluster import Cluster, Device
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario
    from simdist.strategies.base import Costs

__all__ = [
    "FLOAT32_NBYTES",
    "MIXED_PRECISIONS",
    "OPTIMIZER_ELSEWHERE",
    "DeviceMemory",
    "ReplicaLayers",
    "device_memory",
    "memory_per_device",
    "model_state_nbytes",
    "off_device_memory",
    "scenario_memory",
    "stashed_activations",
    "state_nbytes_per_param",
]

#: Bytes of one parameter as profiles count them (float32).
FLOAT32_NBYTES = 4
#: Precisions trained in mixed precision: half-precision copies, a float32 master copy.
MIXED_PRECISIONS = ("fp16", "bf16")
#: Strategies whose optimizer state lives off the training devices (on the parameter
#: servers, or the host CPU of central storage).
OPTIMIZER_ELSEWHERE = ("parameter_server", "central_storage")


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds at its peak: model state and stashed activations."""

    params: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        """Everything at once: the peak."""
        return self.params + self.gradients + self.optimizer + self.activations

    def as_dict(self) -> dict[str, int]:
        """The parts and the total, for summary.json."""
        return {
            "params": self.params,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "total": self.total,
        }


@dataclass(frozen=True)
class ReplicaLayers:
    """One replica's layers on its batch: float32 parameter bytes, each layer's output
    bytes and the batch's input bytes (what the memory model reads of a model)."""

    param_nbytes: int
    output_nbytes: tuple[float, ...]
    input_nbytes: float

    @classmethod
    def of_footprint(cls, footprint: Footprint, batch: int) -> ReplicaLayers:
        """A :class:`~simdist.numerics.memory.Footprint` on a per-replica batch."""
        return cls(
            footprint.param_nbytes,
            tuple(footprint.outputs_at(batch)),
            float(footprint.example_nbytes) * batch,
        )

    @classmethod
    def of_costs(cls, costs: Costs, batch: int) -> ReplicaLayers:
        """A run's costs (its layers are on the per-replica batch already)."""
        if not costs.layers:  # hand-made costs: one layer, the step
            return cls(costs.param_nbytes, (), float(costs.example_nbytes) * batch)
        return cls(
            sum(layer.param_nbytes for layer in costs.layers),
            tuple(float(layer.output_nbytes) for layer in costs.layers),
            float(costs.example_nbytes) * batch,
        )


def state_nbytes_per_param(precision: str, optimizer: str) -> tuple[int, int, int]:
    """Bytes per parameter of the parameters, gradients and optimizer state (module doc)."""
    copies = OPTIMIZER_COPIES.get(optimizer, 2)
    if precision in MIXED_PRECISIONS:
        half = ELEMENT_NBYTES[precision]
        return half, half, FLOAT32_NBYTES * (1 + copies)
    return FLOAT32_NBYTES, FLOAT32_NBYTES, FLOAT32_NBYTES * copies


def model_state_nbytes(
    param_nbytes: int,
    *,
    precision: str,
    optimizer: str,
    sharding: Sharding,
    optimizer_on_device: bool = True,
) -> tuple[int, int, int]:
    """One device's parameters, gradients and optimizer state, each split as ``sharding``
    says (⌈Ψ / N⌉ elements a device) for a model of ``param_nbytes`` float32 bytes."""
    psi = math.ceil(param_nbytes / FLOAT32_NBYTES)
    per_params, per_grads, per_opt = state_nbytes_per_param(precision, optimizer)
    return (
        per_params * math.ceil(psi / sharding.params),
        per_grads * math.ceil(psi / sharding.gradients),
        per_opt * math.ceil(psi / sharding.optimizer) if optimizer_on_device else 0,
    )


def stashed_activations(
    input_nbytes: float, output_nbytes: Sequence[float], recompute: bool = False
) -> float:
    """Peak bytes of activations a step keeps for its backward pass (module doc).

    Without recomputation: the input and every layer's output. With it: ⌈√L⌉-layer
    segments, the backward going from the last to the first; while segment j is recomputed
    the inputs of segments 0..j are held with segment j's outputs.
    """
    outputs = list(output_nbytes)
    if not recompute or not outputs:
        return input_nbytes + sum(outputs)
    k = math.isqrt(len(outputs) - 1) + 1  # ⌈√L⌉
    held, peak = 0.0, 0.0
    for first in range(0, len(outputs), k):
        held += input_nbytes if first == 0 else outputs[first - 1]
        peak = max(peak, held + sum(outputs[first : first + k]))
    return peak


def device_memory(
    layers: ReplicaLayers,
    *,
    precision: str,
    optimizer: str,
    sharding: Sharding,
    optimizer_on_device: bool = True,
    recompute: bool = False,
) -> DeviceMemory:
    """What one device of a replica holds at its peak: its share of the model state and of
    the activations, at ``precision`` (module doc)."""
    params, grads, opt = model_state_nbytes(
        layers.param_nbytes,
        precision=precision,
        optimizer=optimizer,
        sharding=sharding,
        optimizer_on_device=optimizer_on_device,
    )
    stashed = stashed_activations(layers.input_nbytes, layers.output_nbytes, recompute)
    scale = ELEMENT_NBYTES.get(precision, FLOAT32_NBYTES) / FLOAT32_NBYTES
    return DeviceMemory(params, grads, opt, math.ceil(stashed * scale / sharding.activations))


def scenario_memory(scenario: Scenario, layers: ReplicaLayers, precision: str) -> DeviceMemory:
    """:func:`device_memory` with the scenario's optimizer, its strategy's sharding and
    recomputation, and where its optimizer state lives."""
    spec = scenario.strategy
    held = device_memory(
        layers,
        precision=precision,
        optimizer=scenario.workload.optimizer.name,
        sharding=spec.sharding(scenario.cluster),
        optimizer_on_device=spec.kind not in OPTIMIZER_ELSEWHERE,
        recompute=bool(getattr(spec, "rematerialization", False)),
    )
    extra = spec.extra_state_copies()
    if not extra:
        return held
    psi = math.ceil(layers.param_nbytes / FLOAT32_NBYTES)
    return replace(held, optimizer=held.optimizer + extra * FLOAT32_NBYTES * psi)


def memory_per_device(
    scenario: Scenario, costs: Costs, cluster: Cluster, devices: Sequence[Device]
) -> dict[str, dict[str, int]]:
    """summary.json's ``memory_per_device``: each training device's peak bytes, by part.

    Keyed by device name as a pipeline's are; every device of a data-parallel or sharded
    replica holds the same share, and a mixed cluster's classes differ in precision only.
    """
    layers = ReplicaLayers.of_costs(costs, int(scenario.workload.batch_size))
    by_precision: dict[str, dict[str, int]] = {}
    out = {}
    for device in devices:
        precision = cluster.profile_of(device).precision
        if precision not in by_precision:
            by_precision[precision] = scenario_memory(scenario, layers, precision).as_dict()
        out[device.name] = by_precision[precision]
    return out


def off_device_memory(scenario: Scenario, costs: Costs, cluster: Cluster) -> dict[str, dict]:
    """summary.json's ``memory_off_device``: what holds the optimizer off the devices, in
    float32. Each parameter-server task its partition (its variables, BatchNormalization's
    moving statistics included; one gradient buffer and the optimizer's copies of its
    trainable ones), or central storage's host CPU the whole model (the variables, the
    reduced gradient, the optimizer state). Empty for every other strategy."""
    kind = scenario.strategy.kind
    copies = OPTIMIZER_COPIES.get(scenario.workload.optimizer.name, 2)

    def held(variables: int, trainable: int) -> dict[str, int]:
        return DeviceMemory(variables, trainable, copies * trainable, 0).as_dict()

    if kind == "central_storage":
        nbytes = costs.param_nbytes
        return {f"{cluster.workers[0].name}/host-cpu": held(nbytes, nbytes)}
    if kind != "parameter_server":
        return {}
    from simdist.strategies.parameter_server.partition import batch_norm_state_leaves, partition

    spec, leaves = scenario.strategy, costs.param_leaves
    state = batch_norm_state_leaves(leaves)
    untrained = {path for path, _, _ in state}
    shards = partition(
        [*leaves, *state],
        len(cluster.ps_hosts),
        spec.partitioner,
        spec.min_shard_bytes,
        spec.max_shards,
    )
    variables = [0] * len(cluster.ps_hosts)
    trainable = [0] * len(cluster.ps_hosts)
    for shard in shards:
        variables[shard.ps] += shard.nbytes
        trainable[shard.ps] += 0 if shard.path in untrained else shard.nbytes
    return {
        host.name: held(v, t)
        for host, v, t in zip(cluster.ps_hosts, variables, trainable, strict=True)
    }
