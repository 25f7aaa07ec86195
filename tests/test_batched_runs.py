"""Runs computed together (:func:`simdist.engine.run_batch`) equal each run alone, byte for byte.

Asynchronous parameter-server runs leave their dataflow replays to be executed together
(:mod:`simdist.strategies.parameter_server.seed_replay`): shared banks, gradient waves
packed with several runs' lanes, update chains eight runs wide. Every table, the summary
and the final parameters must be those of the run alone, whatever else is in the batch.
"""

from __future__ import annotations

import copy
import json

import jax
import numpy as np
import pytest
from helpers import ps as parameter_server_scenario

from simdist.engine import run, run_batch
from simdist.runs import run_many
from simdist.scenario import scenario_from_dict
from simdist.strategies.parameter_server.seed_replay import DeferredReplay


def ps(workers: int = 4, servers: int = 2, steps: int = 60, **strategy) -> dict:
    """A small asynchronous PS run with an evaluation every 9 applied gradients."""
    data = parameter_server_scenario(workers, servers, steps, **strategy)
    data["workload"]["eval_every"] = 9
    return data


def seeds(data: dict, *values: int) -> list:
    out = []
    for seed in values:
        one = copy.deepcopy(data)
        one["seed"] = seed
        out.append(scenario_from_dict(one))
    return out


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
            assert together[part] == alone[part], f"seed {scenario.seed}: {part} differs"


MOMENTUM_SSP = ps(workers=5, servers=3, staleness_bound=1, lr_staleness="inverse")
MOMENTUM_SSP["workload"]["optimizer"] = {"name": "momentum", "learning_rate": 0.05}
ADAM = ps(workers=3, servers=2)
ADAM["workload"]["optimizer"] = {"name": "adam", "learning_rate": 0.01}

CASES = {
    "async-sgd": ps(),
    "ssp-momentum-inverse": MOMENTUM_SSP,
    "adam-one-update-per-call": ADAM,
    "twelve-workers-overlap": ps(workers=12, servers=2, steps=72, overlap=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_seed_of_a_batch_equals_its_run_alone(name):
    batch = seeds(CASES[name], 0, 1, 2)
    results = run_batch(batch)
    assert_alone(batch, results)


def test_nine_seeds_fill_wide_chains_and_two_groups(monkeypatch):
    """More runs than one chain program holds, in two groups, one computed while the
    next runs are simulated."""
    batch = seeds(ps(steps=40), *range(9))
    executed = []
    dispatch = DeferredReplay.dispatch.__func__

    def counting(cls, members):
        executed.append(len(members))
        return dispatch(cls, members)

    monkeypatch.setattr(DeferredReplay, "dispatch", classmethod(counting))
    results = run_batch(batch)
    assert sum(executed) == 9 and len(executed) > 1
    assert_alone(batch, results)


def test_a_diverging_seed_is_simulated_again_and_stops_where_it_alone_stops():
    data = ps(steps=40)
    data["workload"]["optimizer"]["learning_rate"] = 1e30
    batch = seeds(data, 0, 1) + seeds(ps(steps=40), 2)
    results = run_batch(batch)
    assert results[0].summary["diverged"] and not results[2].summary["diverged"]
    assert_alone(batch, results)


def test_a_mixed_batch_defers_only_what_can_be_deferred():
    """Timing-only runs, another strategy and compressed pushes run as alone."""
    timing = ps(steps=30)
    timing["numerics"] = False
    compressed = ps(steps=30, compression="fp16")
    batch = seeds(ps(steps=30), 3) + seeds(timing, 4) + seeds(compressed, 5) + seeds(ps(), 6)
    assert_alone(batch, run_batch(batch))


def test_compare_runs_seeds_in_batches_in_this_process():
    batch = seeds(ps(steps=30), 0, 1, 2)
    results = run_many(batch, parallel=False)
    assert_alone(batch, results)
