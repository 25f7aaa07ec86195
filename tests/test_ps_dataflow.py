"""parameter_server's dataflow replay: against a step-by-step reference, bit for bit where
it must be, and divergence cut where the step-by-step loop stopped."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers import assert_trees_close
from helpers import ps as parameter_server_scenario

from simdist.numerics.chains import CHAIN
from simdist.runtime.costs import measure_costs
from simdist.runtime.engine import cached_workload, run, simulate
from simdist.scenario import scenario_from_dict
from simdist.strategies.base import Replayed
from simdist.strategies.parameter_server import ParameterServers, partition
from simdist.strategies.parameter_server import replay as replay_module
from simdist.strategies.parameter_server.dataflow import Apply, Evaluate
from simdist.strategies.parameter_server.strategy import ParameterServerStrategy


def ps(workers: int = 4, servers: int = 2, steps: int = 40, **strategy) -> dict:
    """tests/test_parameter_server.py's scenario, 2 PS tasks, an evaluation every 7 steps."""
    data = parameter_server_scenario(workers, servers, steps, **strategy)
    data["workload"]["eval_every"] = 7
    return data


def reference(strategy: ParameterServerStrategy) -> tuple[dict, list, object]:
    """The dataflow of ``strategy`` computed one op at a time: one gradient call per
    ticket (unbatched) and one optimizer call per applied shard, as the step-by-step
    loop did. Returns losses by ticket, evaluations in order, the final variables."""
    s, wl = strategy, strategy.workload
    flow = s.dataflow
    servers = ParameterServers(s.shards, s.n_ps, wl)
    store = [
        {0: (servers.values[p], servers.opt_states[p], servers.states[p])} for p in range(s.n_ps)
    ]

    def variables(ids):
        servers.values = [store[p][i][0] for p, i in enumerate(ids)]
        servers.states = [store[p][i][2] for p, i in enumerate(ids)]
        return servers.current()

    grads, losses, evaluations = {}, {}, []
    for op in flow.ops:
        if isinstance(op, Evaluate):
            evaluations.append(wl.evaluate(variables(op.ids)))
            continue
        if op.ticket not in grads:
            ticket = flow.tickets[op.ticket]
            params = servers.assemble([store[p][i][0] for p, i in enumerate(ticket.pulled)])
            x, y = wl.batches.batch(ticket.batch, s.worker_batch)
            loss, g, moments = wl.loss_and_grads(params, x, y, s.worker_batch, with_moments=True)
            losses[op.ticket] = float(loss)
            grads[op.ticket] = (g, moments)
        g, moments = grads[op.ticket]
        values, opt_state, state = store[op.ps][op.source]
        values, opt_state = wl.apply(values, opt_state, servers.split(g, op.ps), op.scale)
        state = wl.update_state(state, servers.split_moments(moments, op.ps))
        store[op.ps][op.target] = (values, opt_state, state)
    return losses, evaluations, variables(s.servers.current())


def replayed(data: dict, monkeypatch) -> tuple:
    """Run ``data``; return the result, its strategy and what its replay computed."""
    seen: dict = {}
    original_replay, original_run = ParameterServerStrategy.replay, replay_module.Replay.run

    def replay(self):
        seen["strategy"] = self
        original_replay(self)

    def replay_run(self, flow, final_ids):
        seen["outcome"] = original_run(self, flow, final_ids)
        seen["calls"] = self.calls
        return seen["outcome"]

    monkeypatch.setattr(ParameterServerStrategy, "replay", replay)
    monkeypatch.setattr(replay_module.Replay, "run", replay_run)
    result = run(scenario_from_dict(data))
    return result, seen["strategy"], seen["outcome"], seen["calls"]


