"""Seeds of a gpipe / 1f1b pipeline computed together (simdist.strategies.pipeline.batched)
with the step a run alone takes, one lane per run, give each seed the report of that seed
run alone, byte for byte: metrics, events, summary and final parameters; a seed whose loss
stops being finite stops where it stops alone."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from simdist.runtime.engine import run, run_batch
from simdist.scenario import load_scenario
from simdist.strategies.pipeline.batched import DeferredPipeline

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

#: A small pipeline: 5 layers of width 16 in 2 stages, 4 micro-batches, 6 steps.
SMALL = [
    "workload.model.hidden=[16,16,16,16]",
    "workload.batch_size=32",
    "workload.steps=6",
    "strategy.stages=2",
    "strategy.micro_batches=4",
]


def _report(result) -> tuple[str, str, str, bytes]:
    """What a report is made of, as text and bytes."""
    params = b"".join(np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(result.params))
    summary = json.dumps(result.summary, sort_keys=True, default=str)
    return result.metrics.to_csv(), result.events.to_csv(), summary, params


def _batched_and_alone(monkeypatch, name: str, overrides: list[str], seeds: list[int]):
    """run_batch of ``seeds`` and run of each alone; the sizes of the groups computed."""
    groups: list[int] = []
    execute = DeferredPipeline.execute.__func__

    def counted(cls, members):
        groups.append(len(members))
        return execute(cls, members)

    monkeypatch.setattr(DeferredPipeline, "execute", classmethod(counted))
    scenarios = [load_scenario(SCENARIOS / name, overrides, seed=s) for s in seeds]
    batched = run_batch(scenarios)
    alone = [run(s) for s in scenarios]
    return batched, alone, groups


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("pipeline_gpipe.yaml", ["workload.eval_every=3"]),
        (
            "pipeline_1f1b.yaml",
            [
                "workload.eval_every=0",
                "workload.optimizer.name=adam",
                "workload.optimizer.learning_rate=0.01",
            ],
        ),
        (
            "pipeline_gpipe.yaml",
            ["workload.eval_every=2", "workload.optimizer.name=momentum", "strategy.replicas=2"],
        ),
    ],
    ids=["gpipe-sgd", "1f1b-adam", "gpipe-momentum-2copies"],
)
def test_seeds_computed_together_report_what_each_reports_alone(monkeypatch, name, extra):
    batched, alone, groups = _batched_and_alone(monkeypatch, name, SMALL + extra, [0, 1, 2])
    assert groups == [3]
    for together, single in zip(batched, alone, strict=True):
        assert _report(together) == _report(single)
        assert together.summary["steps"] == 6
        assert "test_loss" in set(together.metrics["metric"])


def test_a_run_alone_and_its_seeds_take_the_same_step(monkeypatch):
    # One numerics path: a run alone is one lane of PipelineTrainer.step, its seeds a lane
    # each, on the stage programs their trainers share.
    from simdist.numerics.stages import PipelineTrainer

    calls = []
    step = PipelineTrainer.step

    def spy(self, states, batches):
        calls.append((len(states), id(self.staged._fns)))
        return step(self, states, batches)

    monkeypatch.setattr(PipelineTrainer, "step", spy)
    overrides = [*SMALL[:2], "workload.steps=2", "strategy.stages=2", "strategy.micro_batches=2"]
    scenarios = [
        load_scenario(SCENARIOS / "pipeline_gpipe.yaml", overrides, seed=s) for s in (0, 1)
    ]
    run(scenarios[0])
    run_batch(scenarios)
    assert [width for width, _ in calls] == [1, 1, 2, 2]
    assert len({programs for _, programs in calls}) == 1


def test_a_seed_that_diverges_stops_where_it_stops_alone(monkeypatch):
    # At this learning rate seed 1 trains on; seeds 2 and 3 reach a non-finite loss at
    # step 4, an evaluation point: each is simulated again alone, stopping there.
    overrides = [
        "workload.model.hidden=[16,16,16]",
        "workload.steps=12",
        "workload.eval_every=4",
        "workload.optimizer.learning_rate=1000",
        "strategy.stages=2",
        "strategy.micro_batches=4",
    ]
    batched, alone, groups = _batched_and_alone(
        monkeypatch, "pipeline_gpipe.yaml", overrides, [1, 2, 3]
    )
    assert groups == [3]
    assert [r.summary["diverged_at_step"] for r in batched] == [None, 4, 4]
    for together, single in zip(batched, alone, strict=True):
        assert _report(together) == _report(single)


def test_pipedream_computes_alone(monkeypatch):
    # pipedream applies an update per micro-batch as the schedule reaches it: not deferred.
    overrides = [*SMALL[:3], "strategy.stages=2", "strategy.micro_batches=2"]
    batched, alone, groups = _batched_and_alone(monkeypatch, "pipedream.yaml", overrides, [0, 1])
    assert groups == []
    for together, single in zip(batched, alone, strict=True):
        assert _report(together) == _report(single)
