"""How an all-reduce strategy groups backward's gradients into collectives: ``strategy.bucketing``.

* ``ddp`` (the default): PyTorch DistributedDataParallel's rule. Gradients fill a bucket in
  the order backward produces them; the bucket is closed at ``bucket_bytes`` (25 MiB) and
  all-reduced as soon as its last gradient is ready (:func:`gradient_buckets`).
* ``horovod``: Horovod's tensor fusion. A background thread wakes every ``cycle_time``,
  takes the gradients that became ready since its last cycle and fuses them into buffers of
  at most ``fusion_threshold`` bytes (:mod:`simdist.strategies.tensor_fusion`).

The strategy decides what moves when; the network prices each collective. This module holds
the scenario fields of both rules (shared by ``mirrored``, ``multi_worker_mirrored`` and
``tpu``) and DDP's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from simdist.spec import fail
from simdist.step_costs import LayerCost
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.steps import Collective, Compute, Issue, Plan, Step, Wait
from simdist.units import format_duration

if TYPE_CHECKING:
    from simdist.scenario.schema import Scenario

# PyTorch DDP's default bucket_cap_mb = 25 (torch.nn.parallel.DistributedDataParallel docs).
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024

# Horovod's defaults since v0.21.0 (2020-11; horovod/horovod CHANGELOG.md, PR #2468;
# horovod/common/operations.cc: SetTensorFusionThresholdBytes(128 * 1024 * 1024),
# SetCycleTimeMs(1)). Before, from v0.11 (2017, the version of Sergeev & Del Balso 2018)
# to v0.20: 64 MiB and 5 ms (operations.cc of v0.12.0: tensor_fusion_threshold =
# 64 * 1024 * 1024, sleep_for(milliseconds(5)) per cycle).
HOROVOD_FUSION_THRESHOLD_BYTES = 128 * 1024 * 1024
HOROVOD_CYCLE_TIME_S = 1e-3
#: The shortest cycle accepted. Horovod's thread sleeps between cycles and negotiates in
#: each (tens of µs at least), so a cycle under 1 µs is never real; and a cycle of 1e-300 s
#: would need 10^297 cycles a step (the tensor fusion's cycle arithmetic never ends).
MIN_CYCLE_TIME_S = 1e-6

Bucketing = Literal["ddp", "horovod"]


def overlap_field() -> Any:
    """``strategy.overlap``: all-reduce gradient buckets during the backward pass (default)."""
    return Field(True, examples=["false"])


def bucket_bytes_field() -> Any:
    """``strategy.bucket_bytes``: the size at which a DDP gradient bucket is closed."""
    return Field(DEFAULT_BUCKET_BYTES, gt=0, examples=["25MiB"])


def bucketing_field() -> Any:
    """``strategy.bucketing``: ``ddp`` (buckets closed at ``bucket_bytes``) or ``horovod``
    (tensor fusion: ``fusion_threshold``, ``cycle_time``)."""
    return Field("ddp", examples=["horovod"])


def fusion_threshold_field() -> Any:
    """``strategy.fusion_threshold``: Horovod's fusion buffer (HOROVOD_FUSION_THRESHOLD);
    ``0`` reduces every tensor on its own. Resolved to Horovod's default when unset."""
    return Field(None, alias="fusion_threshold", examples=["64MiB"])


def cycle_time_field() -> Any:
    """``strategy.cycle_time``: Horovod's background cycle (HOROVOD_CYCLE_TIME)."""
    return Field(None, alias="cycle_time", examples=["5ms"])


