"""Several jobs on one cluster: one clock, one network, a report per job.

Timing cases use hand-made ``Costs`` (``workload=None``) and powers of two, so the
simulated times are exact binary fractions compared with ``==``. The shared bottleneck is
a hand-made topology: a non-blocking switch whose host-to-host traffic also crosses one
``core`` link of the NIC's bandwidth (on the switch alone, jobs on disjoint hosts share
no link at all).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simdist import api
from simdist.cli import app
from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError
from simdist.network.link import Link
from simdist.network.switch import SwitchTopology
from simdist.network.topology import hosts_of
from simdist.runtime import engine
from simdist.runtime.engine import simulate
from simdist.runtime.jobs import INTERFERENCE_COLUMNS, JobRun, run_jobs, simulate_jobs
from simdist.scenario import dump_scenario, scenario_from_dict
from simdist.scenario.load import scenario_from_text
from simdist.seeds import job_seed
from simdist.step_costs import Costs

B = 2.0**30  # NIC (and core) bandwidth, bytes/s
ALPHA = 2.0**-16  # latency of one NIC, s
S = 2**20  # gradient bytes
C = 2.0**-10  # compute per replica step, s
STEPS = 5

WORKLOAD = {
    "model": {"name": "mlp", "hidden": [16]},
    "input_shape": [64],
    "batch_size": 8,
    "optimizer": {"name": "sgd", "learning_rate": 0.1},
    "steps": STEPS,
    "eval_every": 0,
}


class SharedCore(SwitchTopology):
    """A switch whose every message between machines, and every collective over several
    hosts, also crosses one ``core`` link (bandwidth = the NIC's, no latency)."""

    name = "shared_core"

    def __init__(self, env, cluster, **options):
        super().__init__(env, cluster, **options)
        bandwidth, sharing = options["nic_bandwidth_Bps"], options["sharing"]
        self.core = self.add_link(Link(env, "core", 0.0, bandwidth, "", sharing=sharing))

    def route(self, src, dst):
        links = super().route(src, dst)
        return links if len(links) == 1 else [links[0], self.core, links[1]]

    def collective(self, op, devices, nbytes, algo):
        seconds, links = super().collective(op, devices, nbytes, algo)
        return seconds, [*links, self.core] if len(hosts_of(devices)) > 1 else links


def scenario(
    jobs, *, sharing="fair", latency=ALPHA, hosts=4, ps=0, network=None, numerics=False, **cluster
):
    data = {
        "name": "shared",
        "seed": 0,
        "numerics": numerics,
        "cluster": {
            "hosts": hosts,
            "ps": ps,
            # variability off: exact, hand-checkable times
            "device": {"profile": "cpu", "variability": 0},
            "links": {"network": {"bandwidth": B, "latency": latency}},
            "network": {"sharing": sharing, **(network or {})},
            **cluster,
        },
        "jobs": jobs,
    }
    return scenario_from_dict(data)


def job(name, hosts, strategy, ps=0, **workload):
    return {
        "name": name,
        "hosts": hosts,
        "ps": ps,
        "strategy": strategy,
        "workload": {**WORKLOAD, **workload},
    }


def costs(steps=STEPS, compute_s=C):
    return Costs(
        compute_s=compute_s,
        grad_nbytes=S,
        flops_per_replica_step=0.0,
        total_steps=steps,
        param_leaves=(("params/w", (S // 4,), S),),
    )


def runs(s, steps=STEPS):
    return [JobRun(js, costs(steps)) for js in s.job_scenarios]


def times(shared):
    return {name: r.summary["simulated_time_s"] for name, r in shared.results.items()}


RING = {"kind": "multi_worker_mirrored", "communication": "ring", "overlap": False}


# ---------------------------------------------------------------- a shared bottleneck


def test_two_parameter_server_jobs_on_one_link_pay_twice_the_bandwidth_part():
    # One worker and one PS per job; each pull and push crosses the core. Alone a step is
    # c + 2 (2α) + 2 S/B; together both jobs' messages cross the core at once and get
    # half of it each (max-min), so the bandwidth part doubles and the latency does not.
    s = scenario(
        [job("a", 1, "parameter_server", ps=1), job("b", 1, "parameter_server", ps=1)],
        hosts=2,
        ps=2,
    )
    alone = {
        j.name: simulate_jobs(s, [r], make_topology=SharedCore.from_scenario)
        for j, r in zip(s.jobs, runs(s), strict=True)
    }
    together = simulate_jobs(s, runs(s), make_topology=SharedCore.from_scenario)
    solo_step = C + 2 * (2 * ALPHA) + 2 * S / B
    shared_step = C + 2 * (2 * ALPHA) + 2 * (2 * S / B)
    for name in ("a", "b"):
        assert times(alone[name])[name] == STEPS * solo_step
        assert times(together)[name] == STEPS * shared_step
        updates = together.results[name].tables["updates"]["time_s"].tolist()
        assert updates == [k * shared_step for k in range(1, STEPS + 1)]
    assert together.end_s == STEPS * shared_step
    # the core carried both jobs' pulls and pushes: 2 jobs x 2 messages x S per step
    core = together.tables["links"].set_index("link").loc["core"]
    assert core["bytes"] == 2 * 2 * S * STEPS


@pytest.mark.parametrize("sharing", ["fair", "fifo"])
def test_two_identical_allreduce_jobs_share_the_core(sharing):
    # Two hosts per job, ring all-reduce T = S/B (no latency) over the core. Fair: both
    # all-reduces run at half speed, each step c + 2T. FIFO: b waits for a's first
    # all-reduce once, then the two alternate on the core without waiting again.
    s = scenario([job("a", 2, RING), job("b", 2, RING)], sharing=sharing, latency=0.0)
    t = ring_allreduce_s(2, S, 0.0, B)
    assert t == S / B
    result = run_jobs(s, runs=runs(s), make_topology=SharedCore.from_scenario)
    table = result.interference.set_index("job")
    assert list(result.interference.columns) == list(INTERFERENCE_COLUMNS)
    assert list(table["time_alone_s"]) == [STEPS * (C + t)] * 2
    if sharing == "fair":
        assert list(table["time_together_s"]) == [STEPS * (C + 2 * t)] * 2
        assert list(table["slowdown"]) == [(C + 2 * t) / (C + t)] * 2 == [1.5, 1.5]
    else:
        assert list(table["time_together_s"]) == [STEPS * (C + t), STEPS * (C + t) + t]
    assert result.summary["jobs"][1]["slowdown"] == table.loc["b", "slowdown"]


def test_on_a_non_blocking_switch_jobs_do_not_interfere():
    s = scenario([job("a", 2, RING), job("b", 2, RING)])
    result = run_jobs(s, runs=runs(s))
    assert list(result.interference["slowdown"]) == [1.0, 1.0]
    assert result.summary["network"] == {"topology": "switch", "duplex": "full", "sharing": "fair"}


def test_cross_rack_jobs_on_a_leaf_spine_share_its_uplinks():
    # Two racks of two hosts; each job's ring joins one host of each rack, so both jobs'
    # all-reduces hold both uplinks: as one flow each, they run at half speed together.
    s = scenario(
        [job("a", ["worker0", "worker2"], RING), job("b", ["worker1", "worker3"], RING)],
        network={"topology": "leaf_spine", "hosts_per_leaf": 2, "oversubscription": 2},
    )
    result = run_jobs(s, runs=runs(s))
    table = result.interference.set_index("job")
    allreduce_s = table.loc["a", "time_alone_s"] / STEPS - C
    assert allreduce_s > 0 and table.loc["b", "time_alone_s"] == table.loc["a", "time_alone_s"]
    for name in ("a", "b"):
        assert table.loc[name, "time_together_s"] == pytest.approx(
            STEPS * (C + 2 * allreduce_s), rel=1e-12
        )
    uplinks = result.tables["links"].set_index("link").filter(like="uplink", axis=0)
    assert len(uplinks) == 4 and (uplinks["bytes"] > 0).all()
    # each job's own links.csv holds its hosts' links only, not the shared uplinks
    assert not result.jobs["a"].tables["links"]["link"].str.contains("uplink").any()


def test_a_job_alone_equals_a_run_of_its_own_scenario():
    s = scenario(
        [job("ring", ["worker1", "worker3"], RING), job("ps", 2, "parameter_server", ps=1)],
        ps=1,
    )
    shared = simulate_jobs(s, runs(s))
    for j, js in zip(s.jobs, s.job_scenarios, strict=True):
        own = simulate(js, costs())
        mine = shared.results[j.name]
        pd.testing.assert_frame_equal(mine.events, own.events)
        pd.testing.assert_frame_equal(mine.metrics, own.metrics)
        assert mine.summary.pop("_shared").startswith(f"job {j.name} of scenario shared, run")
        assert mine.summary == own.summary
        assert mine.tables.keys() == own.tables.keys()
        for name in own.tables:
            pd.testing.assert_frame_equal(mine.tables[name], own.tables[name])
    assert s.jobs[1].hosts == ["worker0", "worker2"]  # a count takes the free hosts in order
    assert set(shared.results["ring"].events["host"]) == {"worker1", "worker3"}


@pytest.mark.parametrize("diverging", ["ring", "ps"])
def test_a_job_found_to_diverge_after_the_fact_stops_there_in_the_shared_run(diverging):
    """A synchronous job reads each loss a step late and parameter_server replays its
    dataflow: either finds a divergence after the job ran on. The shared run is then
    simulated again with that job stopping where it diverged, so its report has every
    loss up to there, as a run of its own would; a synchronous job's divergence step is
    its own run's (values do not depend on timing), and the other job runs to its end."""
    real = {"dataset": "digits"}
    lr = {"optimizer": {"name": "sgd", "learning_rate": 1e30}}
    jobs = [
        job("ring", ["worker1", "worker3"], RING, steps=6, **real,
            **(lr if diverging == "ring" else {})),
        job("ps", 2, "parameter_server", ps=1, steps=12, **real,
            **(lr if diverging == "ps" else {})),
    ]  # fmt: skip
    for j in jobs:
        del j["workload"]["input_shape"]
    loaded = scenario(jobs, ps=1, numerics=True)
    shared = run_jobs(loaded).jobs
    mine, other = shared[diverging], shared["ps" if diverging == "ring" else "ring"]
    assert mine.summary["diverged"] is True
    assert mine.summary["steps"] == mine.summary["diverged_at_step"]
    losses = mine.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    if diverging == "ring":  # the step whose loss was not finite is recorded
        assert len(losses) == mine.summary["steps"] and not np.isfinite(losses[-1])
    else:  # the shard whose gradient's loss was not finite is not applied
        assert len(losses) == mine.summary["steps"] - 1 and np.isfinite(losses).all()
        assert np.isfinite(mine.tables["updates"]["loss"]).all()
    assert other.summary["diverged"] is False
    if diverging == "ring":
        alone = engine.run(loaded.job_scenarios[0])
        assert mine.summary["diverged_at_step"] == alone.summary["diverged_at_step"]


# ---------------------------------------------------------------- seeds and determinism


STRAGGLING = {"stragglers": [{"worker": 1, "slowdown": {"kind": "lognormal", "sigma": 1.0},
                              "probability": 0.5}]}  # fmt: skip


def test_adding_a_job_changes_no_draw_of_another():
    a = {**job("a", ["worker2", "worker3"], RING), "faults": STRAGGLING}
    other = job("other", 2, "parameter_server", ps=1)
    alone, both = scenario([a]), scenario([other, copy.deepcopy(a)], ps=1)
    assert alone.job_scenarios[0].seed == both.job_scenarios[1].seed == job_seed(0, "a")
    assert job_seed(0, "a") != job_seed(0, "other") != job_seed(1, "a")
    first = simulate_jobs(alone, runs(alone)).results["a"]
    second = simulate_jobs(both, runs(both)).results["a"]
    assert (first.events["kind"] == "straggle").any()
    pd.testing.assert_frame_equal(first.events, second.events)


def test_two_runs_are_identical(tmp_path):
    s = scenario([job("a", 2, RING, steps=3), job("b", 2, "parameter_server", ps=1, steps=6)],
                 ps=1)  # fmt: skip
    first = api.run(s, out=tmp_path / "one")
    second = api.run(s, out=tmp_path / "two")
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.*"))
    assert Path("a/events.csv") in files and Path("interference.csv") in files
    for name in files:
        if name.suffix != ".png":
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert first.summary == second.summary


# ---------------------------------------------------------------- the report


def test_a_two_job_run_writes_a_report_per_job_and_the_interference_table(tmp_path):
    s = scenario([job("ring", 2, RING, steps=4), job("ps", 2, "parameter_server", ps=1, steps=8)],
                 ps=1)  # fmt: skip
    out = tmp_path / "shared"
    result = api.run(s, out=out)
    assert sorted(p.name for p in out.iterdir()) == [
        ".simdist-report", "interference.csv", "interference.png", "link_buckets.csv",
        "link_load.csv", "link_utilisation.png", "links.csv", "ps", "report.md", "ring",
        "scenario.yaml", "summary.json",
    ]  # fmt: skip
    for name in ("ring", "ps"):
        folder = out / name
        for file in ("events.csv", "metrics.csv", "summary.json", "report.md", "trace.json"):
            assert (folder / file).is_file()
        loaded = api.load_report(folder)
        assert loaded.scenario == s.job_scenarios[[j.name for j in s.jobs].index(name)]
        pd.testing.assert_frame_equal(loaded.events, result.jobs[name].events)
    table = api.read_table(out / "interference.csv")
    assert list(table["job"]) == ["ring", "ps"] and list(table["steps"]) == [4, 8]
    summary = json.loads((out / "summary.json").read_text())
    assert [j["name"] for j in summary["jobs"]] == ["ring", "ps"]
    assert summary["jobs"][1]["ps"] == ["ps0"] and summary["jobs"][0]["hosts"] == [
        "worker0",
        "worker1",
    ]
    markdown = (out / "report.md").read_text()
    assert "## Interference" in markdown and "[ring](ring/report.md)" in markdown
    assert "| [ps](ps/report.md) | parameter_server | 2 | 8 |" in markdown
    # the scenario folder's scenario.yaml loads back to the same scenario, jobs and all
    again = scenario_from_text((out / "scenario.yaml").read_text())
    assert dump_scenario(again) == dump_scenario(s)
    assert again.job_scenarios == s.job_scenarios


def test_the_cli_runs_and_validates_a_scenario_with_jobs(tmp_path):
    s = scenario([job("ring", 2, RING, steps=2), job("solo", 1, "one_device", steps=2)])
    path = tmp_path / "jobs.yaml"
    path.write_text(dump_scenario(s))
    runner = CliRunner()
    checked = runner.invoke(app, ["validate", str(path), "--out", str(tmp_path / "r")])
    assert checked.exit_code == 0, checked.output
    assert "2 jobs (ring: multi_worker_mirrored on 2 host(s), 2 replica(s)" in checked.output
    ran = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "r")])
    assert ran.exit_code == 0, ran.output
    assert "one folder per job" in ran.output and "×1.000" in ran.output
    assert (tmp_path / "r" / "solo" / "summary.json").is_file()


def test_the_teaching_scenario_loads():
    from simdist.scenario import load_scenario

    s = load_scenario("scenarios/two_jobs.yaml")
    assert [(j.name, j.strategy.kind, j.hosts, j.ps) for j in s.jobs] == [
        ("allreduce", "multi_worker_mirrored", ["worker0", "worker1", "worker4", "worker5"], []),
        ("ps", "parameter_server", ["worker2", "worker3", "worker6", "worker7"], ["ps0", "ps1"]),
    ]
    assert s.cluster.network.topology == "leaf_spine"
    moved = load_scenario(
        "scenarios/two_jobs.yaml",
        ["jobs.0.hosts=[worker0, worker1, worker2, worker3]", "jobs.1.strategy.staleness_bound=1"],
    )
    assert moved.jobs[1].hosts == ["worker4", "worker5", "worker6", "worker7"]
    assert moved.job_scenarios[1].strategy.staleness_bound == 1


# ---------------------------------------------------------------- a scenario without jobs


def test_a_scenario_without_jobs_is_unchanged():
    data = {
        "name": "plain",
        "numerics": False,
        "cluster": {"hosts": 2},
        "workload": WORKLOAD,
        "strategy": RING,
    }
    s = scenario_from_dict(copy.deepcopy(data))
    assert s.jobs is None and "jobs" not in dump_scenario(s)
    assert scenario_from_text(dump_scenario(s)) == s
    result = api.run(s)
    assert type(result).__name__ == "Result"
    del data["workload"]
    with pytest.raises(ScenarioError) as missing:
        scenario_from_dict(data)
    assert str(missing.value).startswith(
        "<scenario>: workload: missing; required, e.g. workload: {model: mlp"
    )


# ---------------------------------------------------------------- schema errors


def _bad(jobs, **cluster):
    with pytest.raises(ScenarioError) as error:
        scenario(jobs, **cluster)
    return f"{error.value.field}: {error.value.message}"


@pytest.mark.parametrize(
    "jobs, cluster, expected",
    [
        ([], {}, "jobs: got an empty list; expected at least one job"),
        (
            [job("a", ["worker9"], RING)],
            {},
            "jobs[0].hosts[0]: got 'worker9'; did you mean 'worker3'? Expected one of 'worker0', "
            "'worker1', 'worker2', 'worker3', e.g. hosts: [worker3]",
        ),
        (
            [job("a", ["worker0", "worker1"], RING), job("b", ["worker2", "worker0"], RING)],
            {},
            "jobs[1].hosts[1]: got 'worker0', already a worker host of job 'a' (jobs[0]); "
            "a host runs one job",
        ),
        (
            [job("a", ["worker3"], "one_device"), job("b", 4, RING)],
            {},
            "jobs[1].hosts: got 4; only 3 worker host(s) of the cluster are free for this job "
            "(worker0, worker1, worker2)",
        ),
        ([job("a", 1, RING), job("a", 1, RING)], {}, "jobs[1].name: got 'a', already the name"),
        (
            [job("a", 2, "mirrored")],
            {},
            "jobs[0].hosts: got 2; strategy mirrored runs on one host (hosts: 1)",
        ),
        (
            [job("a", 2, "parameter_server", ps=1)],
            {},
            "jobs[0].ps: got 1; the cluster has no parameter-server tasks, e.g. give the "
            "cluster some (cluster: {ps: 2})",
        ),
        (
            [job("a", 2, RING, ps=1)],
            {"ps": 1},
            "jobs[0].ps: got 1; parameter-server tasks are only used by strategy: parameter_server",
        ),
        (
            [job("a", 1, "tpu")],
            {},
            "jobs[0].strategy.kind: got 'tpu', which runs on its own torus topology",
        ),
        (
            [job("a", 1, RING, batch_size=0)],
            {},
            "jobs[0].workload.batch_size: got 0; expected a value >= 1",
        ),
        ([job("a.b", 1, RING)], {}, "jobs[0].name: got 'a.b'; expected a letter or digit"),
        ([job("a", "worker0", RING)], {}, "jobs[0].hosts: got 'worker0'; expected a list"),
        (
            [job("a", 2, "parameter_server", ps=1), job("b", 2, "parameter_server", ps=1)],
            {"ps": 2, "ps_placement": ["worker0", "worker1"]},
            "cluster.ps_placement[1]: got 'worker1' for ps1, a parameter-server task of job "
            "'b' (jobs[1])",
        ),
    ],
)
def test_schema_errors_name_the_job_field(jobs, cluster, expected):
    hosts = cluster.pop("hosts", 4)
    ps = cluster.pop("ps", 0)
    assert _bad(jobs, hosts=hosts, ps=ps, **cluster).startswith(expected)


def test_each_spec_knows_its_class_topology_without_importing_it():
    from simdist.strategies import STRATEGIES, spec_classes, strategy_class

    specs = {kind: spec for spec in spec_classes() for kind in spec.kinds()}
    assert {kind: specs[kind].wiring for kind in STRATEGIES} == {
        kind: strategy_class(kind).topology for kind in STRATEGIES
    }


@pytest.mark.parametrize("key", ["workload", "strategy", "faults"])
def test_the_run_sections_belong_to_the_jobs(key):
    data = {
        "name": "x",
        "jobs": [job("a", 1, RING)],
        key: WORKLOAD if key == "workload" else {},
    }
    with pytest.raises(ScenarioError, match=rf"{key}: the scenario has jobs:, and each job"):
        scenario_from_dict(data)


def test_colocated_ps_tasks_sit_on_their_own_job_hosts():
    s = scenario(
        [job("a", 2, "parameter_server", ps=1), job("b", 2, "parameter_server", ps=1)],
        ps=2,
        ps_placement="colocated",
    )
    assert s.cluster.ps_placement == ["worker0", "worker2"]
    assert [js.cluster.ps_placement for js in s.job_scenarios] == [["worker0"], ["worker2"]]
    shared = simulate_jobs(s, runs(s))
    # The PS task has no NIC of its own: it uses its job's first host's.
    for j, js in zip(s.jobs, s.job_scenarios, strict=True):
        mine = shared.results[j.name]
        pd.testing.assert_frame_equal(mine.events, simulate(js, costs()).events)
        links = mine.tables["links"].set_index("link")
        assert list(links.index) == [
            f"{h}/{side}" for h in j.hosts for side in ("intra", "nic/rx", "nic/tx")
        ]
        assert links.loc[f"{j.hosts[0]}/nic/tx", "bytes"] > 0  # pulls leaving for the other