SCENARIOS = {
    "async-sgd": ps(),
    "ssp-inverse-momentum-row-shards": {
        **ps(workers=5, servers=3, staleness_bound=1, lr_staleness="inverse"),
        "strategy": {
            "kind": "parameter_server",
            "staleness_bound": 1,
            "lr_staleness": "inverse",
            "partitioner": "min_size",
            "min_shard_bytes": 512,
        },
    },
    "adam-failures-restores": {
        **ps(workers=3, servers=2, steps=50),
        "checkpoint": {"every_steps": 10, "storage_bandwidth": "1GB/s"},
        "faults": {
            "failures": [
                {"target": "ps 1", "at": "4ms", "restart_after": "1ms"},
                {"target": "worker 0", "at": "2ms", "restart_after": "1ms"},
            ]
        },
    },
    "twelve-workers-overlap": ps(workers=12, servers=2, steps=60, overlap=True),
}
SCENARIOS["adam-failures-restores"]["workload"]["optimizer"] = {
    "name": "adam",
    "learning_rate": 0.01,
}
SCENARIOS["ssp-inverse-momentum-row-shards"]["workload"]["optimizer"] = {
    "name": "momentum",
    "learning_rate": 0.05,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_replay_equals_a_step_by_step_reference(name, monkeypatch):
    result, strategy, outcome, _ = replayed(SCENARIOS[name], monkeypatch)
    losses, evaluations, final = reference(strategy)
    assert sorted(outcome.losses) == sorted(losses)
    np.testing.assert_allclose(
        [outcome.losses[t] for t in sorted(losses)], [losses[t] for t in sorted(losses)], rtol=1e-5
    )
    assert len(outcome.evaluations) == len(evaluations) > 0
    for mine, theirs in zip(outcome.evaluations, evaluations, strict=True):
        assert mine.keys() == theirs.keys()
        np.testing.assert_allclose(list(mine.values()), list(theirs.values()), rtol=1e-5)
    assert_trees_close(result.params, final, atol=1e-5)
    # what the run reports is what the replay computed
    updates = result.tables["updates"]
    assert np.isfinite(updates["loss"]).all()
    assert len(updates) == strategy.dataflow.applies


@pytest.mark.parametrize(
    "name", ["async-sgd", "ssp-inverse-momentum-row-shards", "twelve-workers-overlap"]
)
def test_a_replay_in_segments_during_the_run_equals_one_after_it(name, monkeypatch):
    """The replay advances every few applied shards while the simulation runs (the device
    computes meanwhile); planned and dispatched in one go after the run instead, every
    table and the final parameters are the same, bit for bit."""
    from simdist.strategies.parameter_server import strategy as strategy_module

    results = {}
    for segment in (3, 10**9):
        monkeypatch.setattr(strategy_module, "SEGMENT", segment)
        results[segment] = run(scenario_from_dict(SCENARIOS[name]))
    a, b = results[3], results[10**9]
    assert a.metrics.equals(b.metrics)
    assert a.events.equals(b.events)
    pd.testing.assert_frame_equal(a.tables["updates"], b.tables["updates"])
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_wide_run_fills_its_gradient_calls(monkeypatch):
    """24 workers: waves hold ~24 gradients, so every 8-wide call is full (the step-by-step
    loop evaluated what was pending at each first arrival: about 4 per call)."""
    result, _, _, calls = replayed(ps(workers=24, servers=2, steps=96), monkeypatch)
    assert result.summary["applied_updates"] == 96
    assert calls == 96 // 8


@pytest.mark.parametrize(
    "model", [{"name": "mlp", "hidden": [16]}, {"name": "softmax"}, {"name": "cnn"}]
)
def test_gradient_lanes_do_not_depend_on_their_neighbours_or_the_stacking(model):
    """Why the replay may group gradients differently from the step-by-step loop: a lane
    of the 8-wide program gives the same bits whatever the other lanes hold, and the
    program given stacked versions equals the one that stacks them itself."""
    data = ps()
    data["workload"]["model"] = model
    wl = cached_workload(scenario_from_dict(data))
    leaves, treedef = jax.tree_util.tree_flatten(wl.params)
    rng = np.random.default_rng(0)
    versions = [
        jax.tree_util.tree_unflatten(
            treedef, [np.asarray(a) + rng.normal(0, 0.05, a.shape).astype(a.dtype) for a in leaves]
        )
        for _ in range(12)
    ]
    batches = [wl.batches.batch(i, 8) for i in range(12)]

    def inputs(order):
        return np.stack([batches[i][0] for i in order]), np.stack([batches[i][1] for i in order])

    order_a, order_b = [0, 1, 2, 3, 4, 5, 6, 7], [9, 3, 11, 0, 0, 0, 0, 10]
    a = jax.device_get(wl.stacked_fn(8)(tuple(versions[i] for i in order_a), *inputs(order_a)))
    params = jax.tree.map(lambda *x: np.stack(x), *[versions[i] for i in order_b])
    b = jax.device_get(jax.jit(wl.stacked_vmap(8))(params, *inputs(order_b)))
    for i, j in ((3, 1), (0, 3)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(x[i], y[j])


@pytest.mark.parametrize(
    ("optimizer", "schedule", "fused"),
    [
        ("sgd", None, True),
        ("momentum", None, True),
        ("adam", None, False),
        ("sgd", "cosine", False),
    ],
)
def test_a_chain_of_updates_equals_one_call_per_update(optimizer, schedule, fused):
    """The replay's update chain (a scan over banks, or one call per update where a scan
    is not exact) against one ``Workload.apply`` per update, bit for bit, on a PS holding
    whole variables and row shards, with learning-rate scales and a padded chain."""
    data = ps(servers=2, partitioner="min_size", min_shard_bytes=256)
    data["workload"]["optimizer"] = {"name": optimizer, "learning_rate": 0.01}
    if schedule is not None:
        data["workload"]["optimizer"]["schedule"] = {"kind": schedule}
    scenario = scenario_from_dict(data)
    wl = cached_workload(scenario)
    assert wl.scan_updates is fused
    costs = measure_costs(scenario, wl)
    shards = partition(costs.param_leaves, 2, "min_size", 256)
    servers = ParameterServers(shards, 2, wl)
    assert any(rows is not None for _, _, rows in servers.ps_slices[1])  # a row shard
    replay = replay_module.Replay(servers, wl, 8)
    programs = replay.programs()
    rng = np.random.default_rng(1)
    leaves = jax.tree_util.tree_leaves(wl.params)
    grads = [[rng.normal(size=a.shape).astype(a.dtype) for a in leaves] for _ in range(CHAIN)]
    scales = [1.0, 0.5, 1 / 3, 1.0, 0.25, 1 / 7, 1.0]  # 7 updates: one padded step
    flow_ops = [replay_module.Apply(1, t, scale, t, t + 1) for t, scale in enumerate(scales)]
    banks = programs.banks(servers, [16, 16], 16)  # slots per PS, gradient slots
    banks["grads"] = [
        b.at[jnp.arange(CHAIN)].set(np.stack([g[i] for g in grads]))
        for i, b in enumerate(banks["grads"])
    ]
    chain = replay_module.Chain(1, 0, flow_ops, list(range(7)), list(range(1, 8)))
    programs.chain(banks, chain, scratch=15)
    values, opt = servers.values[1], servers.opt_states[1]
    for t, scale in enumerate(scales):
        values, opt = wl.apply(values, opt, servers.split(grads[t], 1), scale)
        for key, want in values.items():
            np.testing.assert_array_equal(banks["values"][1][key][t + 1], want)
        for bank, want in zip(jax.tree.leaves(banks["opts"][1]), jax.tree.leaves(opt), strict=True):
            np.testing.assert_array_equal(bank[t + 1], want)


@pytest.mark.parametrize("bound", [None, 1])
def test_a_diverged_run_stops_at_the_reference_s_first_non_finite_loss(bound, monkeypatch):
    """lr = 1e30: the first pass records the whole budget; the reference computes its
    dataflow op by op; the run must stop at the first applied shard whose gradient's loss
    is not finite, with the second pass's dataflow the first's prefix."""
    data = ps(workers=4, servers=2, steps=80, staleness_bound=bound)
    data["cluster"]["network"] = {"duplex": "half", "sharing": "fifo"}  # d8b723f's network
    data["workload"]["optimizer"]["learning_rate"] = 1e30
    data["workload"]["eval_every"] = 3
    data["checkpoint"] = {"every_steps": 4, "storage_bandwidth": "1GB/s"}
    passes = []
    original = ParameterServerStrategy.replay

    def replay(self):
        passes.append(self)
        original(self)

    monkeypatch.setattr(ParameterServerStrategy, "replay", replay)
    with np.errstate(all="ignore"):
        result = run(scenario_from_dict(data))
        first, second = passes
        losses, _, _ = reference(first)
    applies = [op for op in first.dataflow.ops if isinstance(op, Apply)]
    cut = next(k for k, op in enumerate(applies) if not np.isfinite(losses[op.ticket]))
    assert first.rerun_with.cut == cut == second.dataflow.applies
    assert len(result.tables["updates"]) == cut
    assert np.isfinite(result.tables["updates"]["loss"]).all()
    assert second.dataflow.ops == first.dataflow.ops[: len(second.dataflow.ops)]
    s = result.summary
    assert s["diverged"] is True and s["diverged_at_step"] == s["steps"]


def test_a_run_stopped_at_a_shard_is_the_prefix_of_the_whole_run():
    """The second pass of a diverged run (``Replayed``) stops at the shard it is given:
    on a run that does not diverge, a stop at shard 23 gives the whole run's first 23
    update rows and the beginning of its metrics."""
    scenario = scenario_from_dict(ps(workers=4, servers=2, steps=40))
    whole = run(scenario)
    workload = cached_workload(scenario)
    part = simulate(scenario, measure_costs(scenario, workload), Replayed(workload, 23))
    pd.testing.assert_frame_equal(part.tables["updates"], whole.tables["updates"].iloc[:23])
    pd.testing.assert_frame_equal(part.metrics, whole.metrics.iloc[: len(part.metrics)])
    assert part.summary["diverged_at_step"] == part.summary["steps"] < 40


# Pinned from the step-by-step loop (commit d8b723f) on its network model: the replay
# finds the divergence afterwards and the run is simulated again to stop there, with the
# same step, end time and table sizes. A change of the network model (timing) changes
# these figures: re-pin them from a run of the step-by-step loop on the same model. Since
# each PS applies a gradient on its host's clock, the run ends one update later
# (0.318 µs: the PS's share of the mlp's optimizer step at the cpu profile's bandwidth)
# and records 9 apply rows (the 8 applied updates and the one cut by the divergence).
@pytest.mark.parametrize("bound", [None, 1])
def test_divergence_is_cut_where_the_step_by_step_loop_stopped(bound):
    data = ps(workers=4, servers=2, steps=80, staleness_bound=bound)
    data["cluster"]["network"] = {"duplex": "half", "sharing": "fifo"}  # d8b723f's network
    data["workload"]["optimizer"]["learning_rate"] = 1e30
    data["workload"]["eval_every"] = 3
    data["checkpoint"] = {"every_steps": 4, "storage_bandwidth": "1GB/s"}
    result = run(scenario_from_dict(data))
    s = result.summary
    assert s["diverged"] is True
    assert s["diverged_at_step"] == s["steps"] == 5
    assert s["simulated_time_s"] == 0.002099678152866242
    assert (len(result.tables["updates"]), len(result.metrics), len(result.events)) == (8, 18, 58)
    assert (result.events["kind"] == "apply").sum() == 9
    assert np.isfinite(result.tables["updates"]["loss"]).all()
    assert result.metrics.query("metric == 'test_accuracy'")["step"].tolist() == [3]
