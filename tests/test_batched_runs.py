"""Runs computed together (:func:`simdist.runtime.engine.run_batch`) equal each run alone, byte for
byte.

A batch mixes runs whose numerics are deferred and computed with their seeds' (the
synchronous family, parameter_server ``mode: sync``, gpipe / 1f1b pipelines) with runs that
compute as they simulate (asynchronous and SSP parameter servers, whose seed-batched replay
was removed because it did not pay: benchmarks/bench_seed_families.py; timing-only runs).
Every table, the summary and the final parameters must be those of the run alone,
whatever else is in the batch; deferred runs are computed in groups of
:attr:`~simdist.batched_runs.DeferredRun.group_runs`.
"""

from __future__ import annotations

import copy
import json

import jax
import numpy as np
from helpers import ps as parameter_server_scenario

from simdist.runtime.engine import run, run_batch
from simdist.scenario import load_scenario, scenario_from_dict
from simdist.strategies.sync_batch import SyncSeedRun
from simdist.studies.runs import run_many

MIRRORED = ["workload.steps=6", "workload.eval_every=4"]


def ps(steps: int = 30, **strategy) -> dict:
    """A small parameter-server run with an evaluation every 9 applied gradients."""
    data = parameter_server_scenario(4, 2, steps, **strategy)
    data["workload"]["eval_every"] = 9
    return data


def seeds(data: dict, *values: int) -> list:
    out = []
    for seed in values:
        one = copy.deepcopy(data)
        one["seed"] = seed
        out.append(scenario_from_dict(one))
    return out


def mirrored(*values: int, extra: tuple[str, ...] = ()) -> list:
    return [
        load_scenario("scenarios/mirrored_4dev.yaml", [*MIRRORED, *extra], seed=seed)
        for seed in values
    ]


def fingerprint(result) -> dict:
    """Every byte a report is written from: the tables, the summary, the parameters."""
    tables = {name: frame.to_csv() for name, frame in sorted(result.tables.items())}
    params = None
    if result.params is not None:
        leaves = jax.tree_util.tree_leaves(result.params)
        params = [np.asarray(leaf).tobytes() for leaf in leaves]
    return {
        "metrics": result.metrics.to_csv(),
        "events": result.events.to_csv(),
        "tables": tables,
        "summary": json.dumps(result.summary, sort_keys=True, default=str),
        "params": params,
    }


def assert_alone(batch: list, results: list) -> None:
    for scenario, result in zip(batch, results, strict=True):
        alone = fingerprint(run(scenario))
        together = fingerprint(result)
        for part in alone:
            assert together[part] == alone[part], f"{scenario.name} seed {scenario.seed}: {part}"


def counted_groups(monkeypatch) -> list[int]:
    """The sizes of the groups of synchronous runs computed together, as they happen."""
    groups: list[int] = []
    execute = SyncSeedRun.execute.__func__

    def counting(cls, members):
        groups.append(len(members))
        return execute(cls, members)

    monkeypatch.setattr(SyncSeedRun, "execute", classmethod(counting))
    return groups


def test_a_mixed_batch_equals_each_run_alone(monkeypatch):
    """Deferred mirrored seeds between asynchronous, SSP and timing-only runs, a run of
    another program (Adam) and a parameter_server ``mode: sync`` pair."""
    groups = counted_groups(monkeypatch)
    timing = ps()
    timing["numerics"] = False
    batch = [
        *mirrored(0),
        *seeds(ps(), 3),
        *mirrored(1),
        *seeds(ps(staleness_bound=1), 4),
        *seeds(timing, 5),
        *mirrored(2, extra=("workload.optimizer.name=adam",)),
        *seeds(ps(steps=8, mode="sync"), 6, 7),
        *mirrored(3),
    ]
    results = run_batch(batch)
    monkeypatch.undo()
    # The three SGD mirrored seeds are one group (fewer than group_runs: computed at the
    # end), the Adam one another.
    assert sorted(groups) == [1, 3]
    assert_alone(batch, results)


def test_runs_are_computed_in_groups_of_group_runs(monkeypatch):
    groups = counted_groups(monkeypatch)
    batch = mirrored(*range(SyncSeedRun.group_runs + 1))
    results = run_batch(batch)
    monkeypatch.undo()
    assert groups == [SyncSeedRun.group_runs, 1]
    assert_alone(batch, results)


def test_compare_runs_seeds_in_batches_in_this_process(monkeypatch):
    groups = counted_groups(monkeypatch)
    batch = mirrored(0, 1, 2)
    results = run_many(batch, parallel=False)
    monkeypatch.undo()
    assert groups == [3]
    assert_alone(batch, results)
