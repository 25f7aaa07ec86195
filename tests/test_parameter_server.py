"""parameter_server: partitioning, staleness, SSP, backup workers, numerics, determinism."""

from __future__ import annotations

import itertools
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import assert_trees_close, ps, tiny, write

from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from simdist.strategies.parameter_server import (
    ParameterServers,
    Pulled,
    ServerState,
    bytes_per_ps,
    partition,
)

# -- partitioning (pure) ----------------------------------------------------

LEAVES = [
    ("params/Dense_0/bias", (128,), 512),
    ("params/Dense_0/kernel", (64, 128), 32768),
    ("params/Dense_1/bias", (10,), 40),
    ("params/Dense_1/kernel", (128, 10), 5120),
]


@pytest.mark.parametrize("n_ps", [1, 2, 3, 5])
@pytest.mark.parametrize(
    ("partitioner", "min_bytes", "max_shards"),
    [
        ("round_robin", 0, None),
        ("min_size", 1024, None),
        ("min_size", 1024, 8),
        ("min_size", 1, 64),
    ],
)
def test_partitioners_place_every_row_exactly_once(n_ps, partitioner, min_bytes, max_shards):
    shards = partition(LEAVES, n_ps, partitioner, min_bytes, max_shards)
    for leaf, (_, shape, nbytes) in enumerate(LEAVES):
        mine = sorted((s.start, s.stop) for s in shards if s.leaf == leaf)
        assert mine[0][0] == 0 and mine[-1][1] == shape[0]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))  # contiguous
        assert sum(s.nbytes for s in shards if s.leaf == leaf) == nbytes
    assert sum(bytes_per_ps(shards, n_ps)) == sum(n for *_, n in LEAVES)
    assert all(0 <= s.ps < n_ps for s in shards)


def test_round_robin_deals_whole_variables_in_turn():
    shards = partition(LEAVES, 2, "round_robin")
    assert [(s.ps, s.leaf, s.start, s.stop) for s in shards] == [
        (0, 0, 0, 128),
        (1, 1, 0, 64),
        (0, 2, 0, 10),
        (1, 3, 0, 128),
    ]
    assert bytes_per_ps(shards, 2) == [512 + 40, 32768 + 5120]


def test_min_size_shards_respect_the_minimum_and_the_maximum():
    # 64 rows of 512 bytes; >= 8 KiB per shard -> 4 shards of 16 rows, dealt round-robin
    shards = partition(LEAVES[1:2], 3, "min_size", 8192, 16)
    assert [(s.ps, s.start, s.stop, s.nbytes) for s in shards] == [
        (0, 0, 16, 8192),
        (1, 16, 32, 8192),
        (2, 32, 48, 8192),
        (0, 48, 64, 8192),
    ]
    assert len(partition(LEAVES[1:2], 3, "min_size", 8192, 2)) == 2
    assert len(partition(LEAVES[1:2], 3, "min_size", 1 << 20, 16)) == 1


# -- the parameter servers' state (no SimPy) ------------------------------------


def test_servers_without_a_workload_keep_only_the_versions():
    servers = ParameterServers(partition(LEAVES, 2, "round_robin"), 2)
    assert not servers.numeric
    assert servers.pull_all() == Pulled(None, (0, 0))
    assert servers.apply(1, None) == 1
    assert servers.apply(1, None) == 2
    saved = servers.state()
    assert saved == ServerState((0, 2), None, None)
    servers.apply(0, None)
    assert servers.versions == [1, 2]
    servers.restore(saved)
    assert servers.versions == [0, 2]


