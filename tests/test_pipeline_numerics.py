"""Pipeline numerics: the zoo cut into stages trains as one_device; pipedream's versions.

Small on purpose (the MLP on digits, a few dozen steps): each model compiles its stage
functions once, a few seconds each.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close, tiny

from simdist.numerics.stages import LayerSequence, PipeDreamTrainer, PipelineTrainer
from simdist.runtime.engine import build_workload
from simdist.runtime.engine import run as engine_run
from simdist.scenario import scenario_from_dict
from simdist.strategies.pipeline.plan import stage_ops
from simdist.strategies.sync import SyncTrainer

MLP = {"name": "mlp", "hidden": [16, 16]}  # 3 layers: Dense_0, Dense_1, Dense_2
STEPS = 50


def pipeline_scenario(**strategy):
    devices = strategy.get("stages", 2) * strategy.get("replicas", 1)
    return scenario_from_dict(
        tiny(
            **{
                "workload.model": MLP,
                "workload.steps": STEPS,
                "workload.batch_size": 16,
                "workload.eval_every": 0,
                "cluster.devices_per_host": devices,
                "strategy": {"kind": "pipeline", **strategy},
            }
        )
    )


def one_device(global_batch: int):
    data = tiny(
        **{
            "workload.model": MLP,
            "workload.steps": STEPS,
            "workload.batch_size": global_batch,
            "workload.eval_every": 0,
        }
    )
    return engine_run(scenario_from_dict(data))


@pytest.mark.parametrize(
    "strategy, global_batch",
    [
        ({"stages": 3, "micro_batches": 4, "schedule": "gpipe"}, 16),
        ({"stages": 2, "micro_batches": 2, "schedule": "1f1b", "replicas": 2}, 32),
    ],
)
def test_gpipe_and_1f1b_train_exactly_as_one_device(strategy, global_batch):
    pipe = engine_run(pipeline_scenario(**strategy))
    base = one_device(global_batch)
    assert pipe.summary["steps"] == STEPS and pipe.summary["global_batch"] == global_batch
    assert_trees_close(pipe.params, base.params, atol=1e-6)
    np.testing.assert_allclose(
        pipe.metrics[pipe.metrics.metric == "train_loss"]["value"].to_numpy(),
        base.metrics[base.metrics.metric == "train_loss"]["value"].to_numpy(),
        atol=1e-6,
    )


@pytest.mark.parametrize("model", [{"name": "cnn"}, {"name": "resnet"}])
def test_cnn_and_resnet_split_into_layers_compute_the_model(model):
    scenario = scenario_from_dict(tiny(**{"workload.model": model, "workload.batch_size": 8}))
    w = build_workload(scenario)
    seq = LayerSequence(w.model, w.dataset.input_shape)
    x = jnp.asarray(w.batches.batch(0, 8)[0])
    variables = w.variables(w.params, w.model_state)
    n = len(seq)
    cuts = [0, 1, n - 1, n] if n > 2 else [0, 1, n]
    a = x
    for first, stop in itertools.pairwise(cuts):
        a, _ = seq.apply(variables, a, first, stop)
    if seq.train:  # training mode: batch statistics, as the gradient functions use
        whole = w.model.apply(variables, x, train=True, mutable=["batch_moments"])[0]
    else:
        whole = w.model.apply(variables, x)
    np.testing.assert_allclose(np.asarray(a), np.asarray(whole), atol=1e-6, rtol=0)
    # Staged gradients with one micro-batch: one_device's step.
    counts = [1, n - 2, 1]
    pipe, sync = PipelineTrainer(w, counts, 1, 1, 8), SyncTrainer(w, 1, 8, "batched")
    state = sync.init()
    a_state, a_loss = pipe.update(state, pipe.batch(0))
    b_state, b_loss = sync.update(state, sync.batch(0))
    assert abs(a_loss - b_loss) < 1e-6
    assert_trees_close(a_state, b_state, atol=1e-6)


def test_pipedream_weight_versions_and_updates_by_hand():
    """2 stages, 2 micro-batches per step, 2 steps, plain SGD.

    Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3: the forwards of micro-batches 0..3 use its
    versions 0, 0, 1, 2 and the updates are 0, 1, 1, 1 versions stale. Stage 1 runs
    F0 B0 F1 B1 ...: versions 0..3, never stale. Each update is the gradient of the whole
    model at the (stage 0, stage 1) versions the micro-batch's forward used.
    """
    scenario = scenario_from_dict(
        tiny(**{"workload.model": {"name": "mlp", "hidden": [8]}, "workload.batch_size": 8})
    )
    w = build_workload(scenario)
    trainer = PipeDreamTrainer(w, [1, 1], micro_batches=2, batch=8)
    trainer.run(stage_ops("pipedream", 2, 4))
    rows = trainer.staleness()
    stage0, stage1 = rows[rows[:, 0] == 0], rows[rows[:, 0] == 1]
    assert stage0[:, 1].tolist() == [0, 1, 2, 3] and stage0[:, 2].tolist() == [0, 0, 1, 2]
    assert stage0[:, 4].tolist() == [0, 1, 1, 1]
    assert stage1[:, 2].tolist() == [0, 1, 2, 3] and stage1[:, 4].tolist() == [0, 0, 0, 0]
    assert trainer.versions == [4, 4]

    # By hand: versions of each stage, rebuilt with full-model gradients.
    lr = 0.1
    staged = trainer.staged
    versions = [[staged.split(w.params)[0]], [staged.split(w.params)[1]]]
    used = {0: [0, 0, 1, 2], 1: [0, 1, 2, 3]}
    for j in range(4):
        x, y = trainer.micro_batch(j)
        params = staged.merge([versions[0][used[0][j]], versions[1][used[1][j]]])
        _, grads = w.loss_and_grads(params, x, y, 4)
        g0, g1 = staged.split(grads)
        for s, g in ((0, g0), (1, g1)):
            new = jax.tree.map(lambda p, d: p - lr * d, versions[s][-1], g)
            versions[s].append(new)
    expected = staged.merge([versions[0][-1], versions[1][-1]])
    assert_trees_close(trainer.current, expected, atol=1e-6)


def test_pipedream_strategy_records_the_same_staleness_it_trains_with():
    result = engine_run(pipeline_scenario(stages=3, micro_batches=2, schedule="pipedream"))
    stale = result.summary["staleness_per_stage"]
    assert [x["max"] for x in stale] == [2, 1, 0]
    assert [x["updates"] for x in stale] == [2 * STEPS] * 3
    assert result.summary["final_train_loss"] < 2.3
