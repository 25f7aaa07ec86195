"""local_sgd (local SGD / DiLoCo): sync_every 1 ≡ synchronous data parallelism, H > 1 ≡ a
hand-written reference loop, the exact time and bytes of a sync period, bad input."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from helpers import assert_trees_close, tiny

from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.runtime.engine import build_workload, run
from simdist.scenario import scenario_from_dict

NET_ALPHA, NET_B = 10e-6, 1e9
NETWORK = {"bandwidth": "1GB/s", "latency": "10us"}
SGD = {"name": "sgd", "learning_rate": 0.1}
MOMENTUM = {"name": "momentum", "learning_rate": 0.1, "momentum": 0.9}
ADAM = {"name": "adam", "learning_rate": 0.01}
DILOCO = {"name": "sgd", "learning_rate": 0.7, "momentum": 0.9, "nesterov": True}
PARAM_NBYTES = 4840  # tiny's mlp: (64·16 + 16 + 16·10 + 10) float32


def local(strategy: dict, hosts: int = 2, devices: int = 2, **changes: object) -> dict:
    """tiny on ``hosts`` × ``devices`` over a 1 GB/s, 10 µs network with ``strategy``."""
    return tiny(
        **{
            "strategy": strategy,
            "cluster.hosts": hosts,
            "cluster.devices_per_host": devices,
            "cluster.links.network": NETWORK,
            **changes,
        }
    )


# ------------------------------------------------------------------ numerics


@pytest.mark.parametrize("optimizer", [SGD, MOMENTUM], ids=["sgd", "momentum"])
@pytest.mark.parametrize(
    "hosts, devices, sync", [(2, 2, "multi_worker_mirrored"), (1, 4, "mirrored")]
)
def test_sync_every_1_with_outer_sgd_1_is_synchronous_data_parallelism(
    optimizer, hosts, devices, sync
):
    """Not bit-exact, within 1e-6: local SGD averages the replicas' updates, synchronous
    training updates with the sum of gradients scaled by 1/global batch; the same sum in
    another order and with other roundings (float32)."""
    changes = {"workload.optimizer": optimizer}
    ours = run(
        scenario_from_dict(local({"kind": "local_sgd", "sync_every": 1}, hosts, devices, **changes))
    )
    theirs = run(scenario_from_dict(local({"kind": sync}, hosts, devices, **changes)))
    assert ours.scenario.replicas == theirs.scenario.replicas == 4
    assert_trees_close(ours.params, theirs.params, atol=1e-6)
    loss = ours.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    expected = theirs.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def reference_diloco(data: dict, h: int, steps: int) -> object:
    """DiLoCo (arXiv:2311.08105, Algorithm 1) on 2 replicas by hand: each takes ``h`` adam
    steps on its half of each global batch, then θ ← θ − lr·(Δ + μ·m) with m ← μ·m + Δ,
    Δ = θ − mean(θ_i) (PyTorch's Nesterov SGD), and both restart from θ."""
    workload = build_workload(scenario_from_dict(data))
    model, b = workload.model, data["workload"]["batch_size"]
    inner = optax.adam(ADAM["learning_rate"])

    def loss(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()

    grad = jax.jit(jax.grad(loss))
    anchor = jax.tree.map(np.asarray, workload.params)
    momentum = jax.tree.map(np.zeros_like, anchor)
    replicas = [anchor, anchor]
    states = [inner.init(anchor), inner.init(anchor)]
    lr, mu = DILOCO["learning_rate"], DILOCO["momentum"]
    for step in range(steps):
        x, y = workload.batches.batch(step, 2 * b)
        for i in range(2):
            g = grad(replicas[i], x[i * b : (i + 1) * b], y[i * b : (i + 1) * b])
            updates, states[i] = inner.update(g, states[i], replicas[i])
            replicas[i] = optax.apply_updates(replicas[i], updates)
        if (step + 1) % h == 0:
            delta = jax.tree.map(
                lambda a, p, q: a - (np.asarray(p) + np.asarray(q)) / 2, anchor, *replicas
            )
            momentum = jax.tree.map(lambda m, d: mu * m + d, momentum, delta)
            anchor = jax.tree.map(lambda a, d, m: a - lr * (d + mu * m), anchor, delta, momentum)
            replicas = [anchor, anchor]
    return anchor


def test_diloco_equals_a_hand_written_reference_loop():
    h, steps = 3, 9  # three outer steps
    data = local(
        {"kind": "local_sgd", "sync_every": h, "outer_optimizer": DILOCO},
        hosts=2,
        devices=1,
        **{"workload.optimizer": ADAM, "workload.steps": steps},
    )
    result = run(scenario_from_dict(data))
    assert result.summary["syncs"] == 3 and result.summary["outer_nesterov"] is True
    assert_trees_close(result.params, reference_diloco(data, h, steps), atol=1e-6)


def test_same_seed_gives_byte_identical_runs():
    data = local(
        {"kind": "local_sgd", "sync_every": 4, "outer_optimizer": DILOCO},
        **{"workload.optimizer": ADAM, "cluster.device.variability": {"step": 0.1}},
    )
    a, b = (run(scenario_from_dict(data)) for _ in range(2))
    assert a.events.equals(b.events) and a.metrics.equals(b.metrics)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


# ------------------------------------------------------------------ timing


def timing(h: int, steps: int, **changes: object) -> object:
    data = local(
        {"kind": "local_sgd", "sync_every": h},
        hosts=2,
        devices=1,
        **{"workload.steps": steps, "workload.eval_every": 0, "numerics": False, **changes},
    )
    return run(scenario_from_dict(data))


def test_a_sync_period_is_h_local_steps_and_one_all_reduce_of_the_parameters():
    result = timing(4, 8)
    allreduce_s = ring_allreduce_s(2, PARAM_NBYTES, NET_ALPHA, NET_B)
    assert allreduce_s == pytest.approx(2 * (10e-6 + 4840 / 2e9), rel=1e-12)
    period_s = 4 * 1e-3 + allreduce_s
    assert result.summary["simulated_time_s"] == pytest.approx(2 * period_s, rel=1e-12)
    comm = result.events.query("kind == 'comm'")
    assert sorted(set(comm["step"])) == [3, 7]  # after every 4th step, nowhere else
    assert comm["start_s"].iloc[0] == pytest.approx(4e-3, rel=1e-12)
    assert set(comm["nbytes"]) == {PARAM_NBYTES}
    stamps = result.metrics.query("metric == 'examples_per_s'")["time_s"].to_numpy()
    np.testing.assert_allclose(stamps[:4], [1e-3, 2e-3, 3e-3, period_s], rtol=1e-12)


def test_links_carry_one_all_reduce_per_h_steps():
    """A ring of 2 sends each NIC 2·(n−1)/n·S = S bytes per all-reduce, each way."""
    links = timing(4, 12).tables["links"]
    nic = links[links["link"].str.contains("/nic/")]
    assert len(nic) == 4
    np.testing.assert_allclose(nic["bytes"], 3 * PARAM_NBYTES, rtol=1e-12)  # rate × time
    assert links.loc[~links.index.isin(nic.index), "bytes"].sum() == 0


def test_a_last_partial_period_ends_with_a_sync():
    result = timing(4, 6)
    assert result.summary["syncs"] == 2
    assert sorted(set(result.events.query("kind == 'comm'")["step"])) == [3, 5]


def test_replicas_drift_between_syncs_and_wait_at_the_sync():
    result = timing(4, 4, **{"cluster.device.variability": {"step": 0.2}})
    events = result.events
    compute = events.query("kind in ('compute', 'straggle')")
    ends = compute.groupby("device")["end_s"].max()
    comm_start = events.query("kind == 'comm'")["start_s"].iloc[0]
    assert comm_start == pytest.approx(ends.max(), rel=1e-12)
    assert ends.min() < ends.max()  # they drifted apart
    barrier = events.query("kind == 'idle'")
    assert list(barrier["step"]) == [3]  # only the sync waits
    assert barrier["end_s"].iloc[0] == pytest.approx(comm_start, rel=1e-12)
    # no barrier inside the period: each device's steps follow one another
    for _, rows in compute.query("kind == 'compute'").groupby("device"):
        np.testing.assert_allclose(rows["start_s"].to_numpy()[1:], rows["end_s"].to_numpy()[:-1])


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "strategy, message",
    [
        ({"sync_every": 0}, "strategy.sync_every"),
        ({"outer_optimizer": {"name": "adam"}}, "strategy.outer_optimizer.name"),
        (
            {"outer_optimizer": {"nesterov": True}},
            "strategy.outer_optimizer.momentum: got nesterov with momentum 0",
        ),
        ({"outer_optimizer": {"name": "nesterov"}}, "momentum: 0.9"),
        ({"outer_optimizer": {"momentum": 1.0}}, "strategy.outer_optimizer.momentum"),
        ({"outer_optimizer": {"learning_rate": 0}}, "strategy.outer_optimizer.learning_rate"),
        ({"algorithm": "tree"}, "strategy.algorithm"),
    ],
    ids=["sync0", "adam", "nesterov-no-momentum", "name-nesterov", "momentum1", "lr0", "tree"],
)
def test_bad_options_give_one_clear_error(strategy, message):
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(local({"kind": "local_sgd", **strategy}))
    assert message in str(caught.value)
    assert "Traceback" not in str(caught.value)


def test_failures_and_checkpoints_are_refused():
    failure = {"faults.failures": [{"at": "5ms", "target": "worker 1", "restart_after": "1ms"}]}
    with pytest.raises(ScenarioError, match=r"faults\.failures: local_sgd does not model"):
        scenario_from_dict(local({"kind": "local_sgd"}, **failure))
    with pytest.raises(ScenarioError, match="checkpoint: local_sgd does not write"):
        scenario_from_dict(
            local(
                {"kind": "local_sgd"},
                **{"checkpoint": {"every_steps": 2, "storage_bandwidth": "1GB/s"}},
            )
        )


# ------------------------------------------------------------------ memory


@pytest.mark.parametrize(
    "outer, copies", [({}, 1), ({"outer_optimizer": DILOCO}, 2)], ids=["average", "nesterov"]
)
def test_memory_counts_the_anchor_and_the_outer_momentum(outer, copies):
    """adam's two moments (2 × 4Ψ) + the anchor (4Ψ) + the outer momentum when there is one."""
    data = local(
        {"kind": "local_sgd", **outer},
        hosts=1,
        devices=1,
        **{"numerics": False, "workload.optimizer": ADAM, "workload.steps": 1},
    )
    memory = run(scenario_from_dict(data)).summary["memory_per_device"]["worker0/gpu0"]
    assert memory["params"] == memory["gradients"] == PARAM_NBYTES
    assert memory["optimizer"] == (2 + copies) * PARAM_NBYTES


# ------------------------------------------------------------------ topologies

SITES = {
    "leaf_spine": {
        "cluster.hosts": 2,
        "cluster.network": {
            "topology": "leaf_spine",
            "hosts_per_leaf": 1,  # one site behind each leaf, joined by a slow spine
            "oversubscription": "8:1",
            "hop_latency": "1us",
        },
    },
    "hosts_list": {
        "cluster.hosts": [{"name": "site-a", "devices": 2}, {"name": "site-b", "devices": 2}],
        "cluster.devices_per_host": None,
    },
}


@pytest.mark.parametrize("cluster", list(SITES))
def test_a_sync_costs_what_the_synchronous_all_reduce_costs_on_any_topology(cluster):
    """The sync's all-reduce is priced by the network as multi_worker_mirrored's is (ring,
    no overlap, the same bytes): H steps = H × 1 ms + one such all-reduce."""

    def seconds(strategy: dict, steps: int) -> float:
        data = local(
            strategy,
            **{"workload.steps": steps, "workload.eval_every": 0, "numerics": False},
            **SITES[cluster],
        )
        data["cluster"] = {k: v for k, v in data["cluster"].items() if v is not None}
        return run(scenario_from_dict(data)).summary["simulated_time_s"]

    sync = {"kind": "multi_worker_mirrored", "communication": "ring", "overlap": False}
    allreduce_s = seconds(sync, 1) - 1e-3
    assert allreduce_s > 0
    local_s = seconds({"kind": "local_sgd", "sync_every": 5}, 5)
    assert local_s == pytest.approx(5e-3 + allreduce_s, rel=1e-12)


# ------------------------------------------------------------------ tradeoff


def test_tradeoff_can_add_local_sgd_variants_trained_like_sync():
    from simdist.api import tradeoff
    from simdist.studies.tradeoff import STRATEGIES, tradeoff_runs

    runs = tradeoff_runs([0], workers=[4], severities=[1.0], learning_rate=0.1, local_sgd=[8])
    assert [r.strategy for r in runs] == [*STRATEGIES, "local SGD H=8"]
    sync, local_run = runs[0], runs[-1]
    assert local_run.overrides[-3:] == (
        "strategy={kind: local_sgd, sync_every: 8}",
        "cluster.device.compute_time=1ms",
        "workload.optimizer.learning_rate=0.4",  # N × the rate, as sync
    )
    assert sync.overrides[:5] == local_run.overrides[:5]  # same hosts, steps, evaluations
    found = tradeoff(
        workers=[2],
        severities=[1.0],
        seeds=1,
        parallel=False,
        local_sgd=[1],
        sync_steps=6,
        async_steps=6,
        target=0.2,
    )
    per_seed = found.per_seed.set_index("strategy")
    assert per_seed.loc["local SGD H=1", "gradients_per_update"] == 2
    # H = 1 is sync on the same hosts: the same updates to the target (the clocks differ:
    # parameter servers against an all-reduce)
    assert per_seed.loc["local SGD H=1", "updates_to_target"] == pytest.approx(
        per_seed.loc["sync", "updates_to_target"], rel=1e-6
    )


@pytest.mark.parametrize("outer", [{}, {"outer_optimizer": DILOCO}], ids=["average", "diloco"])
def test_devices_equal_batched(outer):
    """One replica per emulated JAX device, the sync a real pmean across them, against
    the vmap: within 1e-6 (the mean taken as a psum / k instead of over an axis)."""
    results = {
        execution: run(
            scenario_from_dict(
                local(
                    {"kind": "local_sgd", "sync_every": 3, "execution": execution, **outer},
                    **{"workload.optimizer": ADAM, "workload.steps": 6},
                )
            )
        )
        for execution in ("batched", "devices")
    }
    assert results["devices"].summary["execution"] == "devices"
    assert_trees_close(results["devices"].params, results["batched"].params, atol=1e-6)