def test_servers_split_apply_and_restore_row_shards_of_a_real_model():
    from simdist.runtime.engine import build_workload

    workload = build_workload(scenario_from_dict(tiny()))
    params = workload.params
    leaves = jax.tree_util.tree_leaves(params)
    param_leaves = [
        (path, leaf.shape, nbytes)
        for (path, nbytes), leaf in zip(workload.param_leaves, leaves, strict=True)
    ]
    shards = partition(param_leaves, 3, "min_size", 256, 4)
    assert len(shards) == 9  # both kernels are cut into row shards
    servers = ParameterServers(shards, 3, workload)
    pulled = servers.pull_all()
    assert pulled.versions == (0, 0, 0)
    assert_trees_close(servers.assemble(pulled.values), params, atol=0)
    # a gradient cut per PS and put together again is the same pytree
    grads = jax.tree.map(lambda p: np.full(p.shape, 0.5, np.float32), params)
    parts = [servers.split(grads, ps) for ps in range(3)]
    assert_trees_close(servers.assemble(parts), grads, atol=0)
    # PS 1 applies its shard (SGD, learning rate 0.1): only its rows move, by -0.05
    assert servers.apply(1, parts[1]) == 1
    moved = [pulled.values[0], {k: v - 0.05 for k, v in pulled.values[1].items()}]
    expected = servers.assemble([*moved, pulled.values[2]])
    assert_trees_close(servers.current(), expected)
    assert servers.versions == [0, 1, 0]
    # a snapshot is not changed by later updates, and a restore puts it back
    saved = servers.state()
    servers.apply(1, parts[1])
    servers.apply(2, parts[2])
    assert servers.versions == [0, 2, 1]
    servers.restore(saved)
    assert servers.versions == [0, 1, 0]
    assert_trees_close(servers.current(), expected)
    # the pulled snapshot of the start still holds the initial values
    assert_trees_close(servers.assemble(pulled.values), params, atol=0)


# -- numerics -----------------------------------------------------------------


def test_one_worker_one_ps_equals_one_device():
    single = run(scenario_from_dict(tiny()))
    server = run(scenario_from_dict(ps(workers=1, servers=1, steps=12)))
    assert_trees_close(server.params, single.params)
    assert set(server.tables["updates"]["staleness"]) == {0}
    loss_ps = server.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    loss_1 = single.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    np.testing.assert_allclose(loss_ps, loss_1, atol=1e-6)


@pytest.mark.parametrize("partitioner", ["round_robin", "min_size"])
def test_sync_mode_without_backups_equals_one_device_with_the_global_batch(partitioner):
    w = 4
    sync = run(
        scenario_from_dict(
            ps(
                workers=w,
                servers=2,
                steps=12,
                mode="sync",
                partitioner=partitioner,
                # min_size's option only: round_robin refuses it (it would ignore it)
                **({"min_shard_bytes": 1024} if partitioner == "min_size" else {}),
            )
        )
    )
    single = run(scenario_from_dict(tiny(**{"workload.batch_size": 8 * w})))
    assert_trees_close(sync.params, single.params)


# -- staleness ------------------------------------------------------------------


FIFO = {"duplex": "half", "sharing": "fifo"}


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_identical_workers_reach_staleness_workers_minus_one(workers):
    # fifo: the PS NIC serialises the first round's pulls, which staggers the workers by
    # one message each; from then on they take turns and every gradient is N - 1 stale
    data = {**ps(workers=workers, steps=10 * workers), "numerics": False}
    data["cluster"]["network"] = FIFO
    result = run(scenario_from_dict(data))
    updates = result.tables["updates"]
    steady = updates.iloc[2 * workers :]
    assert steady["staleness"].mean() == workers - 1
    assert set(steady["staleness"]) == {workers - 1}
    assert result.summary["staleness"]["max"] == workers - 1
    assert len(updates) == 10 * workers


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_identical_workers_under_fair_sharing_stay_in_lock_step(workers):
    # fair sharing: the N pulls share the PS NIC and arrive together, and so do the N
    # pushes, so the workers never drift apart: each round's gradients land one after
    # another on the versions they all pulled, stalenesses 0, 1, ..., N - 1 (mean (N-1)/2)
    data = {**ps(workers=workers, steps=10 * workers), "numerics": False}
    result = run(scenario_from_dict(data))
    updates = result.tables["updates"]
    assert updates["staleness"].tolist() == list(range(workers)) * 10
    assert result.summary["staleness"]["mean"] == (workers - 1) / 2


