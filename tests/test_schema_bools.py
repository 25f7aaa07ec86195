"""A YAML ``true`` is never a number: every numeric field of the schema, walked from it.

YAML reads ``stage: yes`` or ``zero: true`` as a bool, and Python's ``True == 1`` let such a
value pass as the number 1 in fields that did not refuse it. This test finds every field
of every section model reachable from :class:`~simdist.scenario.schema.Scenario` (each
strategy's spec included) whose type holds a number (an int, a float, a unit quantity, a
``Literal`` of numbers, or a list of them), puts ``true`` there in a scenario that is
otherwise valid field by field, and expects one clear error naming that field. A section
model added later without an anchor below fails :func:`test_every_section_has_an_anchor`,
so the walk never silently skips it.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Annotated, Any, Literal

import pytest
from helpers import TINY
from pydantic import BaseModel

from simdist.errors import ScenarioError
from simdist.scenario import scenario_from_dict
from simdist.scenario.schema import Scenario


def _args(annotation: Any) -> list[Any]:
    """The types a field's annotation is made of (Annotated, Optional and unions opened)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _args(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _args(a)]
    return [annotation]


def _is_number(annotation: Any) -> bool:
    for t in _args(annotation):
        if t in (int, float):
            return True
        if typing.get_origin(t) is Literal and any(
            isinstance(v, int | float) and not isinstance(v, bool) for v in typing.get_args(t)
        ):
            return True
    return False


def _number_kind(annotation: Any) -> str | None:
    """``"scalar"`` or ``"list"`` for a field that takes numbers, else None."""
    if _is_number(annotation):
        return "scalar"
    for t in _args(annotation):
        if typing.get_origin(t) is list and _is_number(typing.get_args(t)[0]):
            return "list"
    return None


def _models(annotation: Any) -> list[type[BaseModel]]:
    found = []
    for t in _args(annotation):
        if isinstance(t, type) and issubclass(t, BaseModel):
            found.append(t)
        for inner in typing.get_args(t):
            found += _models(inner)
    return found


def _reachable(root: type[BaseModel]) -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for info in model.model_fields.values():
            todo += _models(info.annotation)
    return seen


