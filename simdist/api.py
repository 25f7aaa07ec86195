"""The Python API for notebooks and scripts: ``run`` a scenario, ``load_report`` a folder,
``compare`` several runs, run a scenario once per seed or many at once, the trade-off
study and the goodput study (``goodput``, weeks of failures and checkpoints); each name is
loaded on first use from the module that defines it.

``run`` returns a :class:`~simdist.runtime.engine.Result` whose DataFrames equal the CSV files of
the report folder, dtypes included: ``run(...).events`` and ``load_report(folder).events``
compare equal with ``pandas.testing.assert_frame_equal`` (:mod:`simdist.runtime.readback`).

```python
import simdist
result = simdist.run("scenarios/ps_4w2s.yaml", cluster__hosts=8, strategy__staleness_bound=2)
result.metrics.query("metric == 'test_accuracy'")
same = simdist.load_report("reports/ps_4w2s")
folder, table = simdist.api.compare(["scenarios/ps_4w2s.yaml", "reports/mirrored_4dev"])
```

This module is the front door only: nothing in simdist imports it (the CLI aside), so the
modules behind it never import each other through it. They are :mod:`simdist.studies.runs` (one
run, a run per seed, many runs on Dask), :mod:`simdist.runtime.readback` (a report folder read
back), :mod:`simdist.studies.compare`, :mod:`simdist.studies.tradeoff`,
:mod:`simdist.runtime.preflight` (the checks before and after a run) and :mod:`simdist.scenario` (a
scenario from a file, a
dict or a Scenario, with overrides). Loading each on first use keeps ``import
simdist.api`` (and so ``simdist validate``) free of pandas, NumPy, SimPy and JAX.
:mod:`simdist.report` only writes (report folders, comparison folders) and never imports
the API or the engine.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simdist.goodput.run import Goodput, goodput
    from simdist.runtime.engine import Result
    from simdist.runtime.preflight import Preflight, preflight, warnings_after
    from simdist.runtime.readback import conform, load_report, read_params, read_table
    from simdist.scenario.load import resolve_scenario
    from simdist.scenario.overrides import override_strings
    from simdist.studies.compare import compare
    from simdist.studies.runs import DASK_MIN_RUNS, run, run_many, run_seeds, seed_list
    from simdist.studies.tradeoff import Tradeoff, tradeoff

#: Each name of the API and the module it is loaded from on first use.
MODULES = {
    "compare": "simdist.studies.compare",
    "Result": "simdist.runtime.engine",
    "Goodput": "simdist.goodput.run",
    "goodput": "simdist.goodput.run",
    "Preflight": "simdist.runtime.preflight",
    "preflight": "simdist.runtime.preflight",
    "warnings_after": "simdist.runtime.preflight",
    "conform": "simdist.runtime.readback",
    "load_report": "simdist.runtime.readback",
    "read_params": "simdist.runtime.readback",
    "read_table": "simdist.runtime.readback",
    "DASK_MIN_RUNS": "simdist.studies.runs",
    "run": "simdist.studies.runs",
    "run_many": "simdist.studies.runs",
    "run_seeds": "simdist.studies.runs",
    "seed_list": "simdist.studies.runs",
    "resolve_scenario": "simdist.scenario.load",
    "override_strings": "simdist.scenario.overrides",
    "Tradeoff": "simdist.studies.tradeoff",
    "tradeoff": "simdist.studies.tradeoff",
}

__all__ = [
    "DASK_MIN_RUNS",
    "Goodput",
    "Preflight",
    "Result",
    "Tradeoff",
    "compare",
    "conform",
    "goodput",
    "load_report",
    "override_strings",
    "preflight",
    "read_params",
    "read_table",
    "resolve_scenario",
    "run",
    "run_many",
    "run_seeds",
    "seed_list",
    "tradeoff",
    "warnings_after",
]


def __getattr__(name: str) -> Any:
    """``simdist.api.NAME``: the name from its module in :data:`MODULES` (PEP 562)."""
    if name in MODULES:
        return getattr(import_module(MODULES[name]), name)
    raise AttributeError(f"module 'simdist.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *MODULES})
