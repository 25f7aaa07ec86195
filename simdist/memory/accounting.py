"""The memory model: the bytes each training device holds at its peak, for every strategy.

Pure arithmetic (no SimPy, no JAX) on a replica's layers (:class:`ReplicaLayers`: the
parameter count Ψ and each layer's stored tensors per example) and on the
:class:`~simdist.sharding.Sharding` a strategy's spec declares; where a strategy differs
(its optimizer off the devices, more state copies, stages) its spec says so through hooks
(``optimizer_on_device``, ``extra_state_copies``, ``check_memory``, ``off_device_memory``),
never by its name. The same functions serve the check before a run
(:mod:`simdist.memory.fit`, from a :class:`~simdist.numerics.memory.Footprint`) and
summary.json's ``memory_per_device`` after it (from the run's
:class:`~simdist.step_costs.Costs`), so both say the same.

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
:func:`off_device_memory`. Under ``grad_reduce: fp32`` the gradients are float32 buffers
(4Ψ: Megatron's ``main_grad``, 18 bytes a parameter with Adam). A strategy that keeps
more parameter-sized float32 buffers per device (``StrategySpecBase.extra_state_copies``:
local_sgd's anchor and outer momentum, 4Ψ each) has them counted with the optimizer state.

Activations (:mod:`simdist.activation_memory`): every tensor each layer stores for its
backward pass on the per-replica batch, at the precision it is stored in (activations at the
training precision's element size, dropout masks at one byte), split over the tensor group
where Megatron splits it and everywhere under sequence parallelism (``Sharding.tensor`` and
``Sharding.activations``), the attention scores left out under ``workload.attention: flash``,
and what the spec's ``recompute`` keeps (Korthikanti et al. 2022, Table 2).

The optimizer step is memory-bound (:func:`optimizer_step_nbytes`): it reads the float32
master parameters, the gradient and the optimizer's copies and writes the master copy, the
copies and (under mixed precision) the half-precision parameters, on each device's share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from simdist.activation_memory import (
    Activations,
    ActivationTable,
    LayerTensors,
    gpt_layer_tensors,
    layer_tensors_of_outputs,
    stored_nbytes,
)
from simdist.hardware.fp8 import gemm_input_nbytes
from simdist.hardware.profiles import ELEMENT_NBYTES
from simdist.numerics.memory import OPTIMIZER_COPIES
from simdist.sharding import Sharding
from simdist.units import format_size

if TYPE_CHECKING:
    from simdist.hardware.cluster import Cluster, Device
    from simdist.numerics.memory import Footprint
    from simdist.scenario.schema import Scenario
    from simdist.step_costs import Costs

__all__ = [
    "FLOAT32_NBYTES",
    "MIXED_PRECISIONS",
    "DeviceMemory",
    "ReplicaLayers",
    "StagedReplica",
    "device_memory",
    "float32_nbytes",
    "host_held",
    "memory_per_device",
    "model_state_nbytes",
    "model_tensors",
    "off_device_memory",
    "optimizer_step_nbytes",
    "scenario_memory",
    "state_nbytes_per_param",
]

#: Bytes of one parameter as profiles count them (float32).
FLOAT32_NBYTES = 4
#: Precisions trained in mixed precision: half-precision copies, a float32 master copy
#: (``fp8`` too: TransformerEngine keeps BF16 weights and gradients, simdist.hardware.fp8).
MIXED_PRECISIONS = ("fp16", "bf16", "fp8")


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds at its peak: model state and stashed activations (by kind in
    ``activation_parts``, with what recomputation freed)."""

    params: int
    gradients: int
    optimizer: int
    activations: int
    activation_parts: Activations | None = field(default=None, compare=False)
    weight_versions: int = 0  # pipedream's stashed older weights

    @property
    def total(self) -> int:
        """Everything at once: the peak."""
        return (
            self.params + self.gradients + self.optimizer + self.activations + self.weight_versions
        )

    def parts(self) -> dict[str, int]:
        """What it holds, by part (weight versions when there are any), without the total."""
        out = {
            "params": self.params,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
        }
        if self.weight_versions:
            out["weight_versions"] = self.weight_versions
        return out

    def described(self) -> str:
        """The parts it holds in words, for a refusal: ``params 6.5 GiB, gradients ...``."""
        return ", ".join(f"{k} {format_size(v)}" for k, v in self.parts().items() if v)

    def as_dict(self) -> dict[str, Any]:
        """The parts and the total, for summary.json (activations by kind when known)."""
        out: dict[str, Any] = {
            "params": self.params,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "total": self.total,
        }
        if self.weight_versions:
            out["weight_versions"] = self.weight_versions
        if self.activation_parts is not None:
            out["activations_by_kind"] = self.activation_parts.as_dict()
        return out


