"""The scenario's ``strategy:`` section for ``kind: pipeline`` and its cross-checks.

Light on purpose: scenario loading reads it without SimPy, JAX or pandas
(:mod:`.strategy` holds the strategy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from simdist.spec import Partition, PositiveInt, fail
from simdist.strategies.spec_base import StrategySpecBase

if TYPE_CHECKING:
    from simdist.numerics.memory import Footprint
    from simdist.scenario.cluster import ClusterSpec
    from simdist.scenario.schema import Scenario


class Spec(StrategySpecBase):
    """Pipeline (and model) parallelism: S stages × R data-parallel pipeline copies."""

    kind: Literal["pipeline"]
    splits_replica: ClassVar[str] = "pipeline"
    stages: PositiveInt = Field(1, examples=["4"])
    micro_batches: PositiveInt = Field(1, examples=["8"])
    schedule: Literal["gpipe", "1f1b", "pipedream", "interleaved"] = Field(
        "gpipe", examples=["1f1b"]
    )
    # Model chunks per device under schedule: interleaved; None: 1 (left out of the
    # resolved scenario, as every other schedule has one).
    virtual_stages: PositiveInt | None = Field(None, examples=["2"])
    partition: Partition = Field("auto", examples=["auto"])
    pipeline_replicas: PositiveInt = Field(1, alias="replicas", examples=["2"])
    rematerialization: bool = Field(False, strict=True, examples=["true"])
    all_reduce: Literal["ring", "tree"] = Field("ring", examples=["ring"])

    def replicas(self, cluster: ClusterSpec) -> int:
        """R data-parallel copies of the pipeline (each on S devices)."""
        del cluster
        return self.pipeline_replicas

    def check_memory(
        self, scenario: Scenario, footprint: Footprint, source: str, total_steps: int
    ) -> bool:
        """Each stage against its devices (:func:`.fit.check_pipeline`)."""
        from simdist.strategies.pipeline.fit import check_pipeline

        check_pipeline(scenario, footprint, source, total_steps)
        return True

    def check(self, scenario: Scenario) -> None:
        """Enough devices for S×R; a partition list of S counts; M dividing the batch;
        no failures, checkpoints or input pipeline (not modelled for pipelines yet)."""
        super().check(scenario)
        c, w = scenario.cluster, scenario.workload
        S, R, M = self.stages, self.pipeline_replicas, self.micro_batches
        devices = c.n_devices
        if S * R > devices:
            held = (
                f"{c.hosts} hosts x {c.devices_per_host}"
                if c.uniform_devices
                else f"hosts holding {c.device_counts}"
            )
            raise fail(
                "strategy.stages",
                f"{S} stages x {R} replicas need {S * R} devices; the cluster has {devices} "
                f"({held}), e.g. devices_per_host: {S * R}",
            )
        check_interleaving(self.schedule, self.virtual_stages, S, M, "strategy.stages")
        if isinstance(self.partition, list) and len(self.partition) != S * (
            self.virtual_stages or 1
        ):
            per = (
                f"{S} stages x {self.virtual_stages} model chunks; give one per chunk"
                if self.virtual_stages
                else f"{S} stages; give one per stage"
            )
            raise fail(
                "strategy.partition",
                f"got {len(self.partition)} layer counts for {per}, e.g. partition: auto",
            )
        if self.schedule == "pipedream" and R != 1:
            raise fail(
                "strategy.replicas",
                f"got {R}; schedule pipedream runs one pipeline copy here (replicas: 1)",
            )
        given = w.model_fields_set
        batch = w.global_batch_size // R if "global_batch_size" in given else w.batch_size
        if batch % M:
            raise fail(
                "strategy.micro_batches",
                f"got {M}; each pipeline's batch of {batch} examples must split into equal "
                f"micro-batches, e.g. micro_batches: {_divisor_near(batch, M)}",
            )
        for field, value in (
            ("faults.failures", scenario.faults.failures),
            ("checkpoint", scenario.checkpoint),
            ("input", scenario.input),
        ):
            if value:
                raise fail(field, "is not simulated for strategy: pipeline yet; remove it")
        if scenario.numerics and w.surrogate:
            raise fail(
                "workload.timing_model",
                "pipeline stages are cut from the trained model's own layers; a surrogate "
                "clock cannot be cut the same way: run it timing-only with numerics: false",
            )


def check_interleaving(
    schedule: str, virtual_stages: int | None, stages: int, micro_batches: int, stages_field: str
) -> None:
    """``virtual_stages`` only with ``schedule: interleaved``, which needs at least 2 of
    them and micro-batches in multiples of the stages (Megatron-LM's interleaved schedule
    numbers them in groups of S: ``get_schedule_table``,
    megatron/core/pipeline_parallel/schedules.py). ``stages_field`` names the stages."""
    v = virtual_stages
    if schedule != "interleaved":
        if v is not None and v != 1:
            raise fail(
                "strategy.virtual_stages",
                f"got {v}; model chunks per device are the interleaved schedule's, and "
                f"schedule is {schedule}: use schedule: interleaved, or leave virtual_stages out",
            )
        return
    if v is None or v < 2:
        raise fail(
            "strategy.virtual_stages",
            f"got {v or 1}; schedule interleaved gives each device at least 2 model chunks, "
            "e.g. virtual_stages: 2",
        )
    if micro_batches % stages:
        good = max(stages, micro_batches // stages * stages)
        raise fail(
            "strategy.micro_batches",
            f"got {micro_batches}; schedule interleaved runs micro-batches in groups of the "
            f"{stages} stages ({stages_field}), as Megatron-LM does: use a multiple of "
            f"{stages}, e.g. micro_batches: {good}",
        )


def _divisor_near(n: int, m: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - m), d))
