"""The zoo's resnet and BatchNormalization as in TensorFlow: per-replica statistics,
sync_batch_norm, moving statistics kept and evaluated with, and living on the PS tasks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close, tiny

from simdist.errors import ScenarioError, SimdistError
from simdist.numerics import Workload, shard
from simdist.numerics.deferred import DeferredGradients
from simdist.numerics.models import (
    MOMENTS,
    STATE,
    BatchNorm,
    make_model,
    update_moving_stats,
)
from simdist.numerics.param_files import tree_paths
from simdist.runtime.engine import build_workload, cached_workload, run
from simdist.scenario import load_scenario, scenario_from_dict
from simdist.scenario.load import dump_scenario
from simdist.strategies.parameter_server import ParameterServers, partition
from simdist.strategies.parameter_server.partition import batch_norm_state_leaves

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
RESNET = {"name": "resnet", "width": 8, "batch_norm_momentum": 0.9}
ADAM = {"name": "adam", "learning_rate": 0.01}


def resnet(steps: int = 5, sync: bool = False, **changes: object) -> dict:
    """tiny with the small resnet, Adam, ``steps`` steps, evaluation only at the end."""
    return tiny(
        **{
            "workload.model": {**RESNET, "sync_batch_norm": sync},
            "workload.optimizer": ADAM,
            "workload.steps": steps,
            "workload.eval_every": 0,
            **changes,
        }
    )


def one_device(steps: int = 5, **changes: object) -> dict:
    return resnet(steps, **{"workload.batch_size": 32, **changes})


def mirrored(steps: int = 5, sync: bool = False, **changes: object) -> dict:
    return resnet(
        steps, sync, **{"strategy.kind": "mirrored", "cluster.devices_per_host": 4, **changes}
    )


# The Workloads of the engine's runs below (cached per workload section), so that their
# jitted functions compile once for the direct calls and the runs alike.
@pytest.fixture(scope="module")
def w() -> Workload:
    return cached_workload(scenario_from_dict(one_device()))


@pytest.fixture(scope="module")
def w_sync() -> Workload:
    return cached_workload(scenario_from_dict(mirrored(sync=True)))


def leaves_of(tree: object) -> list[np.ndarray]:
    return [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(tree)]


def max_abs_diff(a: object, b: object) -> float:
    return max(
        float(np.max(np.abs(x - y))) for x, y in zip(leaves_of(a), leaves_of(b), strict=True)
    )


def norm(tree: object) -> float:
    return float(np.sqrt(sum(np.sum(a * a) for a in leaves_of(tree))))


# -- BatchNormalization --------------------------------------------------------


def test_batch_norm_uses_batch_moments_in_training_and_moving_statistics_in_inference():
    x = jax.random.normal(jax.random.PRNGKey(0), (16, 4, 4, 3)) * 3.0 + 2.0
    bn = BatchNorm()
    variables = bn.init(jax.random.PRNGKey(1), x)
    # Keras' variable names and initial values
    assert tree_paths(variables) == [
        "batch_stats/moving_mean",
        "batch_stats/moving_variance",
        "params/beta",
        "params/gamma",
    ]
    y, written = bn.apply({"params": variables["params"]}, x, train=True, mutable=[MOMENTS])
    mean, var = np.asarray(x).mean((0, 1, 2)), np.asarray(x).var((0, 1, 2))
    moments = written[MOMENTS]
    np.testing.assert_allclose(moments["moving_mean"], mean, rtol=1e-5)
    np.testing.assert_allclose(moments["moving_variance"], var, rtol=1e-4)
    expected = (np.asarray(x) - mean) / np.sqrt(var + 1e-3)  # gamma 1, beta 0, Keras' epsilon
    np.testing.assert_allclose(y, expected, atol=1e-4)
    # inference: the moving statistics (initially 0 and 1), not the batch's
    np.testing.assert_allclose(bn.apply(variables, x), np.asarray(x) / np.sqrt(1 + 1e-3), atol=1e-5)
    stats = {"moving_mean": jnp.full(3, 2.0), "moving_variance": jnp.full(3, 9.0)}
    out = bn.apply({**variables, STATE: stats}, x)
    np.testing.assert_allclose(out, (np.asarray(x) - 2.0) / np.sqrt(9.0 + 1e-3), atol=1e-5)


def test_moving_statistics_follow_tf_assign_moving_average():
    state = {"m": jnp.array([1.0, 0.0])}
    out = update_moving_stats(state, {"m": jnp.array([3.0, -2.0])}, momentum=0.9)
    # moving − (moving − batch) · (1 − momentum)
    np.testing.assert_allclose(out["m"], [1.2, -0.2], rtol=1e-6)


# -- the model -----------------------------------------------------------------


def test_resnet_stem_stages_shortcuts_and_pooling_rule():
    spec = SimpleNamespace(name="resnet", blocks=[2, 1], width=8, batch_norm_momentum=0.99)
    small = make_model(spec, 10, (8, 8, 1))
    large = make_model(spec, 10, (32, 32, 3))
    assert not small.stem_pool and large.stem_pool  # the 3x3/2 max pool only from 32x32 up
    # shapes only: abstract evaluation, nothing is computed
    variables = jax.eval_shape(small.init, jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))
    params = variables["params"]
    assert params["stem_conv"]["kernel"].shape == (7, 7, 1, 8)
    # stage 1 keeps the shape (identity shortcuts); stage 2 doubles the width and halves the
    # map (projection shortcut: 1x1 conv with stride 2, then BN)
    assert "shortcut_conv" not in params["stage1_block1"]
    assert "shortcut_conv" not in params["stage1_block2"]
    assert params["stage2_block1"]["shortcut_conv"]["kernel"].shape == (1, 1, 8, 16)
    assert params["head"]["kernel"].shape == (16, 10)  # after global average pooling
    assert (
        len(jax.tree_util.tree_leaves(variables[STATE])) == 2 * 8
    )  # stem + 2 + 2 + 3 BatchNorm layers
    big = jax.eval_shape(large.init, jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))
    out = jax.eval_shape(large.apply, big, jnp.ones((2, 32, 32, 3)))
    assert out.shape == (2, 10)
    with pytest.raises(SimdistError, match="model resnet needs image inputs"):
        make_model(spec, 1, (16,))


def test_resnet_options_belong_to_the_model_spec():
    scenario = scenario_from_dict(tiny(**{"workload.model": "resnet"}))
    model = scenario.workload.model
    assert (model.blocks, model.width, model.batch_norm_momentum, model.sync_batch_norm) == (
        [1, 1],
        16,
        0.99,
        False,
    )
    assert "sync_batch_norm: false" in dump_scenario(scenario)
    mlp = dump_scenario(scenario_from_dict(tiny()))
    assert "blocks" not in mlp and "sync_batch_norm" not in mlp  # other models' files unchanged
    with pytest.raises(ScenarioError, match=r"sync_batch_norm.*resnet only"):
        scenario_from_dict(tiny(**{"workload.model": {"name": "mlp", "sync_batch_norm": True}}))


def test_gradients_train_the_parameters_and_the_state_is_kept_apart(w: Workload):
    assert set(w.params) == {"params"} and set(w.model_state) == {STATE} and w.stateful
    assert not any(path.startswith(STATE) for path, _ in w.param_leaves)
    x, y = w.batches.batch(0, 32)
    loss, grads, moments = w.loss_and_grads(w.params, x, y, 32, with_moments=True)
    assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(w.params)
    assert jax.tree_util.tree_structure(moments) == jax.tree_util.tree_structure(w.model_state)
    assert np.isfinite(loss)
    # the stem's batch mean is the mean of the stem conv's output: not the initial 0
    assert float(np.abs(moments[STATE]["stem_bn"]["moving_mean"]).max()) > 0


# -- replicas: their own statistics, or shared ones -----------------------------


def test_each_replica_normalises_with_its_own_batch(w: Workload):
    n, b = 4, 8
    x, y = w.batches.batch(0, n * b)
    loss, grads, moments = w.replica_grads(
        w.params, shard(x, n), shard(y, n), n * b, "batched", with_moments=True
    )
    parts = [
        w.loss_and_grads(
            w.params, x[i * b : (i + 1) * b], y[i * b : (i + 1) * b], n * b, with_moments=True
        )
        for i in range(n)
    ]
    np.testing.assert_allclose(loss, sum(p[0] for p in parts), rtol=1e-5)
    assert_trees_close(grads, jax.tree.map(lambda *g: sum(g), *(p[1] for p in parts)), atol=1e-6)
    # the moving statistics follow the replicas' mean moments (TF: ON_READ, MEAN)
    assert_trees_close(
        moments, jax.tree.map(lambda *m: sum(m) / n, *(p[2] for p in parts)), atol=1e-6
    )
    # ... which are not the global batch's
    _, whole, whole_moments = w.loss_and_grads(w.params, x, y, n * b, with_moments=True)
    assert max_abs_diff(grads, whole) > 1e-3
    assert max_abs_diff(moments, whole_moments) > 1e-2


def _train(w: Workload, n: int, b: int, steps: int, execution: str | None) -> object:
    params, opt_state, state = w.params, w.init_opt_state(w.params), w.model_state
    for step in range(steps):
        x, y = w.batches.batch(step, n * b)
        if execution is None:
            _, grads, moments = w.loss_and_grads(params, x, y, n * b, with_moments=True)
        else:
            xs, ys = shard(x, n), shard(y, n)
            _, grads, moments = w.replica_grads(params, xs, ys, n * b, execution, with_moments=True)
        params, opt_state = w.apply(params, opt_state, grads)
        state = w.update_state(state, moments)
    return w.variables(params, state)


@pytest.mark.parametrize("execution", ["batched", "devices"])
def test_sync_batch_norm_replicas_equal_one_device_with_the_global_batch(
    w: Workload, w_sync: Workload, execution: str
):
    one = _train(w, 4, 8, 5, None)
    assert_trees_close(_train(w_sync, 4, 8, 5, execution), one, atol=1e-5)


def test_deferred_gradients_split_a_worker_batch_into_its_replicas(w: Workload):
    x, y = w.batches.batch(3, 16)
    dg = DeferredGradients(w, global_batch=16, bucket=2, replicas=2, with_moments=True)
    loss, grads, moments = dg.result(dg.submit(w.params, x, y))
    expected = w.replica_grads(w.params, shard(x, 2), shard(y, 2), 16, with_moments=True)
    assert_trees_close((loss, grads, moments), expected, atol=1e-6)


# -- strategies ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_device_run():
    return run(scenario_from_dict(one_device()))


def test_mirrored_without_sync_batch_norm_differs_from_one_device_by_this_much(one_device_run):
    """4 replicas × 8 examples against one device × 32, 5 Adam steps (lr 0.01).

    Each replica's batch statistics come from 8 examples instead of 32, which
    changes every gradient: after 5 steps the parameters are 0.093 apart at most
    and the difference is 58 % of the distance one_device has moved them; the
    moving statistics are 0.104 apart at most.
    """
    mirror = run(scenario_from_dict(mirrored()))
    start = cached_workload(scenario_from_dict(one_device()))
    initial = start.variables(start.params, start.model_state)
    one, mir = one_device_run.params, mirror.params
    assert max_abs_diff(mir["params"], one["params"]) == pytest.approx(0.0934, rel=0.02)
    assert max_abs_diff(mir[STATE], one[STATE]) == pytest.approx(0.104, rel=0.02)
    moved = jax.tree.map(
        lambda a, b: np.asarray(a) - np.asarray(b), one["params"], initial["params"]
    )
    apart = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), mir["params"], one["params"])
    assert norm(apart) / norm(moved) == pytest.approx(0.58, abs=0.02)
    # the first step's loss already differs: same parameters, other statistics
    first = [
        r.metrics.query("metric == 'train_loss'")["value"].iloc[0] for r in (one_device_run, mirror)
    ]
    assert first[0] - first[1] == pytest.approx(0.0113, abs=5e-4)


@pytest.mark.parametrize(
    "changes",
    [
        {"strategy.kind": "mirrored", "cluster.devices_per_host": 4},
        {"strategy": {"kind": "mirrored", "execution": "devices"}, "cluster.devices_per_host": 4},
        {
            "strategy.kind": "multi_worker_mirrored",
            "cluster.hosts": 2,
            "cluster.devices_per_host": 2,
        },
        {"strategy.kind": "central_storage", "cluster.devices_per_host": 4},
        {"strategy": {"kind": "tpu", "topology": [2, 2]}},
    ],
    ids=["mirrored", "mirrored-devices", "mwm", "central_storage", "tpu"],
)
def test_sync_batch_norm_makes_every_sync_strategy_equal_one_device(changes, one_device_run):
    result = run(scenario_from_dict(resnet(5, sync=True, **changes)))
    assert result.scenario.global_batch == 32
    assert_trees_close(result.params, one_device_run.params, atol=1e-5)


def test_parameter_server_sync_one_worker_equals_one_device(one_device_run):
    data = resnet(
        5,
        **{
            "strategy": {"kind": "parameter_server", "mode": "sync"},
            "cluster.hosts": 1,
            "cluster.ps": 2,
            "workload.batch_size": 32,
        },
    )
    result = run(scenario_from_dict(data))
    assert_trees_close(result.params, one_device_run.params, atol=1e-5)


def _param_leaves(w: Workload) -> list[tuple[str, tuple[int, ...], int]]:
    leaves = jax.tree_util.tree_leaves(w.params)
    return [(p, leaf.shape, n) for (p, n), leaf in zip(w.param_leaves, leaves, strict=True)]


def test_moving_statistics_live_on_the_parameter_servers(w: Workload):
    param_leaves = _param_leaves(w)
    state_leaves = batch_norm_state_leaves(param_leaves)
    # named from the parameters alone (timing-only runs), they are the model state's leaves
    assert [p for p, *_ in state_leaves] == tree_paths(w.model_state)
    shapes = [leaf.shape for leaf in jax.tree_util.tree_leaves(w.model_state)]
    assert [s for _, s, _ in state_leaves] == shapes
    shards = partition([*param_leaves, *state_leaves], 2, "round_robin")
    servers = ParameterServers(shards, 2, w)
    assert all(servers.states)  # both PS tasks hold some of the statistics
    assert_trees_close(servers.current(), w.variables(w.params, w.model_state), atol=0)
    # a worker's push: its gradient shard and its batch moments, applied where they live
    x, y = w.batches.batch(0, 16)
    _, grads, moments = w.loss_and_grads(w.params, x, y, 16, with_moments=True)
    for ps in (0, 1):
        servers.apply(ps, servers.split(grads, ps), moments=servers.split_moments(moments, ps))
    expected = w.update_state(w.model_state, moments)
    assert_trees_close(servers.current()[STATE], expected[STATE], atol=1e-7)
    # a second push folds into the value the PS holds now, not the one pulled before
    saved = servers.state()
    for ps in (0, 1):
        servers.apply(ps, servers.split(grads, ps), moments=servers.split_moments(moments, ps))
    twice = w.update_state(expected, moments)
    assert_trees_close(servers.current()[STATE], twice[STATE], atol=1e-7)
    servers.restore(saved)
    assert_trees_close(servers.current()[STATE], expected[STATE], atol=0)


def test_parameter_server_pulls_and_pushes_the_statistics_with_the_variables():
    data = resnet(5, **{"strategy.kind": "parameter_server", "cluster.hosts": 2, "cluster.ps": 2})
    timing = run(scenario_from_dict({**data, "numerics": False}))
    w = cached_workload(scenario_from_dict(data))
    state_nbytes = sum(n for *_, n in batch_norm_state_leaves(_param_leaves(w)))
    assert state_nbytes == sum(a.nbytes for a in jax.tree_util.tree_leaves(w.model_state))
    assert sum(timing.summary["bytes_per_ps"]) == w.param_bytes + state_nbytes
    numeric = run(scenario_from_dict(data))
    assert numeric.summary["simulated_time_s"] == timing.summary["simulated_time_s"]
    assert max_abs_diff(numeric.params[STATE], w.model_state[STATE]) > 0.01  # updated on the PS


@pytest.mark.parametrize("ps_kind", ["async", "sync"])
def test_parameter_server_trains_resnet(ps_kind):
    data = resnet(
        60,
        **{
            "strategy": {"kind": "parameter_server", "mode": ps_kind},
            "cluster.hosts": 2,
            "cluster.devices_per_host": 2,
            "cluster.ps": 2,
        },
    )
    result = run(scenario_from_dict(data))
    assert result.metrics.query("metric == 'test_accuracy'")["value"].iloc[-1] > 0.75


# -- evaluation and files ----------------------------------------------------------------


def test_evaluation_uses_the_moving_statistics_and_init_from_restores_them(tmp_path):
    from simdist.numerics import save_params

    result = run(scenario_from_dict(mirrored(60)))  # evaluates at the end
    w = cached_workload(result.scenario)
    accuracy = result.metrics.query("metric == 'test_accuracy'")["value"].iloc[-1]
    assert w.evaluate(result.params)["test_accuracy"] == accuracy
    stale = {**result.params, STATE: w.model_state[STATE]}  # the initial 0 / 1 statistics
    assert w.evaluate(stale)["test_accuracy"] < accuracy - 0.1
    path = tmp_path / "params.npz"
    save_params(path, result.params)
    restored = build_workload(scenario_from_dict(mirrored(1, **{"workload.init_from": str(path)})))
    assert_trees_close(restored.model_state, result.params[STATE], atol=0)
    assert_trees_close(restored.params, {"params": result.params["params"]}, atol=0)


def test_the_scenario_trains_a_resnet_on_digits_with_adam():
    scenario = load_scenario(SCENARIOS / "resnet_mirrored.yaml")
    assert scenario.workload.model.name == "resnet" and scenario.workload.optimizer.name == "adam"
    result = run(scenario)
    assert result.metrics.query("metric == 'test_accuracy'")["value"].iloc[-1] > 0.95