@dataclass(frozen=True)
class ReplicaLayers:
    """One replica's layers on its batch, as the memory model reads a model: the parameter
    count Ψ, each layer's parameter count and stored tensors per example, and the
    per-replica batch."""

    params: int
    layer_params: tuple[int, ...]
    tensors: tuple[LayerTensors, ...]
    batch: int
    # ActivationTables made of these layers, by their settings (shared by ``replace``).
    tables: dict[tuple, ActivationTable] = field(default_factory=dict, compare=False, repr=False)

    def table(self, **settings: Any) -> ActivationTable:
        """The :class:`~simdist.activation_memory.ActivationTable` of these layers under
        ``settings`` (its keyword arguments), made once: it does not depend on the batch."""
        key = tuple(sorted(settings.items()))
        if key not in self.tables:
            self.tables[key] = ActivationTable(self.tensors, **settings)
        return self.tables[key]

    @classmethod
    def of_footprint(cls, footprint: Footprint, batch: int) -> ReplicaLayers:
        """A :class:`~simdist.numerics.memory.Footprint` on a per-replica batch."""
        per = [math.ceil(n / FLOAT32_NBYTES) for n in footprint.layer_param_nbytes]
        tensors = footprint.layer_tensors
        if not tensors:
            scale = 1.0 if footprint.per_example else 1.0 / max(1, batch)
            tensors = tuple(
                layer_tensors_of_outputs(
                    [x * scale / FLOAT32_NBYTES for x in footprint.layer_output_nbytes],
                    footprint.example_nbytes / FLOAT32_NBYTES,
                )
            )
        return cls(math.ceil(footprint.param_nbytes / FLOAT32_NBYTES), tuple(per), tensors, batch)

    @classmethod
    def of_costs(
        cls, costs: Costs, batch: int, tensors: Sequence[LayerTensors] | None = None
    ) -> ReplicaLayers:
        """A run's costs (its layers on the per-replica batch, their bytes at
        ``costs.element_nbytes`` an element); ``tensors``: the model's own stored tensors
        (:func:`model_tensors`) when known."""
        per_element = max(1, costs.element_nbytes)
        psi = math.ceil(costs.param_nbytes / per_element)
        if not costs.layers:  # hand-made costs: one layer, the step
            found = tensors or layer_tensors_of_outputs([], 0.0)
            return cls(psi, (psi,), tuple(found), batch)
        per = tuple(math.ceil(x.param_nbytes / per_element) for x in costs.layers)
        if tensors is None or len(tensors) != len(costs.layers):
            b = max(1, batch)
            tensors = layer_tensors_of_outputs(
                [x.output_nbytes / per_element / b for x in costs.layers],
                costs.example_nbytes / FLOAT32_NBYTES,
            )
        return cls(psi, per, tuple(tensors), batch)


def model_tensors(scenario: Scenario) -> list[LayerTensors] | None:
    """The clock model's stored tensors per example when simdist knows them from its sizes
    (a gpt or GPT-2, :func:`simdist.activation_memory.gpt_layer_tensors`); None else."""
    from simdist.catalog import GPT_DEFAULTS
    from simdist.gpt_shape import GptShape

    w = scenario.workload
    if w.profile is not None:
        return None
    spec = w.clock_model
    if spec.name not in ("gpt", "gpt2"):
        return None
    sizes = spec.gpt_sizes() or dict(GPT_DEFAULTS)
    tokens = int(w.input_shape[0]) if w.input_shape else sizes["seq_len"]
    return gpt_layer_tensors(GptShape(**sizes), tokens=tokens)