class AllReduceSpecBase(StrategySpecBase):
    """Base of the all-reduce strategies' ``Spec``: checks and resolves the bucketing fields.

    The fields themselves are declared by each subclass, after its own, so that the resolved
    scenario keeps its key order. A resolved scenario (``scenario.yaml``) names only the
    fields of the chosen rule, so that it loads back: DDP's ``bucket_bytes`` under ``ddp``
    (and not ``bucketing: ddp``, the default, so the reports of scenarios written before this
    option stay byte for byte the same); ``bucketing: horovod`` and Horovod's two fields,
    resolved, under ``horovod``.
    """

    if TYPE_CHECKING:
        overlap: bool
        bucket_bytes: int
        bucketing: Bucketing
        fusion_threshold_nbytes: int | None
        cycle_time_s: float | None

    @model_serializer(mode="wrap")
    def _resolved(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.bucketing == "ddp":
            data.pop("bucketing", None)
        else:
            data.pop("bucket_bytes", None)
        return data

    def check(self, scenario: Scenario) -> None:
        """The fields of one rule only; Horovod's defaults filled in under ``horovod``.
        ``compression: {method: none}`` is no compression: dropped, so the resolved
        scenario is the one without it."""
        super().check(scenario)
        compression = getattr(self, "compression", None)  # where a subclass declares it
        if compression is not None and not compression.active:
            self.compression = None
        given = self.model_fields_set
        if self.bucketing == "ddp":
            for name in ("fusion_threshold_nbytes", "cycle_time_s"):
                if name in given:
                    key = type(self).model_fields[name].alias
                    raise fail(
                        f"strategy.{key}",
                        "is an option of Horovod's tensor fusion, and bucketing is ddp; "
                        f"add bucketing: horovod, or remove {key} (ddp closes buckets at "
                        "bucket_bytes, e.g. bucket_bytes: 25MiB)",
                    )
            return
        if "bucket_bytes" in given:
            raise fail(
                "strategy.bucket_bytes",
                "is DDP's bucket size, and bucketing is horovod; Horovod fuses tensors up to "
                "fusion_threshold, e.g. fusion_threshold: 64MiB (or use bucketing: ddp)",
            )
        if not self.overlap:
            raise fail(
                "strategy.overlap",
                "got false with bucketing: horovod; Horovod's tensor fusion all-reduces "
                "gradients as backward produces them; use overlap: true or bucketing: ddp",
            )
        if self.fusion_threshold_nbytes is None:
            self.fusion_threshold_nbytes = HOROVOD_FUSION_THRESHOLD_BYTES
        if self.cycle_time_s is None:
            self.cycle_time_s = HOROVOD_CYCLE_TIME_S
        cycle = self.cycle_time_s
        if cycle < MIN_CYCLE_TIME_S:
            shown = format_duration(cycle) if cycle == 0 or cycle >= 1e-9 else f"{cycle:.3g} s"
            raise fail(
                "strategy.cycle_time",
                f"got {shown}; expected at least 1 µs "
                "(Horovod's background cycle, HOROVOD_CYCLE_TIME: its default is 1 ms), "
                "e.g. cycle_time: 5ms",
            )


class Bucket(NamedTuple):
    """Gradients all-reduced together: layers ``[first, stop)`` of the backward order."""

    first: int
    stop: int
    nbytes: int


def gradient_buckets(layers: Sequence[LayerCost], cap_nbytes: int) -> list[Bucket]:
    """Group the layers' gradients, in backward (reverse) order, into buckets of ~``cap_nbytes``.

    As PyTorch DDP (Li et al. 2020, "PyTorch Distributed: Experiences on accelerating data
    parallel training", §3.2.3): gradients join the current bucket in the order backward
    produces them; a bucket is closed when the next gradient would take it past the cap,
    so a gradient larger than the cap gets a bucket of its own. Layers without parameters
    join the bucket in progress.
    """
    buckets: list[Bucket] = []
    first, nbytes = 0, 0
    backward = list(reversed(layers))
    for i, layer in enumerate(backward):
        if nbytes and layer.grad_nbytes and nbytes + layer.grad_nbytes > cap_nbytes:
            buckets.append(Bucket(first, i, nbytes))
            first, nbytes = i, 0
        nbytes += layer.grad_nbytes
    buckets.append(Bucket(first, len(backward), nbytes))
    return buckets


def bucket_plan(buckets: Sequence[Bucket], details: Sequence[str]) -> Plan:
    """An overlapped step as typed steps: the forward, then each bucket's backward, each
    bucket's all-reduce issued as soon as its backward ends (labelled ``details[b]``), and
    the step waits for the last one (the all-reduces run one after another, in order)."""
    collectives = [
        Collective("allreduce", b.nbytes, detail)
        for b, detail in zip(buckets, details, strict=True)
    ]
    program: list[Step] = [Compute(0, "forward")]
    for b in range(len(buckets)):
        program += [Compute(b, "backward"), Issue(b)]
    if buckets:
        program.append(Wait(len(buckets) - 1))
    return Plan(collectives, program)
