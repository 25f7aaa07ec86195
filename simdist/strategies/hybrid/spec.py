"""The scenario's ``strategy:`` section for ``kind: hybrid`` and its layout checks.

3D parallelism as Megatron-LM lays it out (Narayanan et al. 2021, "Efficient large-scale
language model training on GPU clusters using Megatron-LM", arXiv:2104.04473, Sec. 3):
D data-parallel copies of a pipeline of P stages, each stage's layers split over a tensor
group of T devices, D × P × T devices on the mesh (:mod:`simdist.hardware.mesh`), tensor innermost
so that a tensor group is inside a host. ``zero`` shards the optimizer state (1), the
gradients too (2) or the parameters too (3) over the data axis (Rajbhandari et al. 2020).

ZeRO stage 3 with pipelining is refused, as DeepSpeed's pipeline engine refuses it
(deepspeed/runtime/pipe/engine.py, ``PipelineEngine.__init__``: ``assert
self.zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are
incompatible with pipeline parallelism"``): every micro-batch's forward and backward would
all-gather its stage's parameters again. That assert refuses stage 2 too; simdist keeps
stage 2, whose gradients are reduce-scattered once after the flush as Megatron-LM's
distributed optimizer does with pipelining (megatron/core/optimizer/distrib_optimizer.py),
so it moves the bytes of stage 1.

Light on purpose: scenario loading reads it without SimPy, JAX or pandas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, NamedTuple

from pydantic import Field

from simdist.hardware.mesh import DEFAULT_ORDER, Mesh
from simdist.sharding import Sharding
from simdist.spec import Partition, PositiveInt, fail, number_choice
from simdist.spec import Spec as SpecBase
from simdist.strategies.expert_parallel.spec import ZipfRouting, check_divides_experts
from simdist.strategies.pipeline.spec import check_interleaving
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.tensor_parallel.spec import check_splittable

if TYPE_CHECKING:
    from simdist.numerics.memory import Footprint
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario
    from simdist.scenario.workload import WorkloadSpec

Axis = Literal["data", "pipeline", "context", "tensor"]
#: Where the context axis goes when ``placement`` leaves it out: just outside tensor, as
#: Megatron-LM's default order "tp-cp-ep-dp-pp" (innermost first) puts it
#: (megatron/core/parallel_state.py, ``initialize_model_parallel``'s ``order``).
CONTEXT_BEFORE = "tensor"


class MeshSpec(SpecBase):
    """The mesh's sizes: D data copies, P pipeline stages, T devices per tensor group, CP
    devices sharing each sequence (context parallelism)."""

    data: PositiveInt | None = Field(None, examples=["4"])  # None: the devices left
    tensor: PositiveInt = Field(1, examples=["8"])
    pipeline: PositiveInt = Field(1, examples=["2"])
    # None: 1 (left out of the resolved scenario, as a mesh without a context axis).
    context: PositiveInt | None = Field(None, examples=["4"])
    # Expert parallelism: the experts of a MoE gpt over groups of this many devices carved
    # out of data x context (simdist.strategies.hybrid.experts); None: every device holds
    # every expert (left out of the resolved scenario).
    expert: PositiveInt | None = Field(None, examples=["8"])

    @property
    def cp(self) -> int:
        """The context axis' size (1 when left out)."""
        return self.context or 1

    @property
    def ep(self) -> int:
        """The expert axis' size (1 when left out)."""
        return self.expert or 1


class AttentionShape(NamedTuple):
    """What the context ring reads of a transformer: positions per sequence, width, heads
    and key/value heads (the heads without grouped-query attention)."""

    seq_len: int
    hidden: int
    heads: int
    kv_heads: int


def attention_shape(workload: WorkloadSpec) -> AttentionShape | None:
    """The clock model's attention sizes (gpt, GPT-2; the input length when
    ``input_shape`` gives one), or None for a model without attention layers."""
    from simdist.catalog import GPT_DEFAULTS

    if workload.profile is not None:
        return None
    model = workload.clock_model
    if model.name not in ("gpt", "gpt2"):
        return None
    sizes = model.gpt_sizes() or dict(GPT_DEFAULTS)
    seq_len = int(workload.input_shape[0]) if workload.input_shape else sizes["seq_len"]
    heads = sizes["heads"]
    kv_heads = int(getattr(model, "kv_heads", None) or heads)
    return AttentionShape(seq_len, sizes["hidden"], heads, kv_heads)