def state_nbytes_per_param(
    precision: str, optimizer: str, fp32_grads: bool = False
) -> tuple[int, int, int]:
    """Bytes per parameter of the parameters, gradients and optimizer state (module doc).

    ``fp32_grads``: mixed precision with float32 gradient buffers (``grad_reduce: fp32``,
    Megatron's ``--accumulate-allreduce-grads-in-fp32``: its ``main_grad``), 4 bytes a
    gradient; Megatron's theoretical_memory_usage.py counts 18 bytes a parameter so."""
    copies = OPTIMIZER_COPIES.get(optimizer, 2)
    if precision in MIXED_PRECISIONS:
        half = ELEMENT_NBYTES[precision]
        grads = FLOAT32_NBYTES if fp32_grads else half
        return half, grads, FLOAT32_NBYTES * (1 + copies)
    return FLOAT32_NBYTES, FLOAT32_NBYTES, FLOAT32_NBYTES * copies


def model_state_nbytes(
    params: int,
    *,
    precision: str,
    optimizer: str,
    sharding: Sharding,
    optimizer_on_device: bool = True,
    fp32_grads: bool = False,
) -> tuple[int, int, int]:
    """One device's parameters, gradients and optimizer state for ``params`` parameters
    (Ψ), each split as ``sharding`` says (⌈Ψ / N⌉ elements a device)."""
    per_params, per_grads, per_opt = state_nbytes_per_param(precision, optimizer, fp32_grads)
    return (
        per_params * math.ceil(params / sharding.params),
        per_grads * math.ceil(params / sharding.gradients),
        per_opt * math.ceil(params / sharding.optimizer) if optimizer_on_device else 0,
    )


def optimizer_step_nbytes(
    params: int, *, precision: str, optimizer: str, shards: int = 1, grad_nbytes: int = 0
) -> int:
    """Device-memory bytes one optimizer step reads and writes for its ⌈Ψ / shards⌉
    parameters: the float32 master (or only) copy read and written, the gradient read
    (``grad_nbytes`` an element; default the precision's), each optimizer copy read and
    written, and under mixed precision the half-precision parameters written back
    (Micikevicius et al. 2018, Sec. 3.1). Adam: 4 + 2 + 16 + 4 + 2 = 28 bytes a parameter
    in mixed precision, 4 + 4 + 16 + 4 = 28 in float32; sgd in float32: 12."""
    copies = OPTIMIZER_COPIES.get(optimizer, 2)
    mixed = precision in MIXED_PRECISIONS
    grad = grad_nbytes or (ELEMENT_NBYTES[precision] if mixed else FLOAT32_NBYTES)
    per = 2 * FLOAT32_NBYTES + grad + 2 * FLOAT32_NBYTES * copies
    per += ELEMENT_NBYTES[precision] if mixed else 0
    return per * math.ceil(params / max(1, shards))


def device_memory(
    layers: ReplicaLayers,
    *,
    precision: str,
    optimizer: str,
    sharding: Sharding,
    optimizer_on_device: bool = True,
    recompute: str = "none",
    recompute_layers: int = 1,
    flash: bool = False,
    fp32_grads: bool = False,
) -> DeviceMemory:
    """What one device of a replica holds at its peak: its share of the model state and of
    the activations, at ``precision`` (module doc)."""
    params, grads, opt = model_state_nbytes(
        layers.params,
        precision=precision,
        optimizer=optimizer,
        sharding=sharding,
        optimizer_on_device=optimizer_on_device,
        fp32_grads=fp32_grads,
    )
    held = layers.table(
        act_nbytes=ELEMENT_NBYTES.get(precision, FLOAT32_NBYTES),
        gemm_input_nbytes=gemm_input_nbytes(precision),
        sharding=sharding,
        flash=flash,
        recompute=recompute,
        recompute_layers=recompute_layers,
    ).span(examples=layers.batch)
    return DeviceMemory(params, grads, opt, held.total, held)


