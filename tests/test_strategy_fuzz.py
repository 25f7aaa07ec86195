"""The strategy sections under fuzzing: every kind, every option, hostile values.

Hypothesis draws a ``strategy:`` section for every registered kind from the schema itself
(each spec's fields and their types: choices, numbers, unit quantities, lists, nested
sections such as ``compression`` and ``outer_optimizer``), mixing legal values with hostile
ones (``true`` for a number, 0, -1, 1e-300, 1e308, inf, NaN, huge integers, wrong types),
on a small timing-only scenario (an mlp of 4 layers, 2 steps, 1 ms a step) whose cluster
suits the kind or is drawn from a few others. Each draw must end as one of two things: a
:class:`~simdist.errors.SimdistError` of one line (refused at loading, in the checks before
the run, or by the run), or a run that finishes every step. Never a traceback, never a hang:
every draw runs under an alarm of :data:`BOUND_S` seconds. Runs are timing-only (numerics
off: the clock is the same, tests/test_timing_only.py), about 30 ms each once warm, so the
whole fuzz of :data:`EXAMPLES` draws takes well under a minute.
"""

from __future__ import annotations

import math
import signal
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo

from simdist.errors import SimdistError
from simdist.runtime import engine
from simdist.runtime.preflight import preflight
from simdist.scenario import scenario_from_dict
from simdist.strategies import spec_classes

EXAMPLES = 300
#: Seconds one draw may take, loading to the end of its run (they take about 0.03 s).
BOUND_S = 20
STEPS = 2

#: Values each type takes: the legal-looking ones, and hostile ones (the edges and
#: extremes of every type, and values of the wrong type).
LEGAL_INTS = [0, 1, 2, 3, 4, 8]
LEGAL_FLOATS = [0.1, 0.5, 0.9, 1.0, 2.0]
#: Legal quantities by the unit their field parses (simdist.spec's validators).
LEGAL_QUANTITIES = {
    "B": ["0", "1B", "1KiB", "25MiB"],
    "s": ["0", "1us", "5ms", "1s"],
    "B/s": ["1Gbit/s", "10Gbit/s", "1.25GB/s"],
}
HOSTILE = [None, True, False, -1, 7, 16, 10**9, 2**64, 10**400, 0.0, -1.0, 1e-300, 1e308,
           math.inf, -math.inf, math.nan, "", "x", "1e-300s", "1e9s", "-1ms", "1e30B", "inf",
           "1e-300GB/s", "1e999", [], {}, [1, 2], {"a": 1}]  # fmt: skip
#: Chance that a drawn option is hostile rather than legal-looking: low enough that many
#: draws are legal in every option and run, high enough that every option meets each.
HOSTILE_IN = 10

#: A cluster each kind can run on (hosts, devices per host, PS tasks); others are drawn too.
CLUSTERS = {
    "one_device": (1, 1, 0),
    "default": (1, 1, 0),
    "mirrored": (1, 4, 0),
    "multi_worker_mirrored": (2, 2, 0),
    "central_storage": (1, 2, 0),
    "tpu": (1, 4, 0),
    "parameter_server": (2, 1, 1),
    "pipeline": (1, 4, 0),
    "zero": (2, 2, 0),
    "fsdp": (1, 4, 0),
    "tensor_parallel": (1, 4, 0),
    "hybrid": (2, 4, 0),
    "local_sgd": (2, 1, 0),
    "expert_parallel": (1, 4, 0),
}
OTHER_CLUSTERS = [(1, 1, 0), (1, 2, 0), (2, 2, 1), (3, 1, 2), (2, 4, 0), (4, 2, 0)]
SPECS = {kind: spec for spec in spec_classes() for kind in spec.kinds()}


def _unit(validator: BeforeValidator) -> str | None:
    """The unit a field's validator parses (B, s, B/s), or None for a plain number."""
    func = validator.func
    if getattr(func, "__name__", "") == "_whole_bytes":
        return "B"
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or (), strict=True))
    unit = cells.get("unit")
    return unit.cell_contents if unit is not None else None


