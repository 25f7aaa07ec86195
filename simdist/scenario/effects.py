"""What the system does to a run besides compute and network: the ``faults:`` section
(stragglers, failures), ``checkpoint:`` and ``input:``."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from simdist.scenario.fields import shorthand
from simdist.spec import Bandwidth, Float, Int, Latency, PositiveDuration, Spec, fail, show

__all__ = [
    "CheckpointSpec",
    "FailureSpec",
    "FaultsSpec",
    "InputSpec",
    "SlowdownKind",
    "SlowdownSpec",
    "StragglerSpec",
]

SlowdownKind = Literal["constant", "lognormal", "pareto"]
_TARGET_RE = re.compile(r"(?P<role>worker|ps|device)\s*(?P<index>\d+)")


class SlowdownSpec(Spec):
    """How much slower a straggling step is: a factor >= 1, fixed or drawn per step."""

    kind: SlowdownKind = "constant"
    factor: Float = Field(2.0, ge=1)  # constant
    mu: Float = 0.0  # lognormal: factor = max(1, exp(mu + sigma * N(0, 1)))
    sigma: Float = Field(0.5, ge=0)
    alpha: Float = Field(1.5, gt=0)  # pareto: factor = 1 + Lomax(alpha), heavy-tailed


def _slowdown(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"kind": "constant", "factor": value}
    return shorthand("kind")(value)


class StragglerSpec(Spec):
    """Slow compute: on one worker's devices, one device, or every device.

    ``probability`` 1 (the default) makes a persistent straggler; below 1 each
    step of each targeted device is slowed with that probability.
    """

    worker: Int | None = Field(None, ge=0)
    device: Int | None = Field(None, ge=0)
    slowdown: Annotated[SlowdownSpec, BeforeValidator(_slowdown)]
    probability: Float = Field(1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _one_target(self) -> StragglerSpec:
        if self.worker is not None and self.device is not None:
            raise fail("device", "give worker or device, not both, e.g. worker: 3")
        return self


class FailureSpec(Spec):
    """A task that fails at a time, or at a seeded rate, and restarts after a delay."""

    target: str
    at_s: PositiveDuration | None = Field(None, alias="at")
    mtbf_s: PositiveDuration | None = Field(None, alias="mtbf")
    restart_after_s: Latency | None = Field(None, alias="restart_after")
    restart_at_s: PositiveDuration | None = Field(None, alias="restart_at", exclude=True)

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        match = _TARGET_RE.fullmatch(value.strip())
        if not match:
            raise ValueError(
                f"got {show(value)}; expected 'worker N', 'ps N' or 'device N', "
                "e.g. target: worker 1"
            )
        return f"{match['role']} {int(match['index'])}"

    @model_validator(mode="after")
    def _when(self) -> FailureSpec:
        if (self.at_s is None) == (self.mtbf_s is None):
            raise fail("at", "give exactly one of at (a time) or mtbf (a rate), e.g. at: 50ms")
        if (self.restart_after_s is None) == (self.restart_at_s is None):
            raise fail(
                "restart_after",
                "give exactly one of restart_after or restart_at, e.g. restart_after: 20ms",
            )
        if self.restart_at_s is not None:
            if self.at_s is None:
                raise fail("restart_at", "restart_at needs at; with mtbf use restart_after")
            if self.restart_at_s <= self.at_s:
                raise fail(
                    "restart_at",
                    f"got {self.restart_at_s:g} s, not after the failure at {self.at_s:g} s; "
                    "a task restarts after it fails, e.g. restart_after: 20ms",
                )
            self.restart_after_s = self.restart_at_s - self.at_s
        return self

    @property
    def role(self) -> str:
        """``worker``, ``ps`` or ``device``."""
        return self.target.split()[0]

    @property
    def index(self) -> int:
        """The task's (or device's) index."""
        return int(self.target.split()[1])

    @property
    def restart_s(self) -> float:
        """Seconds from the failure to the restart."""
        assert self.restart_after_s is not None
        return self.restart_after_s


class FaultsSpec(Spec):
    """What goes wrong: stragglers and failures."""

    stragglers: list[StragglerSpec] = Field(default_factory=list)
    failures: list[FailureSpec] = Field(default_factory=list)


class CheckpointSpec(Spec):
    """The chief writes parameters + optimizer state every K steps or T seconds."""

    every_steps: Int | None = Field(None, ge=1)
    every_s: PositiveDuration | None = None
    storage_bandwidth_Bps: Bandwidth | None = Field(None, alias="storage_bandwidth")

    @model_validator(mode="after")
    def _complete(self) -> CheckpointSpec:
        if (self.every_steps is None) == (self.every_s is None):
            raise fail(
                "every_steps", "give exactly one of every_steps or every_s, e.g. every_steps: 100"
            )
        if self.storage_bandwidth_Bps is None:
            raise fail(
                "storage_bandwidth",
                "missing; a checkpoint's cost is bytes / storage bandwidth, "
                "e.g. storage_bandwidth: 1GB/s",
            )
        return self


class InputSpec(Spec):
    """Per-batch loading cost and prefetch depth (the tf.data prefetch picture)."""

    per_example_s: Latency | None = Field(None, alias="per_example")
    bandwidth_Bps: Bandwidth | None = Field(None, alias="bandwidth")
    prefetch: Int = Field(1, ge=0)

    @model_validator(mode="after")
    def _one_cost(self) -> InputSpec:
        if (self.per_example_s is None) == (self.bandwidth_Bps is None):
            raise fail(
                "per_example",
                "give exactly one of per_example (seconds per example) or bandwidth "
                "(bytes of examples per second), e.g. per_example: 20us",
            )
        return self