def scenario_memory(scenario: Scenario, layers: ReplicaLayers, precision: str) -> DeviceMemory:
    """:func:`device_memory` with the scenario's optimizer, attention, its strategy's
    sharding and recomputation, and where its optimizer state lives (the spec's hooks)."""
    spec = scenario.strategy
    params = spec.device_params(layers.params, scenario)
    if params != layers.params:  # a device holding part of the replica (experts over devices)
        layers = replace(layers, params=params)
    held = device_memory(
        layers,
        precision=precision,
        optimizer=scenario.workload.optimizer.name,
        sharding=spec.sharding(scenario.cluster),
        optimizer_on_device=spec.optimizer_on_device,
        recompute=spec.recompute,
        recompute_layers=spec.recompute_layers,
        flash=scenario.workload.attention == "flash",
        fp32_grads=spec.grad_reduce == "fp32",
    )
    extra = spec.extra_state_copies()
    if not extra:
        return held
    return replace(held, optimizer=held.optimizer + extra * FLOAT32_NBYTES * layers.params)


class StagedReplica:
    """A replica's layers cut into pipeline stages: what one device of a stage holds.

    Each stage's model state is its own layers' parameters (Ψ_stage) split as the spec's
    sharding says (a hybrid's tensor group and ZeRO stage), at the precision's bytes per
    parameter; its activations are its layers' stored tensors on one micro-batch
    (:class:`~simdist.activation_memory.ActivationTable`, the spec's recomputation), times
    the micro-batches in flight at its peak. The pipeline's ``rematerialization`` keeps
    only each in-flight micro-batch's stage input and recomputes the whole stage for its
    backward (one checkpoint per stage). pipedream also stashes one older half- or
    full-precision copy of the weights per in-flight micro-batch but the newest.
    Stage sums come from running totals: the auto partition asks for every range.
    """

    def __init__(
        self, scenario: Scenario, layers: ReplicaLayers, precision: str, micro_batches: int
    ) -> None:
        spec = scenario.strategy
        self.precision = precision
        self.optimizer = scenario.workload.optimizer.name
        self.sharding = spec.sharding(scenario.cluster)
        self.on_device = spec.optimizer_on_device
        self.fp32_grads = spec.grad_reduce == "fp32"
        self.act_nbytes = ELEMENT_NBYTES.get(precision, FLOAT32_NBYTES)
        common = {
            "act_nbytes": self.act_nbytes,
            "gemm_input_nbytes": gemm_input_nbytes(precision),
            "sharding": self.sharding,
            "flash": scenario.workload.attention == "flash",
        }
        self.table = ActivationTable(
            layers.tensors,
            recompute=spec.recompute,
            recompute_layers=spec.recompute_layers,
            **common,
        )
        self.whole = ActivationTable(layers.tensors, **common)
        self.inputs = [t.input for t in layers.tensors]
        self.params = list(accumulate(layers.layer_params, initial=0))
        # Parameters split otherwise (hybrid's experts over the expert axis), layer by layer.
        names = [t.name for t in layers.tensors]
        experts = spec.expert_layer_params(scenario, names) if names else None
        self.experts = list(accumulate(experts, initial=0)) if experts else None
        self.expert_sharding = spec.expert_sharding(scenario.cluster)
        self.micro = layers.batch / micro_batches
        self.extra = spec.extra_state_copies()

    def stage(
        self, first: int, stop: int, peak: int, *, pipedream: bool, rematerialization: bool
    ) -> DeviceMemory:
        """One device of the stage holding layers ``[first, stop)``, ``peak`` micro-batches
        in flight."""
        psi = self.params[stop] - self.params[first]
        held = self.experts[stop] - self.experts[first] if self.experts else 0
        params, grads, opt = model_state_nbytes(
            psi - held,
            precision=self.precision,
            optimizer=self.optimizer,
            sharding=self.sharding,
            optimizer_on_device=self.on_device,
            fp32_grads=self.fp32_grads,
        )
        if held:
            state = model_state_nbytes(
                held,
                precision=self.precision,
                optimizer=self.optimizer,
                sharding=self.expert_sharding,
                optimizer_on_device=self.on_device,
                fp32_grads=self.fp32_grads,
            )
            params, grads, opt = params + state[0], grads + state[1], opt + state[2]
        opt += self.extra * FLOAT32_NBYTES * psi
        if rematerialization:
            whole = self.whole.span(first, stop, examples=self.micro).total
            one = stored_nbytes(self.inputs[first], self.act_nbytes, self.sharding) * self.micro
            held = Activations(
                stored_inputs=math.ceil(one * peak),
                recompute_working_set=max(0, whole - math.ceil(one)) if peak else 0,
                freed_by_recompute=max(0, whole * peak - math.ceil(one * peak)),
            )
        else:
            held = self.table.span(first, stop, examples=self.micro, in_flight=peak)
            if not peak:
                held = replace(held, recompute_working_set=0)
        versions = max(peak - 1, 0) * params if pipedream else 0
        return DeviceMemory(params, grads, opt, held.total, held, versions)

    def stashed(self, first: int, stop: int, rematerialization: bool) -> int:
        """Bytes one micro-batch's activations through layers ``[first, stop)`` leave
        stashed until its backward (the working set not counted)."""
        one = self.stage(first, stop, 1, pipedream=False, rematerialization=rematerialization)
        parts = one.activation_parts
        assert parts is not None
        return parts.total - parts.recompute_working_set

    def chunks(
        self, spans: Sequence[tuple[int, int]], held: Sequence[int], rematerialization: bool
    ) -> DeviceMemory:
        """One device holding several runs of layers (the interleaved schedule's model
        chunks ``spans``), ``held[i]`` micro-batches of ``spans[i]`` in flight at its peak:
        every chunk's model state and stashed activations, the largest working set once
        (one pass runs at a time)."""
        parts = [
            self.stage(a, b, n, pipedream=False, rematerialization=rematerialization)
            for (a, b), n in zip(spans, held, strict=True)
        ]
        acts = [p.activation_parts or Activations() for p in parts]
        held_acts = Activations(
            stored_inputs=sum(x.stored_inputs for x in acts),
            attention_scores=sum(x.attention_scores for x in acts),
            masks=sum(x.masks for x in acts),
            recompute_working_set=max(x.recompute_working_set for x in acts),
            freed_by_recompute=sum(x.freed_by_recompute for x in acts),
        )
        return DeviceMemory(
            sum(p.params for p in parts),
            sum(p.gradients for p in parts),
            sum(p.optimizer for p in parts),
            held_acts.total,
            held_acts,
        )


