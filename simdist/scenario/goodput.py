"""The ``goodput:`` section: weeks of training at the level of failures, checkpoints and
restarts (``simdist goodput``, :mod:`simdist.goodput`).

Its ``checkpoint:`` has the fields of the scenario's own ``checkpoint:`` section (and takes
that section when left out), plus how a checkpoint is written; the rest is what only the long
horizon needs: how long, how often things fail, what a restart costs, and the job's full
size when the scenario itself is a slice of it (so that ``simdist run`` stays cheap). It is
its own section, not the run's ``checkpoint:``, because the long horizon needs it for every
strategy, including those whose steps do not simulate checkpoints (hybrid).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from simdist.scenario.effects import CheckpointSpec
from simdist.scenario.fields import shorthand
from simdist.spec import Bandwidth, Float, Latency, PositiveDuration, PositiveInt, Spec, fail, show
from simdist.units import UnitError, parse_duration

__all__ = [
    "MAX_GOODPUT_SEEDS",
    "MAX_HORIZON_S",
    "RATE_PRESETS",
    "ElasticSpec",
    "GoodputCheckpointSpec",
    "GoodputSpec",
    "RatesSpec",
]

#: The longest horizon: ten years of wall clock. Past it the figure is a typo (10^9 days is
#: older than the Earth), refused as the scenario loads.
MAX_HORIZON_S = 3650 * 86400.0
#: Seeds of one goodput study: each is a whole horizon.
MAX_GOODPUT_SEEDS = 1000
#: The rate presets of :mod:`simdist.goodput.rates` (named here so loading needs no NumPy).
RATE_PRESETS = ("llama3_405b", "rsc1_nodes", "rsc2_nodes")


def _horizon(value: object) -> float:
    try:
        seconds = parse_duration(value)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    except OverflowError:
        raise ValueError(f"got {show(value)}; too large to be a number") from None
    if not 0 < seconds <= MAX_HORIZON_S:
        raise ValueError(
            f"got {show(value)}; expected a wall-clock horizon above 0 and up to "
            f"{MAX_HORIZON_S / 86400:.0f} days (10 years), e.g. horizon: 54 days"
        )
    return seconds


Horizon = Annotated[float, BeforeValidator(_horizon)]


class RatesSpec(Spec):
    """Failure rates per component per day (``gpu: 1.5e-4`` is one failure in 6,700
    GPU-days), or a ``preset`` of :mod:`simdist.goodput.rates` (``rates: llama3_405b`` is
    short for ``rates: {preset: llama3_405b}``). ``planned`` is per job per day: maintenance
    that stops the job after a checkpoint."""

    preset: Literal[RATE_PRESETS] | None = Field(None, examples=["llama3_405b"])  # type: ignore[valid-type]
    gpu: Float = Field(0.0, ge=0, examples=["1.5e-4"])
    host: Float = Field(0.0, ge=0, examples=["1.0e-3"])
    switch: Float = Field(0.0, ge=0, examples=["6.0e-4"])
    planned: Float = Field(0.0, ge=0, examples=["0.87"])

    @model_validator(mode="after")
    def _preset_or_rates(self) -> RatesSpec:
        if self.preset is not None and self.model_fields_set - {"preset"}:
            raise fail(
                "preset",
                "give a preset or rates per component, not both, e.g. rates: llama3_405b",
            )
        if self.preset is None and not (self.gpu or self.host or self.switch or self.planned):
            raise fail(
                "gpu",
                "every rate is 0, so nothing would ever fail; give one above 0, e.g. "
                "rates: {gpu: 1.5e-4}, or a preset, e.g. rates: llama3_405b",
            )
        return self


class ElasticSpec(Spec):
    """Elastic recovery (TorchElastic, Megatron's in-process restart): a GPU or host lost
    takes its data-parallel copies out; the others go on after ``reconfigure``; the copies
    come back ``rejoin_after`` later (a spare host brought in)."""

    reconfigure_s: Latency = Field(60.0, alias="reconfigure", examples=["1 min"])
    rejoin_after_s: PositiveDuration = Field(4 * 3600.0, alias="rejoin_after", examples=["4 h"])
    min_replicas: PositiveInt = Field(1, examples=["64"])


class GoodputCheckpointSpec(CheckpointSpec):
    """The scenario's ``checkpoint:`` fields (every K steps or T seconds, storage bandwidth
    per device), and how a checkpoint is written: ``sync``, or ``async`` (a copy to host
    memory at ``host_copy_bandwidth``, then the write in the background); a restart reads
    it back at ``read_bandwidth`` (the storage bandwidth unless given)."""

    storage_bandwidth_Bps: Bandwidth | None = Field(
        None, alias="storage_bandwidth", examples=["2GB/s"]
    )
    mode: Literal["sync", "async"] = Field("sync", examples=["async"])
    host_copy_bandwidth_Bps: Bandwidth = Field(
        25e9, alias="host_copy_bandwidth", examples=["25GB/s"]
    )
    read_bandwidth_Bps: Bandwidth | None = Field(None, alias="read_bandwidth", examples=["4GB/s"])


class GoodputSpec(Spec):
    """Days to months of training: failures from rates, checkpoints from bytes, restarts."""

    horizon_s: Horizon = Field(alias="horizon", examples=["54 days"])
    seeds: PositiveInt = Field(20, le=MAX_GOODPUT_SEEDS, examples=["20"])
    job: dict[str, Any] = Field(
        default_factory=dict, examples=["{cluster.hosts: 2048, strategy.mesh.data: 128}"]
    )
    step_time_s: PositiveDuration | None = Field(None, alias="step_time", examples=["6 s"])
    measure_steps: PositiveInt = Field(3, le=100, examples=["3"])
    rates: Annotated[RatesSpec, BeforeValidator(shorthand("preset"))] = Field(
        default_factory=lambda: RatesSpec(preset="llama3_405b"), examples=["llama3_405b"]
    )
    distribution: Literal["exponential", "weibull"] = Field("exponential", examples=["weibull"])
    weibull_shape: Float = Field(0.78, gt=0, le=10, examples=["0.78"])
    hosts_per_switch: PositiveInt = Field(2, examples=["2"])
    checkpoint: GoodputCheckpointSpec | None = Field(
        None, examples=["{every_steps: 100, storage_bandwidth: 2GB/s}"]
    )
    restart_s: Latency = Field(alias="restart", examples=["10 min"])
    recovery: Literal["restart", "elastic"] = Field("restart", examples=["elastic"])
    elastic: ElasticSpec = Field(default_factory=ElasticSpec)
    intervals: list[PositiveInt] | None = Field(None, min_length=2, examples=["[50, 100, 200]"])
    cluster_sizes: list[PositiveInt] = Field(
        default_factory=lambda: [1024, 4096, 16384, 65536, 131072],
        min_length=1,
        examples=["[1024, 16384, 131072]"],
    )
