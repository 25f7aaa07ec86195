"""``--set a.b.c=value``: edit a scenario's plain data before it is validated, and the
``--set`` strings the Python API's override forms stand for."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from simdist.errors import ScenarioError
from simdist.scenario.messages import SHORTHAND_KEYS
from simdist.scenario.strict_yaml import parse_yaml
from simdist.spec import show

__all__ = ["apply_overrides", "override_strings"]


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], source: str = "--set"
) -> dict[str, Any]:
    """A copy of ``data`` with each ``"a.b.c=value"`` applied (value read as strict YAML).

    Missing intermediate mappings are created, and a shorthand such as ``strategy: mirrored``
    is expanded so that ``strategy.all_reduce=tree`` works on top of it. ``cluster.hosts=N``
    replaces a ``cluster.worker`` list (its workers are then named worker0, worker1, ...).
    """
    result = copy.deepcopy(data)
    for item in overrides:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq:
            raise ScenarioError(
                source, key, f"no '=' in {show(item)}; expected path=value, e.g. cluster.hosts=8"
            )
        parts = key.split(".")
        if not key or any(not p for p in parts):
            raise ScenarioError(
                source, key, f"bad path in {show(item)}; expected dotted keys, e.g. cluster.hosts=8"
            )
        value = parse_yaml(raw, source, key) if raw.strip() else None
        node: Any = result
        for depth, part in enumerate(parts[:-1]):
            if isinstance(node, list):  # a list entry by its index: jobs.1.workload.steps
                child = node[_index(node, part, key, ".".join(parts[:depth]), source)]
            else:
                child = node.get(part)
                if child is None:
                    child = node[part] = {}
                elif isinstance(child, str) and part in SHORTHAND_KEYS:
                    child = node[part] = {SHORTHAND_KEYS[part]: child}
                elif isinstance(child, list) and parts[depth + 1].isdigit():
                    node = child
                    continue
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ScenarioError(
                    source, key, f"cannot set {key!r}: {where} is {show(child)}, not a mapping"
                )
            node = child
        if parts == ["cluster", "hosts"]:
            # A count given on the command line replaces a TF_CONFIG-style worker list.
            node.pop("worker", None)
        if isinstance(node, list):
            node[_index(node, parts[-1], key, ".".join(parts[:-1]), source)] = value
        else:
            node[parts[-1]] = value
    return result


def _index(items: list[Any], part: str, key: str, where: str, source: str) -> int:
    """The entry ``part`` (a whole number) of the list at ``where``, or one clear error."""
    if not part.isdigit() or int(part) >= len(items):
        raise ScenarioError(
            source,
            key,
            f"cannot set {key!r}: {where} is a list of {len(items)} entries; expected an index "
            f"0..{len(items) - 1} after it, e.g. {where}.0",
        )
    return int(part)


def _literal(value: Any) -> str:
    """``value`` as YAML text that reads back as the same Python value."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value, default=str)


def override_strings(overrides: Mapping[str, Any] | Sequence[str] = (), **kw: Any) -> list[str]:
    """``--set``-style ``"a.b=value"`` strings from the API's override forms.

    ``overrides`` is either ``--set`` strings (values read as YAML, as on the
    command line) or a mapping of dotted paths to Python values; keyword
    arguments spell dots as ``__`` (``cluster__hosts=8`` → ``cluster.hosts=8``).
    Python values keep their type: ``"8"`` stays a string, ``8`` an integer.
    """
    if isinstance(overrides, str):
        raise TypeError("overrides: give a sequence of 'path=value' strings or a mapping")
    if isinstance(overrides, Mapping):
        strings = [f"{key}={_literal(value)}" for key, value in overrides.items()]
    else:
        strings = [str(item) for item in overrides]
    strings += [f"{key.replace('__', '.')}={_literal(value)}" for key, value in kw.items()]
    return strings
