"""Seed-batched numerics of the synchronous strategies equal one-seed runs, byte for byte
(issue 32): :func:`simdist.runtime.engine.run_batch` computes the seeds' steps together
(simdist/strategies/sync_batch.py) with the step a run alone takes, one lane per run (issue
40), and each seed's Result must be :func:`simdist.runtime.engine.run`'s.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from simdist.runtime.engine import run, run_batch
from simdist.scenario import load_scenario
from simdist.strategies.sync_batch import SyncSeedRun
from simdist.strategies.sync_trainer import SyncTrainer


def fingerprint(result) -> dict[str, str]:
    """What a report folder holds, as text: every frame's CSV, the summary, the parameters."""
    out = {
        "metrics": result.metrics.to_csv(index=False),
        "events": result.events.to_csv(index=False),
        "summary": json.dumps(result.summary, sort_keys=True, default=str),
    }
    for name, frame in result.tables.items():
        out[name] = frame.to_csv(index=False)
    leaves = jax.tree_util.tree_leaves_with_path(result.params)
    out["params"] = "\n".join(
        f"{jax.tree_util.keystr(path)} {np.asarray(leaf).dtype} {np.asarray(leaf).tobytes().hex()}"
        for path, leaf in leaves
    )
    return out


def seeds_of(path: str, overrides: list[str], n: int = 3):
    return [load_scenario(path, overrides, seed=seed) for seed in range(n)]


def assert_batched_equals_alone(scenarios, monkeypatch) -> list:
    """run_batch of ``scenarios`` equals run of each alone; returns the SyncSeedRuns made."""
    made = []
    init = SyncSeedRun.__init__

    def spy(self, strategy):
        init(self, strategy)
        made.append(self)

    monkeypatch.setattr(SyncSeedRun, "__init__", spy)
    batched = run_batch(scenarios)
    monkeypatch.undo()
    for scenario, together in zip(scenarios, batched, strict=True):
        alone = run(scenario)
        a, b = fingerprint(alone), fingerprint(together)
        assert a.keys() == b.keys()
        for name in a:
            assert a[name] == b[name], f"seed {scenario.seed}: {name} differs"
    return made


MIRRORED = ["workload.steps=12", "workload.eval_every=5"]


def test_mirrored_seeds_batched_equal_alone(monkeypatch):
    scenarios = seeds_of("scenarios/mirrored_4dev.yaml", MIRRORED)
    made = assert_batched_equals_alone(scenarios, monkeypatch)
    assert len(made) == 3  # every seed deferred its numerics
    metrics = run(scenarios[0]).metrics
    assert sorted(set(metrics.metric)) == [
        "examples_per_s",
        "test_accuracy",
        "test_loss",
        "train_loss",
    ]
    assert list(metrics[metrics.metric == "test_loss"].step) == [5, 10, 12]


def test_a_run_alone_and_its_seeds_take_the_same_step(monkeypatch):
    # One numerics path: a run alone is one lane of SyncTrainer.step, three seeds are a lane
    # each (a group of 2, then the rest of 1), all on the one SyncStep their trainers share.
    calls = []
    step = SyncTrainer.step

    def spy(self, states, batches):
        calls.append((len(states), id(self.lanes)))
        return step(self, states, batches)

    monkeypatch.setattr(SyncTrainer, "step", spy)
    scenarios = seeds_of("scenarios/mirrored_4dev.yaml", ["workload.steps=3"])
    run(scenarios[0])
    run_batch(scenarios)
    assert [width for width, _ in calls] == [1] * 3 + [2] * 3 + [1] * 3
    assert len({lanes for _, lanes in calls}) == 1


def test_multi_worker_mirrored_seeds_batched_equal_alone(monkeypatch):
    scenarios = seeds_of(
        "scenarios/mwm_2x4_ring.yaml", ["workload.steps=8", "workload.eval_every=4"]
    )
    assert len(assert_batched_equals_alone(scenarios, monkeypatch)) == 3


@pytest.mark.parametrize("path", ["scenarios/central_storage_4dev.yaml", "scenarios/tpu_2x2.yaml"])
def test_other_synchronous_strategies_batched_equal_alone(path, monkeypatch):
    scenarios = seeds_of(path, ["workload.steps=6", "workload.eval_every=3"], n=2)
    assert len(assert_batched_equals_alone(scenarios, monkeypatch)) == 2


def test_one_device_adam_schedule_batched_equal_alone(monkeypatch):
    overrides = [
        "workload.steps=9",
        "workload.eval_every=0",
        "workload.optimizer.name=adam",
        "workload.optimizer.learning_rate=0.01",
        "workload.optimizer.schedule.kind=cosine",
    ]
    scenarios = seeds_of("scenarios/one_device_digits.yaml", overrides, n=2)
    assert len(assert_batched_equals_alone(scenarios, monkeypatch)) == 2


@pytest.mark.parametrize("eval_every", [10, 3])
def test_diverging_seeds_batched_equal_alone(eval_every, monkeypatch):
    # The loss stops being finite at step 3: away from an evaluation point a run alone finds
    # it one step late and simulates again, stopping there; at one it stops at once. The
    # batched runs ask for the second pass, which ends as the run alone does.
    overrides = [
        "workload.steps=30",
        f"workload.eval_every={eval_every}",
        "workload.optimizer.learning_rate=1e12",
    ]
    scenarios = seeds_of("scenarios/mirrored_4dev.yaml", overrides, n=2)
    assert len(assert_batched_equals_alone(scenarios, monkeypatch)) == 2
    summary = run(scenarios[0]).summary
    assert (summary["diverged"], summary["diverged_at_step"]) == (True, 3)


def test_runs_that_cannot_defer_run_as_before(monkeypatch):
    # Checkpoints (restores) are not deferred: each run computes as it simulates.
    overrides = [
        "workload.steps=4",
        "workload.eval_every=2",
        "checkpoint.every_steps=2",
        "checkpoint.storage_bandwidth=1GB/s",
    ]
    scenarios = seeds_of("scenarios/mirrored_4dev.yaml", overrides, n=2)
    assert assert_batched_equals_alone(scenarios, monkeypatch) == []


PS_SYNC = ["strategy.mode=sync", "workload.steps=10", "workload.eval_every=4"]


@pytest.mark.parametrize("backups", [0, 1])
def test_parameter_server_sync_seeds_batched_equal_alone(backups, monkeypatch):
    from simdist.strategies.parameter_server.sync_seeds import PsSyncSeedRun

    made = []
    init = PsSyncSeedRun.__init__

    def spy(self, strategy):
        init(self, strategy)
        made.append(self)

    monkeypatch.setattr(PsSyncSeedRun, "__init__", spy)
    overrides = [*PS_SYNC, f"strategy.backup_workers={backups}"]
    scenarios = seeds_of("scenarios/ps_4w2s.yaml", overrides)
    assert_batched_equals_alone(scenarios, monkeypatch)
    assert len(made) == 3
    updates = run(scenarios[1]).tables["updates"]
    assert len(updates) == 10 * (4 - backups)


def test_parameter_server_sync_diverging_seeds_batched_equal_alone(monkeypatch):
    overrides = [*PS_SYNC, "workload.optimizer.learning_rate=1e12", "workload.steps=30"]
    scenarios = seeds_of("scenarios/ps_4w2s.yaml", overrides, n=2)
    assert_batched_equals_alone(scenarios, monkeypatch)
    summary = run(scenarios[0]).summary
    assert summary["diverged"]
    assert summary["diverged_at_step"] < 30