def _base(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(TINY)
    data.update(changes)
    return data


def _jobs() -> dict[str, Any]:
    data = _base(cluster={"hosts": 2, "device": {"compute_time": "1ms"}}, numerics=False)
    workload = {
        "model": "mlp",
        "input_shape": [8],
        "batch_size": 8,
        "optimizer": {"name": "sgd", "learning_rate": 0.1},
        "steps": 3,
    }
    del data["workload"], data["strategy"]
    data["jobs"] = [{"name": "a", "hosts": 1, "workload": workload}]
    return data


def _with(path: tuple[str | int, ...], value: Any, data: dict[str, Any] | None = None) -> Any:
    """(document, path): ``value`` placed at ``path`` of ``data`` (TINY by default)."""
    data = copy.deepcopy(data if data is not None else TINY)
    node = data
    for key in path[:-1]:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    node[path[-1]] = value
    return data, path


def _moe_base() -> dict[str, Any]:
    """TINY with the zoo's mixture of experts, timing-only (routing is drawn then)."""
    data = copy.deepcopy(TINY)
    data["workload"]["model"] = "moe"
    data["numerics"] = False
    return data


def _strategy(kind: str, **fields: Any) -> Any:
    return _with(("strategy",), {"kind": kind, **fields})


#: Where each section model sits in a scenario that is valid field by field, keyed by the
#: model's qualified name (a strategy spec: its kind): (document, path to the model).
ANCHORS: dict[str, Any] = {
    "Scenario": (_base(), ()),
    "ClusterSpec": (_base(), ("cluster",)),
    "DeviceSpec": (_base(), ("cluster", "device")),
    "VariabilitySpec": _with(("cluster", "device", "variability"), {"step": 0, "device": 0}),
    "HostSpec": _with(("cluster", "hosts"), [{"name": "h0", "devices": 1}]),
    "LinksSpec": (_base(), ("cluster", "links")),
    "IntraHostLinkSpec": (_base(), ("cluster", "links", "intra_host")),
    "NetworkLinkSpec": _with(("cluster", "links", "network"), {"bandwidth": "1GB/s"}),
    "NetworkSpec": _with(("cluster", "network"), {}),
    "WorkloadSpec": (_base(), ("workload",)),
    "ModelSpec": (_base(), ("workload", "model")),
    "DatasetSpec": _with(("workload", "dataset"), {"name": "teacher"}),
    "OptimizerSpec": (_base(), ("workload", "optimizer")),
    "ScheduleSpec": _with(
        ("workload", "optimizer", "schedule"),
        {"kind": "piecewise_constant", "boundaries": [5], "scales": [0.1]},
    ),
    "FaultsSpec": _with(("faults",), {}),
    "StragglerSpec": _with(("faults",), {"stragglers": [{"worker": 0, "slowdown": 2.0}]}),
    "SlowdownSpec": _with(
        ("faults",), {"stragglers": [{"worker": 0, "slowdown": {"kind": "lognormal"}}]}
    ),
    "FailureSpec": _with(("faults",), {"failures": [{"target": "worker 0", "at": "1s"}]}),
    "CheckpointSpec": _with(("checkpoint",), {"every_steps": 5, "storage_bandwidth": "1GB/s"}),
    "InputSpec": _with(("input",), {"per_example": "1us"}),
    "JobSpec": (_jobs(), ("jobs", 0)),
    "CompressionSpec": _with(
        ("strategy",), {"kind": "mirrored", "compression": {"method": "topk", "ratio": 0.01}}
    ),
    "OuterOptimizerSpec": _strategy("local_sgd", outer_optimizer={"name": "sgd"}),
    "MeshSpec": _strategy("hybrid", mesh={}),
    "ZipfRouting": _with(
        ("strategy",), {"kind": "expert_parallel", "routing": {"zipf": 1.2}}, _moe_base()
    ),
    "GoodputSpec": _with(("goodput",), {"horizon": "1 day", "restart": "1 min"}),
    "RatesSpec": _with(("goodput",), {"horizon": "1 day", "restart": "1 min", "rates": {}}),
    "ElasticSpec": _with(("goodput",), {"horizon": "1 day", "restart": "1 min", "elastic": {}}),
    "GoodputCheckpointSpec": _with(
        ("goodput",),
        {
            "horizon": "1 day",
            "restart": "1 min",
            "checkpoint": {"every_steps": 5, "storage_bandwidth": "1GB/s"},
        },
    ),
}
# Where a model sits below its anchor's path (the anchors above that hold a list or a
# sub-section name the section's own path here).
INNER: dict[str, tuple[str | int, ...]] = {
    "HostSpec": (0,),
    "StragglerSpec": ("stragglers", 0),
    "SlowdownSpec": ("stragglers", 0, "slowdown"),
    "FailureSpec": ("failures", 0),
    "CompressionSpec": ("compression",),
    "OuterOptimizerSpec": ("outer_optimizer",),
    "MeshSpec": ("mesh",),
    "ZipfRouting": ("routing",),
    "RatesSpec": ("rates",),
    "ElasticSpec": ("elastic",),
    "GoodputCheckpointSpec": ("checkpoint",),
}


def _key(model: type[BaseModel]) -> str:
    kinds = model.model_fields.get("kind")
    if model.__name__ == "Spec" and kinds is not None:
        return f"strategy:{typing.get_args(kinds.annotation)[0]}"
    return model.__name__


def _anchor(model: type[BaseModel]) -> tuple[dict[str, Any], tuple[str | int, ...]]:
    key = _key(model)
    if key.startswith("strategy:"):
        kind = key.removeprefix("strategy:")
        return _strategy(kind)
    data, path = ANCHORS[key]
    return copy.deepcopy(data), (*path, *INNER.get(key, ()))


def _cases() -> list[tuple[str, type[BaseModel], str, str]]:
    cases = []
    for model in _reachable(Scenario):
        for attr, info in model.model_fields.items():
            if info.exclude:
                continue  # filled in from other fields, never read from YAML
            kind, key = _number_kind(info.annotation), info.alias or attr
            if kind is not None:
                cases.append((f"{_key(model)}.{key}", model, key, kind))
    return cases


CASES = _cases()


def test_every_section_has_an_anchor():
    keys = {_key(m) for m in _reachable(Scenario)}
    assert {k for k in keys if not k.startswith("strategy:")} == set(ANCHORS)
    assert len(CASES) > 90  # every numeric field of every section and strategy


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


@pytest.mark.parametrize(("name", "model", "key", "kind"), CASES, ids=[c[0] for c in CASES])
def test_true_is_never_taken_as_a_number(name, model, key, kind):
    data, path = _anchor(model)
    node = data
    for step in path:
        node = node[step]
    node[key] = [True] if kind == "list" else True
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data, "s.yaml")
    field = _dotted((*path, key, *((0,) if kind == "list" else ())))
    assert caught.value.field in (field, field.removesuffix("[0]")), str(caught.value)
    said = caught.value.message.lower()
    assert said.startswith(("got true; expected ", "got [true]; expected ")), str(caught.value)
    assert "\n" not in str(caught.value)
