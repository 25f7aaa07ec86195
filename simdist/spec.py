"""The strict base of every scenario section, its unit-typed fields, and its error helper.

Both the scenario schema (:mod:`simdist.scenario`) and each strategy module (its ``Spec``)
build their sections from these pieces, so this module imports neither: only pydantic,
yaml, :mod:`simdist.units` and :mod:`simdist.errors`.

YAML keys are the user-facing names (``bandwidth: 10Gbit/s``); attributes carry SI units in
their names (``bandwidth_Bps == 1.25e9``). The unit types below parse once, at load time.
"""

from __future__ import annotations

import math
import typing
from abc import abstractmethod
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import AllowInfNan, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from simdist.sharding import Sharding
from simdist.units import UnitError, parse_bandwidth, parse_duration, parse_flops, parse_size

__all__ = [
    "Bandwidth",
    "Bytes",
    "Float",
    "Flops",
    "Int",
    "Latency",
    "Partition",
    "PositiveDuration",
    "PositiveInt",
    "Spec",
    "StrategySpecBase",
    "fail",
    "number_choice",
    "show",
]


def fail(field: str, message: str) -> PydanticCustomError:
    """An error for ``field`` (relative to the model raising it) with a ready-made message.

    The scenario's error translation prints ``message`` as is, after the field's dotted
    path; raise it from a validator or a strategy's :meth:`StrategySpecBase.check`.
    """
    return PydanticCustomError("scenario", "{message}", {"field": field, "message": message})


#: Longest rendering of a value in a message; a longer one is cut with "…".
SHOW_CHARS = 80


def show(value: object) -> str:
    """A value as the user wrote it: strings quoted, mappings and lists in YAML flow style.

    Cut to :data:`SHOW_CHARS` characters, so a megabyte of pasted text or a huge number
    does not flood the one-line error message it appears in.
    """
    if isinstance(value, str):
        text = repr(value[: SHOW_CHARS + 1])
    elif isinstance(value, dict | list):
        try:
            text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
        except (yaml.YAMLError, RecursionError, ValueError, TypeError):
            text = f"a {type(value).__name__}"
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int) and abs(value) >= 10**15:
        # The digits of a 400-digit number help nobody (and past 4300 str() refuses).
        text = f"{'-' if value < 0 else ''}about 10^{math.floor(math.log10(abs(value)))}"
    else:
        text = str(value)
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 1] + "…"


# ---------------------------------------------------------------- field types


def _no_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"got {show(value)}; expected a number")
    return value


def _unit(
    parse: Callable[[object], float],
    positive: bool,
    low: float = 0.0,
    high: float = math.inf,
    unit: str = "",
) -> Callable[[object], float]:
    """A validator: ``value`` parsed with its unit, > 0 if ``positive``, and (when not 0)
    within [``low``, ``high``] in base units — bounds far beyond any real cluster, which
    keep the clock and the reports finite (a bandwidth of 1e-300 B/s made trace.json
    non-finite; a latency of 1e300 s a run of 1e292 hours)."""

    def validate(value: object) -> float:
        try:
            number = parse(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        except OverflowError:
            raise ValueError(f"got {show(value)}; too large to be a number") from None
        if positive and number == 0:
            raise ValueError(f"got {show(value)}; expected a value greater than 0")
        if number and not low <= number <= high:
            raise ValueError(f"got {show(value)}; expected {low:g} to {high:g} {unit}".rstrip())
        return number

    return validate


def number_choice(*choices: int) -> BeforeValidator:
    """A validator for a ``Literal`` of whole numbers (ZeRO's stage) that refuses YAML's
    ``true`` and ``false``: in Python ``True == 1``, so the Literal alone takes them."""

    def validate(value: object) -> object:
        if isinstance(value, bool):
            listed = ", ".join(str(c) for c in choices)
            raise ValueError(f"got {show(value)}; expected one of {listed} (a number)")
        return value

    return BeforeValidator(validate)


def _partition(value: object) -> object:
    """``auto`` or a list of whole layer counts >= 1 (their number is checked against the
    stages later); one message for every other value, rather than one per union member."""
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
    ):
        return value
    raise ValueError(
        f"got {show(value)}; expected auto or a list of whole layer counts >= 1, one per "
        "stage, e.g. partition: [3, 2]"
    )


def _whole_bytes(value: object) -> int:
    return round(_unit(parse_size, positive=False)(value))


# 1 byte/s to 1 EB/s; durations up to 1e9 s (32 years); up to 1e21 FLOP/s (1 ZFLOP/s).
Bandwidth = Annotated[
    float, BeforeValidator(_unit(parse_bandwidth, positive=True, low=1.0, high=1e18, unit="B/s"))
]
Latency = Annotated[
    float, BeforeValidator(_unit(parse_duration, positive=False, high=1e9, unit="s"))
]
PositiveDuration = Annotated[
    float, BeforeValidator(_unit(parse_duration, positive=True, high=1e9, unit="s"))
]
Flops = Annotated[
    float, BeforeValidator(_unit(parse_flops, positive=True, high=1e21, unit="FLOP/s"))
]
Bytes = Annotated[int, BeforeValidator(_whole_bytes)]
# No inf or NaN: a learning rate of .inf is a typo, never a setting.
Float = Annotated[float, BeforeValidator(_no_bool), AllowInfNan(False)]
Int = Annotated[int, Field(strict=True)]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]
#: A pipeline's split of the layers over its stages: ``auto`` or one count per stage.
Partition = Annotated[Literal["auto"] | list[PositiveInt], BeforeValidator(_partition)]


