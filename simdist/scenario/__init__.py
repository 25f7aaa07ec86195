"""Scenario files: the YAML schema, its validation, ``--set`` overrides and error messages.

A scenario is the one input of a run. It is validated completely before anything is
built, and the first problem is reported as a single :class:`~simdist.errors.ScenarioError`
naming the file, the dotted field path, the bad value and an accepted example, because
users edit these files by hand and a pydantic traceback tells them none of that.

* :mod:`~simdist.scenario.schema` — :class:`Scenario` and the checks across its sections,
  each in the module named after it (:mod:`~simdist.scenario.cluster`,
  :mod:`~simdist.scenario.workload`, :mod:`~simdist.scenario.strategy`, built from the
  strategy registry, :mod:`~simdist.scenario.effects` and :mod:`~simdist.scenario.jobs`).
* :mod:`~simdist.scenario.messages` — a pydantic error to one clear message.
* :mod:`~simdist.scenario.overrides` — ``--set a.b=value``, and the API's override forms.
* :mod:`~simdist.scenario.load` — file, dict or Scenario in, :class:`Scenario` out, and
  back to YAML.

The base class and unit-typed fields every section uses are in :mod:`simdist.spec`.
"""

from simdist.scenario.load import dump_scenario, load_scenario, resolve_scenario, scenario_from_dict
from simdist.scenario.overrides import apply_overrides, override_strings
from simdist.scenario.registration import register_strategy, unregister_strategy
from simdist.scenario.schema import (
    DATASETS,
    MODELS,
    OPTIMIZERS,
    SCHEDULES,
    STRATEGIES,
    CheckpointSpec,
    ClusterSpec,
    DatasetSpec,
    DeviceSpec,
    FailureSpec,
    FaultsSpec,
    InputSpec,
    IntraHostLinkSpec,
    LinkSpec,
    LinksSpec,
    ModelSpec,
    NetworkLinkSpec,
    OptimizerSpec,
    Scenario,
    ScheduleSpec,
    SlowdownSpec,
    StragglerSpec,
    StrategySpec,
    WorkloadSpec,
)

__all__ = [
    "DATASETS",
    "MODELS",
    "OPTIMIZERS",
    "SCHEDULES",
    "STRATEGIES",
    "CheckpointSpec",
    "ClusterSpec",
    "DatasetSpec",
    "DeviceSpec",
    "FailureSpec",
    "FaultsSpec",
    "InputSpec",
    "IntraHostLinkSpec",
    "LinkSpec",
    "LinksSpec",
    "ModelSpec",
    "NetworkLinkSpec",
    "OptimizerSpec",
    "Scenario",
    "ScheduleSpec",
    "SlowdownSpec",
    "StragglerSpec",
    "StrategySpec",
    "WorkloadSpec",
    "apply_overrides",
    "dump_scenario",
    "load_scenario",
    "override_strings",
    "register_strategy",
    "resolve_scenario",
    "scenario_from_dict",
    "unregister_strategy",
]