def _types(annotation: Any) -> list[tuple[Any, str | None]]:
    """(type, the unit it parses or None) of each member of a field's annotation."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *metadata = typing.get_args(annotation)
        units = [_unit(m) for m in metadata if isinstance(m, BeforeValidator)]
        unit = next((u for u in units if u is not None), None)
        return [(t, unit or u) for t, u in _types(base)]
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _types(a)]
    return [(annotation, None)]


def _legal(
    annotation: Any, depth: int = 0, field_unit: str | None = None, hostile: bool = False
) -> st.SearchStrategy[Any]:
    """Values a field of this type could take (and its edges: 0, empty lists).
    ``field_unit``: the unit of the field's own validator (pydantic keeps a field's
    top-level ``Annotated`` metadata apart from its annotation)."""
    options: list[st.SearchStrategy[Any]] = []
    for t, member_unit in _types(annotation):
        unit = member_unit or field_unit
        origin = typing.get_origin(t)
        if t is type(None):
            options.append(st.none())
        elif t is bool:
            options.append(st.booleans())
        elif t in (int, float) and unit in LEGAL_QUANTITIES:
            options.append(st.sampled_from(LEGAL_QUANTITIES[unit]))
        elif t is int:
            options.append(st.sampled_from(LEGAL_INTS))
        elif t is float:
            options.append(st.sampled_from(LEGAL_FLOATS))
        elif origin is Literal:
            options.append(st.sampled_from(typing.get_args(t)))
        elif origin is list:
            (inner,) = typing.get_args(t)
            options.append(st.lists(_legal(inner, depth + 1, None, hostile), max_size=4))
        elif isinstance(t, type) and issubclass(t, BaseModel) and depth < 2:
            options.append(_section(t, depth + 1, hostile))  # its options drawn alike
    return st.one_of(*options) if options else st.sampled_from(HOSTILE)


def _values(info: FieldInfo, depth: int, hostile: bool) -> st.SearchStrategy[Any]:
    """Legal-looking values of a field, and (``hostile``) now and then a hostile one."""
    units = [_unit(m) for m in info.metadata if isinstance(m, BeforeValidator)]
    unit = next((u for u in units if u is not None), None)
    legal = _legal(info.annotation, depth, unit, hostile)
    if not hostile:
        return legal
    return st.one_of(*[legal] * (HOSTILE_IN - 1), st.sampled_from(HOSTILE))


def _section(
    model: type[BaseModel], depth: int = 0, hostile: bool = False
) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping of some of ``model``'s YAML keys."""
    optional = {
        info.alias or name: _values(info, depth, hostile)
        for name, info in model.model_fields.items()
        if name != "kind" and not info.exclude
    }
    return st.fixed_dictionaries({}, optional=optional)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(SPECS)))
    hostile = draw(st.booleans())  # half the draws take legal-looking values only
    strategy = {"kind": kind, **draw(_section(SPECS[kind], hostile=hostile))}
    if draw(st.sampled_from([False] * 19 + [True])):
        strategy["unknown_option"] = 1  # a typo'd key
    good = CLUSTERS[kind]
    hosts, devices, ps = draw(st.sampled_from([good] * 4 + OTHER_CLUSTERS))
    return {
        "name": "fuzz",
        "numerics": False,
        "cluster": {
            "hosts": hosts,
            "devices_per_host": devices,
            "ps": ps,
            "device": {"profile": "v100", "compute_time": "1ms", "variability": 0},
        },
        "workload": {
            "model": {"name": "mlp", "hidden": [16, 16, 16]},
            "input_shape": [8],
            "batch_size": 8,
            "optimizer": {"name": "adam", "learning_rate": 0.01},
            "steps": STEPS,
        },
        "strategy": strategy,
    }


class Hung(Exception):
    """A draw ran past :data:`BOUND_S`."""


@contextmanager
def bounded(seconds: int) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise Hung(f"past {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


OUTCOMES: dict[str, int] = {"refused": 0, "ran": 0}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_a_strategy_section_is_refused_in_one_line_or_runs_to_its_end(data):
    with bounded(BOUND_S):
        try:
            scenario = scenario_from_dict(data, "<fuzz>")
            preflight(scenario, source="<fuzz>")
            result = engine.run(scenario)
        except SimdistError as error:
            text = str(error)
            assert text and "\n" not in text and len(text) < 2000, text
            OUTCOMES["refused"] += 1
            return
    assert result.summary["steps"] == STEPS
    assert (
        math.isfinite(result.summary["simulated_time_s"]) and result.summary["simulated_time_s"] > 0
    )
    OUTCOMES["ran"] += 1


def test_the_fuzz_both_refuses_and_runs():
    """Run after the fuzz (file order): it reached both outcomes, not only refusals."""
    if sum(OUTCOMES.values()) < EXAMPLES:
        pytest.skip("the fuzz did not run first in this process")
    assert OUTCOMES["refused"] > 0 and OUTCOMES["ran"] > EXAMPLES // 20, OUTCOMES
