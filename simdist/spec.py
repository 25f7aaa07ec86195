"""The strict base of every scenario section, its unit-typed fields, and its error helper.

Both the scenario schema (:mod:`simdist.scenario`) and each strategy module (its ``Spec``)
build their sections from these pieces, so this module imports neither: only pydantic,
yaml, :mod:`simdist.units` and :mod:`simdist.errors`.

YAML keys are the user-facing names (``bandwidth: 10Gbit/s``); attributes carry SI units in
their names (``bandwidth_Bps == 1.25e9``). The unit types below parse once, at load time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Literal

import yaml
from pydantic import AllowInfNan, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

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