def test_staleness_is_pulled_version_distance():
    # 3 identical workers, 1 PS, compute (1 ms) far above the wire (~5 us), fifo NICs:
    # gradients land in worker order, round after round. In round 0 all three pulled
    # version 0, and worker k's gradient lands on version k. Afterwards a worker pulls
    # right after its own gradient landed and the two others land before its next one:
    # staleness 2, and the j-th gradient was computed from version j - 2.
    steps = 30
    data = ps(workers=3, steps=steps)
    data["cluster"]["network"] = FIFO
    result = run(scenario_from_dict(data))
    updates = result.tables["updates"]
    j = np.arange(steps)
    assert updates["worker"].tolist() == (j % 3).tolist()
    assert updates["iteration"].tolist() == (j // 3).tolist()
    assert updates["version"].tolist() == (j + 1).tolist()
    assert updates["staleness"].tolist() == np.minimum(j, 2).tolist()
    # staleness = version at apply - version pulled, so the pulled versions are
    pulled = updates["version"] - 1 - updates["staleness"]
    assert pulled.tolist() == np.maximum(j - 2, 0).tolist()
    # SSP staleness at the pull: when workers 0 and 1 pull, worker 2 is still one
    # iteration behind; when worker 2 pulls, all clocks agree
    assert updates["ssp_staleness"].tolist() == [0, 0, 0] + [1, 1, 0] * (steps // 3 - 1)


# -- synchronous mode with backup workers ---------------------------------------


@pytest.mark.parametrize("backups", [1, 2])
def test_backup_workers_drop_exactly_b_gradients_per_step(backups):
    steps = 15
    result = run(
        scenario_from_dict(
            ps(workers=4, servers=2, steps=steps, mode="sync", backup_workers=backups)
        )
    )
    dropped = result.tables["dropped"]
    assert dropped.groupby("step").size().to_dict() == {s: backups for s in range(steps)}
    assert result.summary["dropped_gradients"] == backups * steps
    assert len(result.tables["updates"]) == (4 - backups) * steps
    assert result.summary["steps"] == steps


def test_lr_staleness_inverse_changes_the_updates_but_not_the_clock():
    plain = run(scenario_from_dict(ps(workers=4, steps=20)))
    scaled = run(scenario_from_dict(ps(workers=4, steps=20, lr_staleness="inverse")))
    assert plain.summary["simulated_time_s"] == scaled.summary["simulated_time_s"]
    a = jax.tree_util.tree_leaves(plain.params)
    b = jax.tree_util.tree_leaves(scaled.params)
    assert any(not np.allclose(x, y) for x, y in zip(a, b, strict=True))


def test_async_run_learns_and_reports_staleness():
    result = run(scenario_from_dict(ps(workers=4, servers=2, steps=200)))
    s = result.summary
    assert s["applied_updates"] == 200
    assert s["applied_updates_per_s"] == pytest.approx(200 / s["simulated_time_s"])
    assert set(s["staleness"]) == {"mean", "p50", "p95", "max"}
    assert s["final_test_accuracy"] > 0.5
    assert s["examples"] == 200 * 8


def test_ps_run_is_byte_identical_across_processes(tmp_path):
    scenario = write(tmp_path, ps(workers=3, servers=2, steps=30))
    for out in ("a", "b"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "simdist",
                "run",
                str(scenario),
                "--out",
                str(tmp_path / out),
                "-q",
            ],
            check=True,
            capture_output=True,
        )
    for table in ("metrics.csv", "events.csv", "updates.csv"):
        assert (tmp_path / "a" / table).read_bytes() == (tmp_path / "b" / table).read_bytes()


# -- faults -----------------------------------------------------------------------


def straggling(workers: int = 4, factor: float = 3.0, **strategy) -> dict:
    data = ps(workers=workers, steps=80, **strategy)
    data["faults"] = {"stragglers": [{"worker": workers - 1, "slowdown": factor}]}
    return data


def test_a_persistent_straggler_lowers_only_its_own_rate():
    result = run(scenario_from_dict(straggling()))
    per_worker = result.tables["updates"].groupby("worker").size()
    fast = per_worker.loc[[0, 1, 2]]
    assert fast.nunique() <= 2 and fast.min() >= fast.max() - 1
    assert per_worker.loc[3] < fast.min() / 2


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_staleness_bound_limits_how_far_a_worker_runs_ahead(bound):
    result = run(scenario_from_dict(straggling(staleness_bound=bound)))
    updates = result.tables["updates"]
    assert updates["ssp_staleness"].max() <= bound
    if bound == 0:
        assert set(updates["ssp_staleness"]) == {0}
    unbounded = run(scenario_from_dict(straggling())).tables["updates"]
    assert unbounded["ssp_staleness"].max() > 3


def test_worker_failure_loses_its_gradient_and_the_others_go_on():
    data = ps(workers=4, servers=2, steps=60)
    data["faults"] = {"failures": [{"target": "worker 2", "at": "1ms", "restart_after": "2ms"}]}
    result = run(scenario_from_dict(data))
    s = result.summary
    assert s["failures"] == 1
    assert s["lost_gradients"] == 1
    assert s["applied_updates"] == 60 - s["lost_gradients"]
    # the final parameters are evaluated although step 60 was never reached
    accuracy = result.metrics.query("metric == 'test_accuracy'")
    assert accuracy["step"].iloc[-1] == s["applied_updates"]
    assert set(result.events["kind"]) >= {"failure", "restart"}
    restart = result.events.query("kind == 'restart'")
    assert (restart["end_s"] - restart["start_s"]).to_numpy() == pytest.approx(2e-3)
    # worker 2 did nothing while down, the others did
    down = result.tables["updates"].query("1e-3 < time_s < 3e-3")
    assert 2 not in set(down["worker"]) and len(down) > 0


def test_ps_failure_rolls_everyone_back_to_the_checkpoint():
    data = ps(workers=3, servers=2, steps=60)
    data["checkpoint"] = {"every_steps": 10, "storage_bandwidth": "1GB/s"}
    data["faults"] = {"failures": [{"target": "ps 1", "at": "4ms", "restart_after": "1ms"}]}
    result = run(scenario_from_dict(data))
    s = result.summary
    assert s["failures"] == 1 and s["lost_steps"] > 0
    assert s["applied_updates"] == 60
    assert {"failure", "restore", "checkpoint"} <= set(result.events["kind"])
    loss = result.metrics.query("metric == 'train_loss'")
    assert loss["step"].diff().min() < 0  # steps after the checkpoint are redone


def test_ps_runs_with_faults_are_deterministic():
    data = straggling(staleness_bound=2)
    data["faults"]["stragglers"].append({"probability": 0.2, "slowdown": {"kind": "pareto"}})
    data["faults"]["failures"] = [{"target": "worker 0", "mtbf": "5ms", "restart_after": "1ms"}]
    a, b = run(scenario_from_dict(data)), run(scenario_from_dict(data))
    assert a.events.equals(b.events) and a.metrics.equals(b.metrics)
    assert a.tables["updates"].equals(b.tables["updates"])
    assert a.summary["failures"] >= 1


@pytest.mark.parametrize(
    "extra",
    [
        {"strategy": {"kind": "parameter_server", "mode": "sync", "backup_workers": 2}},
        {"faults": {"failures": [{"target": "worker 1", "mtbf": "5ms", "restart_after": "1ms"}]}},
        {
            "checkpoint": {"every_steps": 10, "storage_bandwidth": "10MB/s"},
            "faults": {
                "failures": [
                    {"target": "ps 0", "mtbf": "6ms", "restart_after": "1ms"},
                    {"target": "ps 1", "mtbf": "7ms", "restart_after": "2ms"},
                    {"target": "worker 1", "mtbf": "2ms", "restart_after": "1ms"},
                ]
            },
        },
    ],
    ids=["dropped-backups", "worker-failures", "ps-and-worker-failures"],
)
def test_cut_work_never_overlaps_the_next_span_on_a_device(extra):
    data = {**ps(workers=8, servers=2, steps=40), **extra}
    data["faults"] = {
        **data.get("faults", {}),
        "stragglers": [{"probability": 0.2, "slowdown": {"kind": "pareto", "alpha": 1.5}}],
    }
    events = run(scenario_from_dict(data)).events.sort_values(["device", "start_s"], kind="stable")
    # a parameter-server task's rows are its NIC's transfers and its CPU's updates, which
    # overlap when they share it (fair sharing, full duplex; updates side by side, as a
    # PS runs them); only devices run one thing at a time
    ps_cpu = events["device"] == events["host"] + "/host-cpu"
    events = events[(events["device"] != events["host"]) & ~ps_cpu]
    for _, spans in events.groupby("device"):
        gaps = spans["start_s"].to_numpy()[1:] - spans["end_s"].to_numpy()[:-1]
        assert (gaps >= -1e-15).all()


def test_a_host_count_on_the_command_line_replaces_the_worker_list(tmp_path):
    from simdist.scenario import load_scenario

    scenario = load_scenario("scenarios/ps_4w2s.yaml", ["cluster.hosts=8"])
    assert scenario.cluster.worker_names == [f"worker{i}" for i in range(8)]
    assert scenario.replicas == 8


def test_a_worker_still_restarting_does_not_stretch_the_run():
    data = ps(workers=3, servers=1, steps=30)
    data["faults"] = {"failures": [{"target": "worker 1", "at": "2ms", "restart_after": "1s"}]}
    result = run(scenario_from_dict(data))
    last_update = result.tables["updates"]["time_s"].max()
    assert result.summary["simulated_time_s"] == last_update
    assert result.summary["simulated_time_s"] < 0.5