# ---------------------------------------------------------------- base classes


class Spec(BaseModel):
    """Base of every scenario section: unknown keys are errors; YAML keys or attribute names.

    A field may carry ``Field(examples=[value])``: a wrong value of it is then reported
    with ``e.g. key: value``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StrategySpecBase(Spec):
    """Base of each strategy module's ``Spec``: the ``strategy:`` section of one kind.

    A subclass narrows ``kind`` to a ``Literal`` of the names it answers to (the scenario's
    union is discriminated on it), adds its options as fields, says how many replicas it
    runs and checks itself against the rest of the scenario.
    """

    kind: str
    #: Activation recomputation (Korthikanti et al. 2022, Sec. 5): ``selective`` recomputes
    #: the attention core, ``full`` keeps the input of every ``recompute_layers`` blocks
    #: (Megatron's ``--recompute-granularity`` and ``--recompute-num-layers``) and computes
    #: their forward again in the backward pass.
    recompute: Literal["none", "selective", "full"] = Field("none", examples=["full"])
    recompute_layers: PositiveInt = Field(1, examples=["1"])
    #: The precision gradients are reduced in under mixed precision (fp16 / bf16): the
    #: training precision by default, as Megatron and DeepSpeed do; ``fp32`` as Megatron's
    #: ``--accumulate-allreduce-grads-in-fp32``.
    grad_reduce: Literal["precision", "fp32"] = Field("precision", examples=["fp32"])

    # Whether a TF_CONFIG ``chief`` task trains like a worker (it does in every synchronous
    # strategy; in parameter_server it only coordinates, as TF's ClusterCoordinator).
    chief_trains: ClassVar[bool] = True
    # The network this strategy brings along (tpu: its "torus"), or "switch": it runs on
    # whatever the cluster is wired as. Its class's ``topology``, read from the scenario's
    # section without importing the class (whose module may import SimPy).
    wiring: ClassVar[str] = "switch"
    # Whether the devices hold the optimizer state and run the optimizer step (not when
    # parameter servers or the host CPU of central storage do): read by the memory model.
    optimizer_on_device: ClassVar[bool] = True
    # How memory advice names this strategy when it splits a replica over devices (e.g.
    # "zero (stage 1, 2 or 3)"); empty for a strategy that keeps whole replicas.
    splits_replica: ClassVar[str] = ""
    # Whether ``simdist tradeoff`` starts from a scenario of this kind: its options then
    # express the study's synchronous and asynchronous variants (``strategy.mode``,
    # ``backup_workers``, ``staleness_bound``: simdist.tradeoff_variants.strategy_overrides).
    tradeoff_base: ClassVar[bool] = False

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        """The ``kind`` names this spec answers to, e.g. ``("one_device", "default")``."""
        return typing.get_args(cls.model_fields["kind"].annotation)

    @abstractmethod
    def replicas(self, cluster: Any) -> int:
        """Model replicas computing a gradient in one step, on this ``ClusterSpec``."""

    def workers(self, cluster: Any) -> int:
        """Worker tasks that ``worker N`` faults may target: every training host."""
        return cluster.hosts

    def numeric_devices(self, cluster: Any) -> int:
        """JAX devices the numerics run on with ``execution: devices``: one per replica (a
        strategy that splits a replica over devices, tensor_parallel, needs more)."""
        return self.replicas(cluster)

    def sharding(self, cluster: Any) -> Sharding:
        """How one replica's model state is split over devices (default: replicated)."""
        return Sharding()

    def extra_state_copies(self) -> int:
        """Float32 copies of the parameters each device keeps besides its model state and
        the workload optimizer's (local_sgd's anchor and outer momentum); counted with the
        optimizer state by the memory model. None by default."""
        return 0

    def check_memory(self, scenario: Any, footprint: Any, source: str, total_steps: int) -> bool:
        """A strategy's own memory check before the run, for one that places its devices
        otherwise than as replicas split as :meth:`sharding` says (pipeline stages): refuse
        a layout that does not fit and return True. False by default: the replica check of
        :func:`simdist.device_memory.check_device_memory` applies."""
        del scenario, footprint, source, total_steps
        return False

    def off_device_memory(self, scenario: Any, costs: Any, cluster: Any) -> dict[str, dict]:
        """summary.json's ``memory_off_device``: what holds the optimizer state off the
        training devices (parameter servers, a host CPU), by holder. None by default."""
        del scenario, costs, cluster
        return {}

    def check(self, scenario: Any) -> None:
        """Cross-check this strategy against the rest of a ``Scenario``; raise :func:`fail`.

        Called once the cluster's host names are resolved and before the batch is split
        over the replicas; it may fill in values this strategy decides (the tpu sets
        ``devices_per_host``). The default: no parameter-server tasks, which only
        parameter_server uses. Subclasses extend it with ``super().check(scenario)``.
        """
        c = scenario.cluster
        if c.ps > 0:
            raise fail(
                "cluster.ps",
                f"got {c.ps}; parameter-server tasks are only used by strategy: "
                f"parameter_server (strategy here is {self.kind}); remove ps or use ps: 0",
            )

    def check_one_host(self, scenario: Any) -> None:
        """For strategies whose replicas are the devices of one host: ``hosts: 1``."""
        hosts = scenario.cluster.hosts
        if hosts != 1:
            raise fail(
                "cluster.hosts",
                f"got {hosts}; strategy {self.kind} runs on one host (hosts: 1); "
                "for several hosts use strategy: multi_worker_mirrored",
            )