def memory_per_device(
    scenario: Scenario, costs: Costs, cluster: Cluster, devices: Sequence[Device]
) -> dict[str, dict[str, Any]]:
    """summary.json's ``memory_per_device``: each training device's peak bytes, by part.

    Keyed by device name as a pipeline's are; every device of a data-parallel or sharded
    replica holds the same share, and a mixed cluster's classes differ in precision only.
    """
    layers = ReplicaLayers.of_costs(
        costs, int(scenario.workload.batch_size), model_tensors(scenario)
    )
    by_precision: dict[str, dict[str, Any]] = {}
    out = {}
    for device in devices:
        precision = cluster.profile_of(device).precision
        if precision not in by_precision:
            by_precision[precision] = scenario_memory(scenario, layers, precision).as_dict()
        out[device.name] = by_precision[precision]
    return out


def off_device_memory(scenario: Scenario, costs: Costs, cluster: Cluster) -> dict[str, dict]:
    """summary.json's ``memory_off_device``: what the strategy's spec says holds the
    optimizer off the devices (``StrategySpecBase.off_device_memory``); empty for most."""
    return scenario.strategy.off_device_memory(scenario, costs, cluster)


def host_held(variables: int, trainable: int, optimizer: str) -> dict[str, Any]:
    """What a host holding ``variables`` bytes (``trainable`` of them trained) keeps in
    float32: the variables, one gradient buffer and the optimizer's copies."""
    copies = OPTIMIZER_COPIES.get(optimizer, 2)
    return DeviceMemory(variables, trainable, copies * trainable, 0).as_dict()


def float32_nbytes(costs: Costs, nbytes: int) -> int:
    """``nbytes`` counted at ``costs.element_nbytes`` an element, in float32."""
    return round(nbytes * FLOAT32_NBYTES / max(1, costs.element_nbytes))
