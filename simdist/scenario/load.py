"""Reading a scenario: YAML file or plain data in, one validated :class:`Scenario` out.

Everything that can go wrong ends as one :class:`~simdist.errors.ScenarioError` naming
the file, the dotted field path and what is accepted; :func:`dump_scenario` writes the
resolved scenario back (``scenario.yaml`` in every report) so that it loads to an equal one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simdist.errors import ScenarioError
from simdist.scenario.messages import error_message
from simdist.scenario.overrides import apply_overrides
from simdist.scenario.schema import Scenario

__all__ = ["dump_scenario", "load_scenario", "scenario_from_dict"]


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


def load_scenario(
    path: str | Path, overrides: Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Read, override (``--set``), and validate a scenario file; ``seed`` replaces its seed."""
    source = str(path)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(
            source, "", "file not found; expected a YAML scenario file, e.g. scenarios/ps_4w2s.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "", f"cannot read the file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(source, "", f"not valid YAML{where}: {problem}") from None
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
    data = apply_overrides(data, overrides, "--set")
    if seed is not None:
        data["seed"] = seed
    return scenario_from_dict(data, source, base_dir=file.parent)


def dump_scenario(s: Scenario) -> str:
    """The fully resolved scenario as YAML, SI numbers, YAML keys; loads back to an equal one."""
    data = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    cluster = data["cluster"]
    cluster["ps"] = list(s.cluster.ps_names)
    if s.chief_trains:
        # The chief is listed as chief only, not again as worker 0.
        cluster["worker"] = cluster["worker"][len(s.cluster.chief_names) :]
    data["workload"].pop("global_batch_size")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
