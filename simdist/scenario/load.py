"""Reading a scenario: YAML file or plain data in, one validated :class:`Scenario` out.

Everything that can go wrong ends as one :class:`~simdist.errors.ScenarioError` naming
the file, the dotted field path and what is accepted; :func:`dump_scenario` writes the
resolved scenario back (``scenario.yaml`` in every report) so that it loads to an equal one.

Scenario files are written by hand and sometimes by other programs, so the reader is
strict where YAML is lax and bounded where YAML is not: a key given twice is an error
(YAML would keep the last), only regular files of at most :data:`MAX_SCENARIO_BYTES` are
read (``/dev/zero`` never ends), and a document nested deeper than :data:`MAX_DEPTH` or
with more than :data:`MAX_NODES` values (an alias bomb expands to billions) is refused
before anything walks it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simdist.errors import ScenarioError
from simdist.scenario.messages import error_message
from simdist.scenario.overrides import apply_overrides, override_strings
from simdist.scenario.schema import Scenario
from simdist.scenario.strict_yaml import parse_yaml

__all__ = [
    "MAX_SCENARIO_BYTES",
    "dump_scenario",
    "is_sweep_file",
    "load_scenario",
    "read_scenario_text",
    "resolve_scenario",
    "scenario_from_dict",
    "scenario_from_text",
]

#: The largest scenario file read: real ones are a few KB.
MAX_SCENARIO_BYTES = 4 * 2**20


def scenario_from_dict(
    data: dict[str, Any], source: str = "<scenario>", base_dir: Path | None = None
) -> Scenario:
    """Validate plain data (as read from YAML) into a :class:`Scenario`.

    Relative file paths in the data are resolved against ``base_dir`` (the scenario
    file's folder; the working directory when ``None``). Raises one ScenarioError.
    """
    if not isinstance(data, dict):
        raise ScenarioError(
            source,
            "",
            f"got {type(data).__name__}; expected a mapping at the top level, e.g. name: my_run",
        )
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        field, message = error_message(exc.errors(include_url=False)[0], Scenario)
        raise ScenarioError(source, field, message) from None
    except RecursionError:
        raise ScenarioError(source, "", "nested too deeply to validate") from None


def read_scenario_text(path: str | Path) -> str:
    """The text of a scenario file; refused before reading unless a small regular file.

    Raises ScenarioError for a missing file, a device or folder, a file above
    :data:`MAX_SCENARIO_BYTES`, or bytes that are not UTF-8.
    """
    source = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ScenarioError(
            source, "", "file not found; expected a YAML scenario file, e.g. scenarios/ps_4w2s.yaml"
        ) from None
    except (OSError, ValueError) as exc:
        raise ScenarioError(source, "", f"cannot read the file: {exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise ScenarioError(
            source, "", f"is {kind}; expected a YAML scenario file, e.g. scenarios/ps_4w2s.yaml"
        )
    if info.st_size > MAX_SCENARIO_BYTES:
        raise ScenarioError(
            source,
            "",
            f"the file has {info.st_size:,} bytes; a scenario file is at most "
            f"{MAX_SCENARIO_BYTES:,} bytes (real ones are a few KB)",
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SCENARIO_BYTES + 1)  # the file may grow after the stat
    except OSError as exc:
        raise ScenarioError(source, "", f"cannot read the file: {exc}") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(
            source, "", f"the file has more than {MAX_SCENARIO_BYTES:,} bytes; too large"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            source, "", f"not UTF-8 text (byte {exc.start}); expected a YAML scenario file"
        ) from None


def is_sweep_file(data: Any) -> bool:
    """A sweep file (:mod:`simdist.sweep`) names a ``base`` scenario; a scenario never has
    that key."""
    return isinstance(data, dict) and "base" in data


def scenario_from_text(
    text: str,
    source: str = "<scenario>",
    overrides: Sequence[str] = (),
    seed: int | None = None,
    base_dir: Path | None = None,
) -> Scenario:
    """Parse YAML ``text``, apply ``--set`` overrides and ``seed``, validate: one Scenario."""
    data = parse_yaml(text, source)
    if data is None:
        raise ScenarioError(
            source,
            "",
            "the file is empty; expected a mapping with at least name and workload, "
            "e.g. name: my_run",
        )
    if not isinstance(data, dict):
        raise ScenarioError(
            source,
            "",
            f"the top level is a {type(data).__name__}; expected a mapping of keys "
            "such as name, cluster, workload, strategy, e.g. name: my_run",
        )
    if is_sweep_file(data):
        raise ScenarioError(
            source,
            "base",
            "this is a sweep file (a base scenario and a grid of values), not a scenario; "
            f"run all its points with: simdist sweep {source}",
        )
    data = apply_overrides(data, overrides, "--set")
    if seed is not None:
        data["seed"] = seed
    return scenario_from_dict(data, source, base_dir=base_dir)


def load_scenario(
    path: str | Path, overrides: Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Read, override (``--set``), and validate a scenario file; ``seed`` replaces its seed."""
    text = read_scenario_text(path)
    return scenario_from_text(text, str(path), overrides, seed, base_dir=Path(path).parent)


def dump_scenario(s: Scenario) -> str:
    """The fully resolved scenario as YAML, SI numbers, YAML keys; loads back to an equal one."""
    data = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    cluster = data["cluster"]
    cluster["ps"] = list(s.cluster.ps_names)
    if s.cluster.host_specs is not None:
        # A listed cluster: the hosts with their names, counts and devices, not worker:.
        cluster["hosts"] = [
            h.model_dump(mode="json", by_alias=True, exclude_none=True)
            for h in s.cluster.host_specs
        ]
        cluster.pop("worker", None)
    if s.chief_trains:
        # The chief is listed as chief only, not again as worker 0.
        cluster["worker"] = cluster["worker"][len(s.cluster.chief_names) :]
    if s.jobs is not None:
        # Each job has its own run sections (simdist.scenario.jobs); the scenario none.
        for key in ("workload", "strategy", "faults", "checkpoint", "input"):
            data.pop(key, None)
        for job in data["jobs"]:
            job["workload"].pop("global_batch_size")
    else:
        data["workload"].pop("global_batch_size")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def resolve_scenario(
    path_or_scenario: str | Path | Scenario | Mapping[str, Any],
    overrides: Mapping[str, Any] | Sequence[str] = (),
    **kw: Any,
) -> Scenario:
    """A validated :class:`Scenario` from a file, a Scenario or a dict.

    Overrides (any form of :func:`~simdist.scenario.overrides.override_strings`) apply to
    all three: a Scenario is dumped to its resolved YAML form, overridden and validated
    again, so the result is a new object.
    """
    strings = override_strings(overrides, **kw)
    if isinstance(path_or_scenario, Scenario):
        if not strings:
            return path_or_scenario
        data = yaml.safe_load(dump_scenario(path_or_scenario))
        return scenario_from_dict(apply_overrides(data, strings), f"<scenario {data['name']}>")
    if isinstance(path_or_scenario, Mapping):
        return scenario_from_dict(apply_overrides(dict(path_or_scenario), strings), "<dict>")
    return load_scenario(path_or_scenario, strings)
