"""One clear error message per bad scenario, from the first pydantic error.

Users edit scenario files by hand, and a pydantic traceback tells them neither where the
problem is in their YAML nor what is accepted. :func:`error_message` turns one pydantic
error into the dotted YAML path of the field and a sentence naming the bad value and an
accepted example (``got 'mlpp'; did you mean 'mlp'? ..., e.g. model: mlp``).

Examples come from the field itself (``Field(examples=[...])``, as each strategy module
gives its options' examples) and else from :data:`EXAMPLES`, keyed by YAML key.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from simdist.spec import show

# Sections that may be written as a bare string, and the key that string stands for.
SHORTHAND_KEYS = {"strategy": "kind", "schedule": "kind", "model": "name", "dataset": "name"}

# Examples shown after "e.g." in messages, keyed by the YAML key of the field.
EXAMPLES: dict[str, str] = {
    "name": "name: my_run",
    "seed": "seed: 0",
    "numerics": "numerics: true",
    "cluster": "cluster: {hosts: 4}",
    "hosts": "hosts: 4",
    "worker": "worker: [w0:2222, w1:2222]",
    "chief": "chief: [c0:2222]",
    "ps": "ps: 2",
    "devices_per_host": "devices_per_host: 4",
    "device": "device: {profile: v100}",
    "profile": "profile: v100",
    "peak_flops": "peak_flops: 15.7TFLOP/s",
    "efficiency": "efficiency: 0.4",
    "compute_time": "compute_time: 2ms",
    "links": "links: {network: {bandwidth: 10Gbit/s, latency: 50us}}",
    "intra_host": "intra_host: {bandwidth: 300GB/s, latency: 2us}",
    "network": "network: {bandwidth: 10Gbit/s, latency: 50us}",
    "bandwidth": "bandwidth: 10Gbit/s",
    "latency": "latency: 50us",
    "workload": (
        "workload: {model: mlp, dataset: digits, batch_size: 32, "
        "optimizer: {name: sgd, learning_rate: 0.05}, steps: 1000}"
    ),
    "model": "model: mlp",
    "hidden": "hidden: [128, 64]",
    "dataset": "dataset: digits",
    "npz": "npz: data/train.npz",
    "path": "path: data/train.npz",
    "test_fraction": "test_fraction: 0.2",
    "n_examples": "n_examples: 2048",
    "n_features": "n_features: 16",
    "noise": "noise: 0.1",
    "batch_size": "batch_size: 32",
    "global_batch_size": "global_batch_size: 128",
    "optimizer": "optimizer: {name: sgd, learning_rate: 0.05}",
    "learning_rate": "learning_rate: 0.05",
    "momentum": "momentum: 0.9",
    "schedule": "schedule: {kind: cosine}",
    "decay_steps": "decay_steps: 1000",
    "alpha": "alpha: 0.0",
    "decay_rate": "decay_rate: 0.5",
    "transition_steps": "transition_steps: 1000",
    "warmup_steps": "warmup_steps: 100",
    "boundaries": "boundaries: [1000, 2000]",
    "scales": "scales: [0.1, 0.1]",
    "steps": "steps: 1000",
    "epochs": "epochs: 5",
    "eval_every": "eval_every: 100",
    "init_from": "init_from: checkpoints/params.npz",
    "strategy": "strategy: mirrored",
    "kind": "kind: mirrored",
    "execution": "execution: auto",
    "faults": "faults: {stragglers: [{worker: 3, slowdown: 2.0}]}",
    "stragglers": "stragglers: [{worker: 3, slowdown: 2.0}]",
    "slowdown": "slowdown: 2.0",
    "probability": "probability: 0.1",
    "mu": "mu: 0.0",
    "sigma": "sigma: 0.5",
    "failures": "failures: [{target: worker 1, at: 50ms, restart_after: 20ms}]",
    "target": "target: worker 1",
    "at": "at: 50ms",
    "mtbf": "mtbf: 2s",
    "restart_after": "restart_after: 20ms",
    "restart_at": "restart_at: 70ms",
    "checkpoint": "checkpoint: {every_steps: 100, storage_bandwidth: 1GB/s}",
    "every_steps": "every_steps: 100",
    "every_s": "every_s: 0.5s",
    "storage_bandwidth": "storage_bandwidth: 1GB/s",
    "input": "input: {per_example: 20us, prefetch: 2}",
    "per_example": "per_example: 20us",
    "prefetch": "prefetch: 2",
}

_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "list": "a list",
    "dict": "a mapping",
    "model": "a mapping",
}

_BOUNDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}


def _suggest(word: str, choices: Sequence[str]) -> list[str]:
    """The likely intended choice: one the word abbreviates, else the closest spelling."""
    prefixed = [c for c in choices if len(word) >= 3 and c.startswith(word)]
    return prefixed[:1] or difflib.get_close_matches(word, list(choices), n=1)


def choice_message(value: object, choices: Sequence[str], key: str) -> str:
    """``got 'mlpp'; did you mean 'mlp'? Expected one of ..., e.g. model: mlp``."""
    listed = ", ".join(repr(c) for c in choices)
    if isinstance(value, str):
        close = _suggest(value, choices)
        if close:
            return (
                f"got {show(value)}; did you mean {close[0]!r}? "
                f"Expected one of {listed}, e.g. {key}: {close[0]}"
            )
    return f"got {show(value)}; expected one of {listed}, e.g. {key}: {choices[0]}"


def _example(key: str, model: type[BaseModel] | None = None) -> str:
    """``, e.g. key: value`` for YAML ``key``, or ``""`` when there is no example.

    The field's own ``Field(examples=[...])`` in ``model`` comes first (strategy modules
    give their options' examples that way), then :data:`EXAMPLES`.
    """
    info = _field_of(model, key) if model is not None else None
    if info is not None and info.examples:
        value = info.examples[0]
        return f", e.g. {key}: {value if isinstance(value, str) else show(value)}"
    return f", e.g. {EXAMPLES[key]}" if key in EXAMPLES else ""


# ---------------------------------------------------------------- error locations


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types inside Annotated / Optional / unions."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _unwrap(a)]
    return [annotation]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    return [t for t in _unwrap(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]


def _yaml_key(model: type[BaseModel], attr: str) -> str:
    info = model.model_fields.get(attr)
    return info.alias if info is not None and info.alias else attr


def _field_of(model: type[BaseModel], key: str) -> FieldInfo | None:
    """The field of ``model`` written as ``key`` in YAML (its alias or its name)."""
    for attr, info in model.model_fields.items():
        if key in (info.alias, attr):
            return info
    return None


def _literals(model: type[BaseModel] | None, key: str) -> list[str]:
    """The words field ``key`` of ``model`` also takes besides a section (``routing:
    uniform`` beside ``routing: {zipf: 1.2}``)."""
    field = _field_of(model, key) if model is not None else None
    if field is None:
        return []
    return [
        str(word)
        for t in _unwrap(field.annotation)
        if typing.get_origin(t) is Literal
        for word in typing.get_args(t)
    ]


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [_yaml_key(model, a) for a, f in model.model_fields.items() if not f.exclude]


def _kinds(model: type[BaseModel]) -> tuple[str, ...]:
    field = model.model_fields.get("kind")
    return typing.get_args(field.annotation) if field is not None else ()


def _walk(
    loc: tuple[str | int, ...], root: type[BaseModel]
) -> tuple[str, type[BaseModel] | None, str, list[type[BaseModel]]]:
    """For a pydantic error location under ``root``: the dotted YAML path, the model holding
    the last key, that key as written in YAML, and the model(s) the value at ``loc`` may be.

    A tag in ``loc`` (the ``mirrored`` of ``strategy.mirrored.all_reduce``) narrows a
    discriminated union to its member and is not part of the path.
    """
    path = ""
    model: type[BaseModel] | None = root
    candidates: list[type[BaseModel]] = [root]
    key = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
            continue
        if len(candidates) > 1:
            tagged = [m for m in candidates if item in _kinds(m)]
            if tagged:
                candidates = tagged
                continue
        named = [m for m in candidates if m.__name__ == item]
        if named:  # a union's member, as pydantic names it (``routing.ZipfRouting.zipf``)
            candidates = named
            continue
        model = candidates[0] if candidates else None
        attr = item
        if model is not None:
            by_alias = {_yaml_key(model, a): a for a in model.model_fields}
            attr = by_alias.get(item, item)
            key = _yaml_key(model, attr)
            field = model.model_fields.get(attr)
            inner = field.annotation if field is not None else None
            candidates = _models_in(inner) if inner is not None else []
            if not candidates and inner is not None:
                for arg in _unwrap(inner):
                    candidates += [m for a in typing.get_args(arg) for m in _models_in(a)]
        else:
            key = item
        path = f"{path}.{key}" if path else key
    return path, model, key, candidates


# ---------------------------------------------------------------- messages


def error_message(err: Any, root: type[BaseModel]) -> tuple[str, str]:
    """(dotted field path, friendly message) for one pydantic error validating ``root``."""
    etype = err["type"]
    ctx = err.get("ctx") or {}
    loc = tuple(err["loc"])
    value = err.get("input")
    if etype == "scenario":
        path = _walk(loc, root)[0]
        field = f"{path}.{ctx['field']}" if path and ctx["field"] else path or ctx["field"]
        return field, ctx["message"]
    if etype == "extra_forbidden":
        path = _walk(loc, root)[0]
        containers = _walk(loc[:-1], root)[3]
        allowed = _allowed_keys(containers[0]) if len(containers) == 1 else []
        close = _suggest(str(loc[-1]), allowed)
        if close:
            return path, f"unknown key {str(loc[-1])!r}; did you mean {close[0]!r}?"
        listed = ", ".join(allowed)
        return path, f"unknown key {str(loc[-1])!r}; allowed keys here: {listed}"
    path, model, key, _ = _walk(loc, root)
    if etype == "missing":
        return path, f"missing; required{_example(key, model)}"
    if etype == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        return f"{path}.kind", choice_message(ctx.get("tag"), tags, key)
    if etype == "union_tag_not_found":
        return f"{path}.kind", f"missing; required{_example('strategy')}"
    if etype == "literal_error":
        choices = [c.strip(" '") for c in re.split(r",| or ", str(ctx.get("expected", "")))]
        parent = path.split(".")[-2] if "." in path else ""
        if key == SHORTHAND_KEYS.get(parent):
            key = parent
        return path, choice_message(value, [c for c in choices if c], key)
    if etype in ("value_error", "assertion_error"):
        return path, str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    if etype in _BOUNDS:
        bound = f"{_BOUNDS[etype]} {next(iter(ctx.values()))}"
        return path, f"got {show(value)}; expected a value {bound}{_example(key, model)}"
    if etype == "finite_number":
        return path, f"got {show(value)}; expected a finite number{_example(key, model)}"
    if etype in ("too_short", "too_long"):
        return path, f"got {show(value)}; {err['msg'].lower()}{_example(key, model)}"
    words = _literals(model, key) if isinstance(value, str) else []
    if words and etype in ("model_type", "model_attributes_type", "dict_type"):
        return path, choice_message(value, words, key)  # a section, or one of these words
    for word, text in _TYPE_WORDS.items():
        if etype.startswith(word):
            return path, f"got {show(value)}; expected {text}{_example(key, model)}"
    return path, f"got {show(value)}; {err['msg']}{_example(key, model)}"
