"""Heterogeneous clusters: hosts listed one by one, each with its own device count and profile.

The schema (``cluster.hosts: [{name, devices, profile}]``) and its errors; the cluster's
device classes; the costs of each class (the same per-replica batch on each roofline); and
the clock: synchronous strategies wait for the slowest device, asynchronous parameter
servers apply the fast workers' gradients more often. Timing only: hand-made ``Costs`` and
``simulate(..., workload=None)``, no JAX.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.hardware.cluster import Cluster
from simdist.hardware.faults import Stragglers
from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.hardware.roofline import layer_times, step_time
from simdist.report.markdown import device_rows, render_markdown
from simdist.runtime.costs import measure_costs
from simdist.runtime.engine import simulate
from simdist.scenario import dump_scenario, scenario_from_dict
from simdist.scenario.load import scenario_from_text
from simdist.scenario.schema import MAX_DEVICES
from simdist.step_costs import Costs, DeviceCosts, LayerCost

WORKLOAD: dict[str, Any] = {
    "model": "mlp",
    "dataset": "digits",
    "batch_size": 8,
    "optimizer": {"name": "sgd", "learning_rate": 0.05},
    "steps": 6,
    "eval_every": 0,
}
V100, A100 = "v100", "a100"
SLOW, FAST = 3e-3, 1e-3  # hand-made compute seconds of one replica step on each
S = 1_000_000  # gradient bytes
STEPS = 6


def listed_host(name: str, profile: str, devices: int = 1, exact: bool = True) -> dict:
    """A listed host of ``devices`` devices of ``profile``. ``exact``: its own device section
    with variability off (exact, hand-checkable times; a host's own section replaces the
    cluster's ``device:``); else the short form ``profile: ...``."""
    if not exact:
        return {"name": name, "devices": devices, "profile": profile}
    return {"name": name, "devices": devices, "device": {"profile": profile, "variability": 0}}


def mixed(
    strategy: Any = "multi_worker_mirrored", devices: int = 1, exact: bool = True, **cluster: Any
) -> dict:
    """A scenario dict: host v100-0 (worker 0) and host a100-0, ``devices`` each (``exact``:
    variability off, see :func:`listed_host`)."""
    return {
        "name": "mixed",
        "numerics": False,
        "cluster": {
            "hosts": [
                listed_host("v100-0", V100, devices, exact),
                listed_host("a100-0", A100, devices, exact),
            ],
            **cluster,
        },
        "workload": copy.deepcopy(WORKLOAD),
        "strategy": strategy,
    }


def load(data: dict) -> Any:
    return scenario_from_dict(copy.deepcopy(data), "mixed.yaml")


def error(data: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load(data)
    return info.value


def hand_costs(
    slow: float = SLOW, fast: float = FAST, steps: int = STEPS, layers: int = 0
) -> Costs:
    """Costs whose V100 step takes ``slow`` and A100 step ``fast`` seconds (worker 0: V100).

    With ``layers`` > 0, each class's step is cut into that many equal layers, forward one
    third of each layer's time and backward two thirds.
    """

    def cut(total: float) -> tuple[LayerCost, ...]:
        each = total / layers if layers else 0.0
        return tuple(
            LayerCost(f"l{i}", each / 3, 2 * each / 3, S // layers, output_nbytes=1000)
            for i in range(layers)
        )

    own = {V100: DeviceCosts(slow, cut(slow)), A100: DeviceCosts(fast, cut(fast))}
    return Costs(
        compute_s=slow,
        grad_nbytes=S,
        flops_per_replica_step=0.0,
        total_steps=steps,
        param_leaves=(("params/w", (1000, 250), S),),
        layers=own[V100].layers,
        per_profile=tuple(own.items()),
    )


def compute_by_device(result: Any) -> dict[str, float]:
    """Seconds of ``compute`` each device recorded over the run."""
    ev = result.events[result.events["kind"] == "compute"]
    return (ev["end_s"] - ev["start_s"]).groupby(ev["device"]).sum().to_dict()


# -- the schema --------------------------------------------------------------------------


def test_a_listed_cluster_resolves_names_counts_and_devices():
    data = mixed()
    data["cluster"]["hosts"] = [
        {"name": "v100-0", "devices": 4, "profile": V100},
        {"devices": 2, "device": {"profile": A100, "precision": "tf32"}},
        {"name": "plain"},
    ]
    data["cluster"]["devices_per_host"] = 3
    data["cluster"]["device"] = {"profile": "p100"}
    s = load(data)
    c = s.cluster
    assert c.hosts == 3 and c.worker_names == ["v100-0", "worker1", "plain"]
    assert c.device_counts == [4, 2, 3] and c.n_devices == 9 and not c.uniform_devices
    assert [c.host_device(i).profile for i in range(3)] == ["v100", "a100", "p100"]
    assert c.host_device(1).precision == "tf32"
    assert c.profiles == ["v100", "a100", "p100"]
    assert c.devices_per_host == 4  # the first host's
    assert s.replicas == 9 and s.global_batch == 9 * 8


def test_a_listed_cluster_dumps_as_a_list_and_loads_back_equal():
    data = mixed(devices=2, exact=False)
    del data["workload"]["dataset"]  # timing only: the cluster is what round-trips here
    s = load(data)
    text = dump_scenario(s)
    cluster = yaml.safe_load(text)["cluster"]
    assert cluster["hosts"] == [
        {"name": "v100-0", "devices": 2, "profile": "v100"},
        {"name": "a100-0", "devices": 2, "profile": "a100"},
    ]
    assert "worker" not in cluster
    again = scenario_from_text(text, "dumped.yaml")
    assert again == s and dump_scenario(again) == text


def test_the_short_form_is_unchanged():
    s = load({**mixed(), "cluster": {"hosts": 2, "devices_per_host": 2}})
    assert s.cluster.host_specs is None and s.cluster.device_counts == [2, 2]
    assert "hosts: 2" in dump_scenario(s)


HOST_ERRORS = [
    (
        "unknown_profile",
        {"hosts": [{"name": "a", "profile": "a10"}]},
        "cluster.hosts[0].profile",
        "got 'a10'; did you mean 'a100'?",
    ),
    (
        "unknown_key",
        {"hosts": [{"name": "a"}, {"name": "b", "gpus": 4}]},
        "cluster.hosts[1].gpus",
        "unknown key 'gpus'; allowed keys here: name, devices, profile, device",
    ),
    (
        "zero_devices",
        {"hosts": [{"name": "a", "devices": 0}]},
        "cluster.hosts[0].devices",
        "got 0; expected a value >= 1, e.g. devices: 4",
    ),
    (
        "huge_devices",
        {"hosts": [{"name": "a", "devices": 10**6}]},
        "cluster.hosts[0].devices",
        f"got 1000000; expected a value <= {MAX_DEVICES}, e.g. devices: 4",
    ),
    (
        "too_many_in_all",
        {"hosts": [{"name": f"h{i}", "devices": 40_000} for i in range(2)]},
        "cluster",
        f"the 2 listed hosts hold 80,000 devices; a simulated cluster has at most {MAX_DEVICES:,}",
    ),
    (
        "duplicate_name",
        {"hosts": [{"name": "a"}, {"name": "b"}, {"name": "a"}]},
        "cluster.hosts[2].name",
        "got 'a', already the name of another host; host names must be unique",
    ),
    (
        "name_of_a_default",
        {"hosts": [{"profile": "v100"}, {"name": "worker0"}]},
        "cluster.hosts[1].name",
        "got 'worker0', already the name of another host",
    ),
    (
        "bad_name",
        {"hosts": [{"name": "a/b"}]},
        "cluster.hosts[0].name",
        "got 'a/b'; expected letters, digits, '_', '.' and '-' only",
    ),
    (
        "profile_and_device",
        {"hosts": [{"name": "a", "profile": "v100", "device": {"profile": "a100"}}]},
        "cluster.hosts[0].device",
        "give profile or device, not both",
    ),
    (
        "bad_precision",
        {"hosts": [{"name": "a", "device": {"profile": "v100", "precision": "bf16"}}]},
        "cluster.hosts[0].device.precision",
        "got 'bf16'; profile v100 has peaks for fp32, fp16",
    ),
    (
        "not_a_mapping",
        {"hosts": ["v100-0"]},
        "cluster.hosts[0]",
        "got 'v100-0'; expected a host such as {name: a100-0, devices: 4, profile: a100}",
    ),
    (
        "empty_list",
        {"hosts": []},
        "cluster.hosts",
        "got an empty list; expected at least one host",
    ),
    (
        "with_worker_list",
        {"hosts": [{"name": "a"}], "worker": ["w0:2222"]},
        "cluster.worker",
        "cluster.hosts lists the hosts already; give the hosts there or in worker:, not both",
    ),
    (
        "with_chief",
        {"hosts": [{"name": "a"}], "chief": ["c0:2222"]},
        "cluster.chief",
        "cluster.hosts lists the hosts already",
    ),
    (
        "internal_key",
        {"hosts": 2, "host_specs": []},
        "cluster.host_specs",
        "unknown key; list the hosts as hosts: [...]",
    ),
]


@pytest.mark.parametrize(
    ("cluster", "field", "fragment"),
    [case[1:] for case in HOST_ERRORS],
    ids=[case[0] for case in HOST_ERRORS],
)
def test_a_bad_host_list_gives_one_clear_error(cluster, field, fragment):
    err = error({**mixed(), "cluster": cluster})
    assert err.field == field, str(err)
    assert fragment in err.message, str(err)
    assert err.message.count("\n") == 0 and "pydantic" not in str(err)


def test_strategies_refuse_what_they_cannot_run_on_a_mixed_cluster():
    tpu = error(mixed({"kind": "tpu", "topology": [2, 1]}))
    assert tpu.field == "cluster.hosts"
    assert tpu.message.startswith("got hosts with device profiles v100, a100; strategy tpu")
    uneven = mixed("parameter_server", ps=1)
    uneven["cluster"]["hosts"][1]["devices"] = 2
    ps = error(uneven)
    assert (ps.field, ps.message.split(";")[0]) == (
        "cluster.hosts",
        "got hosts holding [1, 2] devices",
    )
    nccl = copy.deepcopy(uneven)
    nccl["cluster"].pop("ps")
    nccl["strategy"] = {"kind": "multi_worker_mirrored", "communication": "nccl"}
    err = error(nccl)
    assert err.field == "strategy.communication" and "needs the same count" in err.message


# -- the cluster and its costs -----------------------------------------------------------


def test_the_cluster_labels_each_device_with_its_class():
    data = mixed(devices=2)
    data["cluster"]["hosts"].append(
        {"name": "a100-tf32", "devices": 1, "device": {"profile": A100, "precision": "tf32"}}
    )
    cluster = Cluster(load(data).cluster)
    assert list(cluster.profiles) == ["v100", "a100", "a100@a100-tf32"]
    assert [d.profile for d in cluster.devices] == ["v100"] * 2 + ["a100"] * 2 + ["a100@a100-tf32"]
    assert [d.name for d in cluster.devices][2] == "a100-0/gpu0"
    assert cluster.mixed and cluster.profile is DEVICE_PROFILES["v100"]
    assert cluster.profile_of(cluster.devices[4]).precision == "tf32"
    assert cluster.device_counts == [2, 2, 1]
    assert [h.profile for h in cluster.workers] == ["v100", "a100", "a100@a100-tf32"]


def test_each_device_class_prices_the_same_batch_on_its_own_roofline():
    scenario = load(mixed())
    costs = measure_costs(scenario, None)
    assert [label for label, _ in costs.per_profile] == ["v100", "a100"]
    from simdist.runtime.costs import clock_profile

    profile = clock_profile(scenario)
    for label, own in costs.per_profile:
        device = DEVICE_PROFILES[label]
        times = layer_times(profile, device, device.precision)
        assert own.compute_s == step_time(times)
        assert [(x.forward_s, x.backward_s) for x in own.layers] == times
    assert costs.compute_s == costs.per_profile[0][1].compute_s  # worker 0's: the V100
    assert costs.for_profile("a100").compute_s < costs.compute_s
    assert costs.for_profile("a100").grad_nbytes == costs.grad_nbytes
    # a homogeneous cluster keeps its costs as they were: no per-profile entries
    assert measure_costs(load({**mixed(), "cluster": {"hosts": 2}}), None).per_profile == ()


def test_a_measured_step_calibrates_its_own_host_class_only():
    data = mixed()
    data["cluster"]["hosts"][1] = {
        "name": "a100-0",
        "device": {"profile": A100, "compute_time": "2ms"},
    }
    costs = measure_costs(load(data), None)
    own = dict(costs.per_profile)
    assert own["a100"].compute_s == 2e-3
    assert sum(x.forward_s + x.backward_s for x in own["a100"].layers) == pytest.approx(2e-3)
    assert own["v100"].compute_s != 2e-3


def test_device_stragglers_count_devices_across_uneven_hosts():
    # hosts of 2 and 3 devices: device 3 is the second device of the A100 host
    data = mixed({"kind": "multi_worker_mirrored", "overlap": False})
    data["cluster"]["hosts"][0]["devices"] = 2
    data["cluster"]["hosts"][1]["devices"] = 3
    data["faults"] = {"stragglers": [{"device": 3, "slowdown": 2.0}]}
    result = simulate(load(data), hand_costs())
    straggle = result.events[result.events["kind"] == "straggle"]
    assert set(straggle["device"]) == {"a100-0/gpu1"} and len(straggle) == STEPS
    assert (straggle["end_s"] - straggle["start_s"]).tolist() == pytest.approx([FAST] * STEPS)
    assert result.summary["communication"] == "ring"  # auto: no equal groups for nccl
    s = Stragglers(load(data).faults.stragglers, 0, 2)
    s.first_device = [0, 2]
    assert s.factor(1, 1, 0) == 2.0 and s.factor(1, 0, 0) == 1.0 and s.factor(0, 1, 0) == 1.0


# -- the clock -----------------------------------------------------------------------------


def test_a_sync_step_is_the_slowest_device_plus_the_all_reduce():
    scenario = load(mixed({"kind": "multi_worker_mirrored", "communication": "ring"}))
    result = simulate(scenario, hand_costs())
    net = scenario.cluster.links.network
    allreduce = ring_allreduce_s(2, S, net.latency_s, net.bandwidth_Bps)
    t = 0.0
    for _ in range(STEPS):
        t += SLOW
        t += allreduce
    assert result.summary["simulated_time_s"] == t
    assert compute_by_device(result) == pytest.approx(
        {"v100-0/gpu0": STEPS * SLOW, "a100-0/gpu0": STEPS * FAST}, rel=1e-12
    )
    # the A100 waits for the V100 at every step's barrier
    idle = result.events[(result.events["kind"] == "idle") & (result.events["step"] == 0)]
    assert idle["device"].tolist() == ["a100-0/gpu0"]
    assert (idle["start_s"].iloc[0], idle["end_s"].iloc[0]) == (FAST, SLOW)
    assert result.summary["compute_s_per_profile"] == {"v100": SLOW, "a100": FAST}


def test_an_overlapped_sync_step_waits_for_the_slow_devices_buckets():
    scenario = load(
        mixed({"kind": "multi_worker_mirrored", "communication": "ring", "bucket_bytes": 1})
    )
    result = simulate(scenario, hand_costs(layers=2))
    ev = result.events
    comm = ev[(ev["kind"] == "comm") & (ev["step"] == 0)].sort_values("start_s")
    # bucket 1 (the last layer's gradient) is ready when the V100 has run its forward
    # and that layer's backward; bucket 2 when the V100's backward ends
    first_ready = SLOW / 2 / 3 * 2 + SLOW / 2 * 2 / 3
    assert comm["start_s"].iloc[0] == pytest.approx(first_ready, rel=1e-12)
    a100 = ev[(ev["device"] == "a100-0/gpu0") & (ev["step"] == 0)]
    backward = a100[a100["detail"].str.startswith("backward")]
    assert backward["end_s"].max() == pytest.approx(FAST, rel=1e-12)
    assert compute_by_device(result) == pytest.approx(
        {"v100-0/gpu0": STEPS * SLOW, "a100-0/gpu0": STEPS * FAST}, rel=1e-9
    )


def test_async_parameter_servers_apply_the_fast_workers_gradients_more_often():
    data = mixed("parameter_server", ps=1)
    data["cluster"]["links"] = {"network": {"bandwidth": "100GB/s", "latency": "1us"}}
    result = simulate(load(data), hand_costs(slow=3e-3, fast=1e-3, steps=40))
    updates = result.tables["updates"]
    applied = updates.groupby("worker")["iteration"].nunique().to_dict()
    assert sum(applied.values()) == 40
    # compute dominates (pull + push of 1 MB on 100 GB/s is ~22 us): about 3 A100 gradients
    # for each V100 one
    assert applied[1] >= 2.5 * applied[0]
    assert applied == {0: 10, 1: 30}
    rows = device_rows(result)
    assert [(r[0], r[1], r[2], r[-1]) for r in rows] == [
        ("v100-0", "v100", 1, "10"),
        ("a100-0", "a100", 1, "30"),
    ]


def test_a_staleness_bound_makes_the_fast_worker_wait():
    data = mixed({"kind": "parameter_server", "staleness_bound": 0}, ps=1)
    data["cluster"]["links"] = {"network": {"bandwidth": "100GB/s", "latency": "1us"}}
    result = simulate(load(data), hand_costs(slow=3e-3, fast=1e-3, steps=40))
    applied = result.tables["updates"].groupby("worker")["iteration"].nunique().to_dict()
    assert abs(applied[0] - applied[1]) <= 1


def test_a_pipeline_stage_runs_at_its_own_devices_speed():
    strategy = {"kind": "pipeline", "stages": 2, "micro_batches": 2, "partition": [1, 1]}
    result = simulate(load(mixed(strategy)), hand_costs(layers=2, steps=2))
    ev = result.events
    f = ev[(ev["kind"] == "compute") & ev["detail"].str.startswith("F")]
    spans = (f["end_s"] - f["start_s"]).groupby(f["device"]).first().to_dict()
    # one micro-batch's forward through one layer: the layer's forward / M (no launch cost)
    assert spans == pytest.approx(
        {"v100-0/gpu0": SLOW / 2 / 3 / 2, "a100-0/gpu0": FAST / 2 / 3 / 2}, rel=1e-12
    )
    total = compute_by_device(result)
    assert total == pytest.approx({"v100-0/gpu0": SLOW, "a100-0/gpu0": FAST}, rel=1e-12)


STRATEGIES = [
    ("one_device", 1, 1),
    ("mirrored", 1, 2),
    ("central_storage", 1, 2),
    ("multi_worker_mirrored", 2, 2),
    ("parameter_server", 2, 1),
    ({"kind": "parameter_server", "overlap": True}, 2, 1),
    ({"kind": "parameter_server", "mode": "sync", "backup_workers": 1}, 2, 1),
    ({"kind": "pipeline", "stages": 2, "micro_batches": 2}, 2, 1),
    ({"kind": "pipeline", "stages": 2, "micro_batches": 2, "schedule": "pipedream"}, 2, 1),
]


@pytest.mark.parametrize(
    ("strategy", "hosts", "devices"),
    STRATEGIES,
    ids=[s if isinstance(s, str) else "_".join(map(str, s.values())) for s, _, _ in STRATEGIES],
)
def test_every_strategy_runs_on_a_mixed_cluster(strategy, hosts, devices):
    data = mixed(strategy, devices=devices)
    data["cluster"]["hosts"] = (
        data["cluster"]["hosts"][:hosts] if hosts == 2 else [listed_host("a100-0", A100, devices)]
    )
    kind = strategy if isinstance(strategy, str) else strategy["kind"]
    if kind == "parameter_server":
        data["cluster"]["ps"] = 1
    scenario = load(data)
    # 3.7: neither class's time is a whole multiple of the other's
    costs = hand_costs(slow=3.7e-3, fast=1e-3, layers=2, steps=4)
    result = simulate(scenario, costs)
    assert result.summary["steps"] == 4
    by_device = compute_by_device(result)
    if isinstance(strategy, dict) and strategy.get("backup_workers"):
        # the A100 worker's gradient always arrives first: the V100's is the one dropped
        # (its computation cut short when the step ends without it)
        assert set(result.tables["dropped"]["worker"]) == {0}
        assert len(result.tables["dropped"]) == 4
        return
    for host in Cluster(scenario.cluster).workers:
        for device in host.devices:
            own = costs.for_profile(str(host.profile)).compute_s
            done = by_device.get(device.name, 0.0)
            # each device computed whole steps at its own class's speed
            assert done > 0 and (done / own) == pytest.approx(round(done / own), rel=1e-9)


def test_the_report_shows_a_devices_table_only_for_a_mixed_cluster():
    result = simulate(load(mixed("multi_worker_mirrored")), hand_costs())
    text = render_markdown(result, [])
    assert "## Devices" in text
    assert "| v100-0 | v100 | 1 | 3 ms | " in text and "| a100-0 | a100 | 1 | 1 ms | " in text
    same = load({**mixed(), "cluster": {"hosts": 2}})
    plain = simulate(same, Costs(SLOW, S, 0.0, STEPS))
    assert "## Devices" not in render_markdown(plain, [])
    assert "compute_s_per_profile" not in plain.summary