class Spec(StrategySpecBase):
    """Data × pipeline × tensor parallelism on the device mesh, with ZeRO over data."""

    kind: Literal["hybrid"]
    splits_replica: ClassVar[str] = "hybrid"
    mesh: MeshSpec = Field(default_factory=MeshSpec)
    # The axes from outermost (across hosts) to innermost (inside a host).
    placement: list[Axis] = Field(list(DEFAULT_ORDER), examples=["[data, pipeline, tensor]"])
    zero: Annotated[Literal[0, 1, 2, 3], number_choice(0, 1, 2, 3)] = Field(0, examples=["1"])
    micro_batches: PositiveInt = Field(1, examples=["8"])
    schedule: Literal["gpipe", "1f1b", "interleaved"] = Field("1f1b", examples=["gpipe"])
    # Model chunks per device under schedule: interleaved; None: 1 (left out of the
    # resolved scenario).
    virtual_stages: PositiveInt | None = Field(None, examples=["2"])
    partition: Partition = Field("auto", examples=["auto"])
    sequence_parallel: bool = Field(False, strict=True, examples=["true"])
    all_reduce: Literal["ring", "tree"] = Field("ring", examples=["ring"])
    # Reduce the data axis's gradients bucket by bucket while the last backward runs
    # (Megatron-LM's overlap_grad_reduce, DeepSpeed's overlap_comm); None: after the flush,
    # both frameworks' default (a dumped scenario keeps it so).
    overlap_grad_reduce: bool | None = Field(None, strict=True, examples=["true"])
    cross_host: bool = Field(False, strict=True, examples=["true"])
    #: How tokens choose experts with an expert axis (timing-only: drawn per MoE layer and
    #: micro-batch, as expert_parallel draws them): ``uniform``, or ``{zipf: s}``; None:
    #: uniform (left out of the resolved scenario).
    routing: ZipfRouting | Literal["uniform"] | None = Field(None, examples=["uniform"])
    # The numerics (the mlp) run each stage's tensor group on emulated JAX devices.
    execution: Literal["devices"] = Field("devices", examples=["devices"])

    @property
    def sizes(self) -> dict[str, int]:
        """The mesh's axis sizes (``data`` filled in by :meth:`check`); ``context`` only
        when it holds more than one device, so that a mesh without it is the 3D one."""
        m = self.mesh
        sizes = {"data": m.data or 1, "pipeline": m.pipeline, "tensor": m.tensor}
        if m.cp > 1:
            sizes["context"] = m.cp
        return sizes

    @property
    def order(self) -> list[str]:
        """``placement`` with the context axis where it goes when left out
        (:data:`CONTEXT_BEFORE`)."""
        if "context" in self.placement:
            return list(self.placement)
        k = self.placement.index(CONTEXT_BEFORE) if CONTEXT_BEFORE in self.placement else 0
        return [*self.placement[:k], "context", *self.placement[k:]]

    def replicas(self, cluster: ClusterSpec) -> int:
        """D data-parallel copies, each on its shard of the global batch."""
        m = self.mesh
        return m.data if m.data is not None else _data_left(cluster.n_devices, m)

    def numeric_devices(self, cluster: ClusterSpec) -> int:
        """D × T × P × CP JAX devices: one per device of the mesh."""
        m = self.mesh
        return self.replicas(cluster) * m.tensor * m.pipeline * m.cp

    def sharding(self, cluster: ClusterSpec) -> Sharding:
        """Parameters, gradients and optimizer state split T ways by the tensor group and,
        per ZeRO stage, D ways more over the data axis; activations T ways with sequence
        parallelism (the tensor_parallel spec's reading of Korthikanti et al. 2022).

        One copy of the model state over the devices of one stage: the pipeline's split of
        the layers into stages is per stage, which the strategy checks stage by stage.

        A context axis of CP devices holds the parameters whole (replicated, as data
        copies do) and 1/CP of every activation; its devices reduce their gradients with
        the data copies', so ZeRO shards over D × CP (Megatron-LM's distributed optimizer
        over ``get_data_parallel_group(with_context_parallel=True)``,
        megatron/core/parallel_state.py).
        """
        t, cp = self.mesh.tensor, self.mesh.cp
        d = self.replicas(cluster) * cp
        return Sharding(
            params=t * (d if self.zero == 3 else 1),
            gradients=t * (d if self.zero >= 2 else 1),
            optimizer=t * (d if self.zero >= 1 else 1),
            activations=t if self.sequence_parallel else 1,
            tensor=t,
            context=cp,
        )

    def mesh_of(self, devices: list) -> Mesh:
        """The mesh of ``devices`` (any hashables) in this section's placement."""
        return Mesh.of(devices, self.sizes, self.order)

    def check_memory(
        self, scenario: Scenario, footprint: Footprint, source: str, total_steps: int
    ) -> bool:
        """Each stage against its devices (:func:`.fit.check_hybrid`)."""
        from simdist.strategies.hybrid.fit import check_hybrid

        del total_steps
        check_hybrid(scenario, footprint, source)
        return True

    def check(self, scenario: Scenario) -> None:
        """D × P × T × CP = the cluster's devices, a placement of the axes, tensor groups
        inside a host (unless ``cross_host``), a model T can split, no ZeRO-3 with a
        pipeline, micro-batches dividing the batch, a transformer whose sequence splits
        into 2·CP chunks for a context axis; numerics on the mlp only."""
        super().check(scenario)
        c, w, m = scenario.cluster, scenario.workload, self.mesh
        if m.data is None:
            m.data = _data_left(c.n_devices, m)
        D, T, P, CP = m.data, m.tensor, m.pipeline, m.cp
        if D * T * P * CP != c.n_devices:
            sizes = f"data {D} x tensor {T} x pipeline {P}"
            data, example = max(1, c.n_devices // (T * P * CP)), f"tensor: {T}, pipeline: {P}"
            if CP > 1:
                sizes = f"{sizes} x context {CP}"
                # the context axis that covers the devices, the other axes kept, if one does
                fits = c.n_devices % (D * T * P) == 0
                data = D if fits else data
                example = f"{example}, context: {c.n_devices // (D * T * P) if fits else CP}"
            raise fail(
                "strategy.mesh",
                f"{sizes} = {D * T * P * CP} devices; the cluster has "
                f"{c.n_devices} (hosts holding {c.device_counts}): the mesh must cover them, "
                f"e.g. mesh: {{data: {data}, {example}}}",
            )
        if sorted(self.order) != sorted((*DEFAULT_ORDER, "context")):
            raise fail(
                "strategy.placement",
                f"got {self.placement}; name each of {list(DEFAULT_ORDER)} once (and context, "
                "or leave it out to put it just outside tensor), outermost first, e.g. "
                "placement: [data, pipeline, context, tensor]",
            )
        if self.zero == 3 and P > 1:
            raise fail(
                "strategy.zero",
                f"got 3 with pipeline {P}: ZeRO-3 would gather each stage's parameters for "
                "every micro-batch, and DeepSpeed's pipeline engine refuses it "
                "(deepspeed/runtime/pipe/engine.py); use zero: 1 or 2, or pipeline: 1",
            )
        check_interleaving(
            self.schedule, self.virtual_stages, P, self.micro_batches, "strategy.mesh.pipeline"
        )
        if self.schedule == "interleaved" and self.overlap_grad_reduce:
            raise fail(
                "strategy.overlap_grad_reduce",
                "the gradient buckets that overlap the last backward are cut per stage, and "
                "under schedule interleaved a device's last backwards run through its "
                f"{self.virtual_stages} model chunks: use overlap_grad_reduce: false with "
                "schedule interleaved",
            )
        if not self.cross_host:
            self._check_inside_hosts(c.device_counts)
        if m.ep > 1:
            self._check_experts(scenario)
        elif self.routing is not None:
            raise fail(
                "strategy.routing",
                "routes tokens to experts on an expert axis, and the mesh has none: give "
                "mesh.expert (with a gpt with experts), or leave routing out",
            )
        self._check_model(scenario)
        if CP > 1:
            self._check_context(scenario)
        self._check_batch(scenario)
        if scenario.numerics:
            self._check_numerics(scenario)
        for field, value in (
            ("faults.failures", scenario.faults.failures),
            ("checkpoint", scenario.checkpoint),
            ("input", scenario.input),
        ):
            if value:
                raise fail(field, "is not simulated for strategy: hybrid yet; remove it")
        del w

    def _check_numerics(self, scenario: Scenario) -> None:
        """Real numerics: the zoo's mlp, on its own clock, without sequence parallelism."""
        w = scenario.workload
        if w.model is None or w.model.name != "mlp" or w.clock_model is not w.model:
            raise fail(
                "numerics",
                "hybrid's numerics run the zoo's mlp on its own clock (model: mlp, no "
                "timing_model); run a transformer timing-only with numerics: false, or its "
                "parts alone: strategy tensor_parallel, pipeline or zero",
            )
        if self.sequence_parallel:
            raise fail(
                "strategy.sequence_parallel",
                "hybrid's numerics run without sequence parallelism (the clock models it): "
                "use numerics: false, or strategy tensor_parallel for its numerics",
            )

    def _check_context(self, scenario: Scenario) -> None:
        """A context axis splits a transformer's sequences into 2·CP equal chunks."""
        w, CP = scenario.workload, self.mesh.cp
        shape = attention_shape(w)
        if shape is None:
            clock = "workload.timing_model" if w.timing_model is not None else "workload.model"
            raise fail(
                "strategy.mesh.context",
                f"got {CP}; context parallelism splits a transformer's sequences and runs its "
                f"attention as a ring, and {clock} {w.clock_model.name} has no attention "
                "layers: use a gpt (timing_model: gpt), or context: 1",
            )
        if self.overlap_grad_reduce:
            raise fail(
                "strategy.overlap_grad_reduce",
                f"a context axis ({CP} devices) runs each attention layer's backward as ring "
                "steps, and the gradient buckets that overlap the backward are not cut along "
                "them yet: use overlap_grad_reduce: false with a context axis, or context: 1",
            )
        if shape.seq_len % (2 * CP):
            good = max((n for n in range(1, CP + 1) if shape.seq_len % (2 * n) == 0), default=1)
            raise fail(
                "strategy.mesh.context",
                f"got {CP}; the sequences of {shape.seq_len} positions must split into 2 x "
                f"context = {2 * CP} equal chunks (Megatron-LM's load-balanced causal split: "
                f"device i holds chunks i and {2 * CP - 1} - i), e.g. context: {good}",
            )

    def _check_experts(self, scenario: Scenario) -> None:
        """An expert axis of X: a gpt with experts that X divides, X dividing data x context
        (the ranks it is carved out of), no tensor group, no overlapped reduction."""
        w, m = scenario.workload, self.mesh
        X, D, CP = m.ep, m.data or 1, m.cp
        model = w.clock_model if w.profile is None else None
        experts = int(model.experts or 0) if model is not None and model.name == "gpt" else 0
        clock = "workload.timing_model" if w.timing_model is not None else "workload.model"
        if not experts:
            got = "a gpt without experts" if model is not None and model.name == "gpt" else None
            got = got or (model.name if model is not None else "a profile")
            raise fail(
                "strategy.mesh.expert",
                f"got {X}; the expert axis spreads the experts of a mixture-of-experts gpt and "
                f"{clock} is {got}: give the gpt experts, e.g. {{name: gpt, experts: 8, "
                "top_k: 2}, or leave expert out",
            )
        check_divides_experts(experts, X, "strategy.mesh.expert", "gpt")
        if (D * CP) % X:
            ranks = f"data {D} x context {CP} = {D * CP}" if CP > 1 else f"data {D}"
            fits = max(x for x in range(1, X + 1) if (D * CP) % x == 0 and experts % x == 0)
            raise fail(
                "strategy.mesh.expert",
                f"got {X}; expert-parallel groups are carved out of the data-parallel ranks "
                f"({ranks}), as Megatron-Core carves them (megatron/core/parallel_state.py), "
                f"so the expert axis must divide them, e.g. expert: {fits}",
            )
        if m.tensor > 1:
            raise fail(
                "strategy.mesh.tensor",
                f"got {m.tensor} with expert {X}; the experts' own tensor split (Megatron-Core's "
                "expert_tensor_parallel_size) is not built, and a tensor group would run them "
                "whole on every device: use tensor: 1 with an expert axis",
            )
        if self.overlap_grad_reduce:
            raise fail(
                "strategy.overlap_grad_reduce",
                f"an expert axis ({X} devices) reduces the experts' gradients over their own "
                "groups, which the buckets overlapping the backward are not cut along yet: use "
                "overlap_grad_reduce: false with an expert axis, or leave expert out",
            )

    def expert_sharding(self, cluster: ClusterSpec) -> Sharding:
        """How the experts' model state is split: over the X devices of the expert axis
        (each holds E / X experts), and with ZeRO over the expert-data group too, data x
        context / X devices (Megatron-LM's distributed optimizer shards the experts over
        ``get_expert_data_parallel_group``, megatron/core/parallel_state.py)."""
        cp, ep = self.mesh.cp, self.mesh.ep
        d = self.replicas(cluster) * cp // ep
        return Sharding(
            params=ep * (d if self.zero == 3 else 1),
            gradients=ep * (d if self.zero >= 2 else 1),
            optimizer=ep * (d if self.zero >= 1 else 1),
        )

    def expert_layer_params(self, scenario: Scenario, names: Sequence[str]) -> list[int] | None:
        """Each layer's expert parameters, every MoE layer's (``<block>.moe``) experts, or
        None without an expert axis: what the memory model splits as
        :meth:`expert_sharding` says rather than as :meth:`sharding` does."""
        if self.mesh.ep == 1:
            return None
        from simdist.model_size import gpt_expert_params

        model = scenario.workload.clock_model
        moe = [n.endswith(".moe") for n in names]
        shape = model.gpt_shape()
        total = gpt_expert_params(shape) if shape is not None else 0
        each = total // max(1, sum(moe))
        return [each if is_moe else 0 for is_moe in moe]

    def _check_inside_hosts(self, counts: list[int]) -> None:
        """Each tensor group on one host: its all-reduces come every layer."""
        host_of = [h for h, n in enumerate(counts) for _ in range(n)]
        mesh = self.mesh_of(list(range(len(host_of))))
        for g, group in enumerate(mesh.groups("tensor")):
            hosts = sorted({host_of[i] for i in group})
            if len(hosts) > 1:
                raise fail(
                    "strategy.mesh.tensor",
                    f"got {self.mesh.tensor}; tensor group {g} (devices {list(group)}) would "
                    f"span hosts {hosts} (hosts hold {counts} devices), and its all-reduces "
                    "come every layer: keep it inside a host (tensor innermost in placement, "
                    f"tensor <= {counts[0]}), or allow it with cross_host: true",
                )

    def _check_model(self, scenario: Scenario) -> None:
        w = scenario.workload
        if w.profile is not None:
            raise fail(
                "workload.profile",
                "a profile file does not say which layers are Megatron blocks; hybrid splits "
                "the layers of the mlp or a zoo transformer: use timing_model: gpt2",
            )
        clock = "workload.timing_model" if w.timing_model is not None else "workload.model"
        check_splittable(clock, w.clock_model, self.mesh.tensor, "strategy.mesh.tensor")

    def _check_batch(self, scenario: Scenario) -> None:
        w, M = scenario.workload, self.micro_batches
        given = w.model_fields_set
        batch = (
            w.global_batch_size // self.sizes["data"]
            if "global_batch_size" in given
            else w.batch_size
        )
        if batch % M:
            good = min((d for d in range(1, batch + 1) if batch % d == 0), key=lambda d: abs(d - M))
            raise fail(
                "strategy.micro_batches",
                f"got {M}; each data copy's batch of {batch} examples must split into equal "
                f"micro-batches, e.g. micro_batches: {good}",
            )


def _data_left(devices: int, m: MeshSpec) -> int:
    """D when left out: the devices the tensor, pipeline and context axes leave (at
    least 1)."""
    return max(1, devices // math.prod((m.tensor, m.pipeline, m.cp)))
