"""Scenario loading: SI values, overrides, round-trips, and one clear error per bad file."""

import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.malformed import MALFORMED, WORKLOAD

from simdist.errors import ScenarioError, SimdistError
from simdist.hardware.cluster import effective_profile
from simdist.scenario import (
    DATASETS,
    MODELS,
    OPTIMIZERS,
    SCHEDULES,
    STRATEGIES,
    Scenario,
    StrategySpec,
    apply_overrides,
    dump_scenario,
    load_scenario,
    scenario_from_dict,
)
from simdist.strategies import MODULES, parameter_server, spec_classes, strategy_class

FULL = """\
name: ps_4w2s
seed: 3
cluster:
  worker: [w0:2222, w1:2222, w2:2222, w3:2222]
  ps: [ps0:2222, ps1:2222]
  devices_per_host: 1
  device: {profile: v100, efficiency: 0.5}
  links:
    intra_host: {bandwidth: 300GB/s, latency: 2us}
    network: {bandwidth: 10Gbit/s, latency: 50us}
workload:
  model: {name: mlp, hidden: [64, 32]}
  dataset: digits
  batch_size: 32
  optimizer: {name: momentum, learning_rate: 0.05, schedule: {kind: cosine, decay_steps: 500}}
  steps: 2000
  eval_every: 100
strategy:
  kind: parameter_server
  partitioner: min_size
  min_shard_bytes: 4MiB
  staleness_bound: 2
"""


def _write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_full_scenario_has_si_values(tmp_path):
    s = load_scenario(_write(tmp_path, FULL))
    c = s.cluster
    assert s.name == "ps_4w2s" and s.seed == 3 and s.numerics is True
    assert c.hosts == 4 and c.worker_names == ["w0", "w1", "w2", "w3"]
    assert c.ps == 2 and c.ps_names == ["ps0", "ps1"]
    assert c.links.network.bandwidth_Bps == 1.25e9
    assert c.links.network.latency_s == 5e-5
    assert c.links.intra_host.bandwidth_Bps == 300e9
    assert c.links.intra_host.latency_s == 2e-6
    assert c.device.profile == "v100" and c.device.efficiency == 0.5
    assert c.device.peak_flops is None  # not given: the cluster takes the profile's
    profile = effective_profile(c.device)
    assert (profile.peak_flops, profile.efficiency) == (15.7e12, 0.5)
    w = s.workload
    assert w.model.name == "mlp" and w.model.hidden == [64, 32]
    assert w.dataset.name == "digits" and w.dataset.test_fraction == 0.2
    assert w.optimizer.schedule is not None and w.optimizer.schedule.decay_steps == 500
    assert w.batch_size == 32 and w.global_batch_size == 128
    assert w.total_steps(10_000) == 2000
    assert isinstance(s.strategy, parameter_server.Spec)
    assert s.strategy.min_shard_bytes == 4 * 2**20 and s.strategy.staleness_bound == 2
    assert s.replicas == 4 and s.global_batch == 128


def test_defaults_and_shorthands():
    s = scenario_from_dict(yaml.safe_load("name: a\n" + WORKLOAD))
    assert s.strategy.kind == "one_device" and s.replicas == 1
    assert s.cluster.worker_names == ["worker0"] and s.cluster.ps_names == []
    assert s.cluster.links.network.bandwidth_Bps == 1.25e9
    assert s.cluster.device.profile == "cpu"
    assert s.workload.eval_every == 100 and s.workload.model.hidden == [128]


def test_ps_count_generates_names():
    data = yaml.safe_load(
        "name: a\ncluster: {hosts: 3, ps: 2}\nstrategy: parameter_server\n" + WORKLOAD
    )
    s = scenario_from_dict(data)
    assert s.cluster.ps_names == ["ps0", "ps1"] and s.cluster.worker_names[2] == "worker2"


def test_tf_config_cluster_equals_counts():
    by_names = yaml.safe_load(
        "name: a\ncluster: {worker: [h0:1, h1:1, h2:1], ps: [ps0:2, ps1:2]}\n"
        "strategy: parameter_server\n" + WORKLOAD
    )
    by_counts = yaml.safe_load(
        "name: a\ncluster: {hosts: 3, ps: 2}\nstrategy: parameter_server\n" + WORKLOAD
    )
    a, b = scenario_from_dict(by_names), scenario_from_dict(by_counts)
    assert (a.cluster.hosts, a.cluster.ps, a.replicas) == (b.cluster.hosts, b.cluster.ps, 3)
    assert a.cluster.ps_names == b.cluster.ps_names


def test_chief_trains_in_multi_worker_mirrored_but_not_in_ps():
    base = "name: a\ncluster: {chief: [c:1], worker: [w0:1, w1:1], ps: %s}\nstrategy: %s\n"
    mwm = scenario_from_dict(yaml.safe_load(base % (0, "multi_worker_mirrored") + WORKLOAD))
    assert mwm.cluster.worker_names == ["c", "w0", "w1"] and mwm.replicas == 3
    ps = scenario_from_dict(yaml.safe_load(base % (1, "parameter_server") + WORKLOAD))
    assert ps.cluster.worker_names == ["w0", "w1"] and ps.cluster.chief_names == ["c"]
    for s in (mwm, ps):
        assert scenario_from_dict(yaml.safe_load(dump_scenario(s))) == s


def test_tasks_sharing_a_host_keep_their_ports():
    text = (
        "name: a\ncluster: {chief: [localhost:2222], worker: [localhost:2223], "
        "ps: [localhost:2224]}\nstrategy: parameter_server\n" + WORKLOAD
    )
    s = scenario_from_dict(yaml.safe_load(text))
    assert s.cluster.worker_names == ["localhost:2223"]
    assert s.cluster.ps_names == ["localhost:2224"]
    assert scenario_from_dict(yaml.safe_load(dump_scenario(s))) == s


def test_global_batch_size_sets_per_replica_batch():
    text = (
        "name: a\ncluster: {hosts: 2, devices_per_host: 2}\nstrategy: multi_worker_mirrored\n"
        + WORKLOAD.replace("batch_size: 32", "global_batch_size: 64").replace(
            "steps: 100", "epochs: 1.5"
        )
    )
    s = scenario_from_dict(yaml.safe_load(text))
    assert s.replicas == 4 and s.workload.batch_size == 16 and s.global_batch == 64
    assert s.workload.total_steps(1000) == 24  # ceil(1.5 * 1000 / 64)
    assert scenario_from_dict(yaml.safe_load(dump_scenario(s))) == s


def test_tpu_defaults_to_tpu_profile_unless_given():
    s = scenario_from_dict(
        yaml.safe_load("name: a\nstrategy: {kind: tpu, topology: [2, 4]}\n" + WORKLOAD)
    )
    assert s.cluster.device.profile == "tpu-v4" and s.replicas == 8
    data = yaml.safe_load("name: a\nstrategy: tpu\ncluster: {device: {profile: cpu}}\n" + WORKLOAD)
    assert scenario_from_dict(data).cluster.device.profile == "cpu"


def test_mirrored_replicas_are_devices_of_one_host():
    data = yaml.safe_load(
        "name: a\nstrategy: mirrored\ncluster: {devices_per_host: 4}\n" + WORKLOAD
    )
    s = scenario_from_dict(data)
    assert s.replicas == 4 and s.global_batch == 128


def test_overrides_apply_and_are_validated(tmp_path):
    path = _write(tmp_path, FULL)
    s = load_scenario(
        path,
        overrides=[
            "cluster.links.network.bandwidth=25Gbit/s",
            "workload.optimizer.learning_rate=0.1",
            "strategy.mode=sync",
            "strategy.backup_workers=1",
            "strategy.staleness_bound=null",
            "strategy.lr_staleness=none",
        ],
        seed=9,
    )
    assert s.cluster.links.network.bandwidth_Bps == 25e9 / 8
    assert s.workload.optimizer.learning_rate == 0.1
    assert s.strategy.backup_workers == 1 and s.seed == 9
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides=["cluster.links.network.bandwidth=10 Gigs"])
    assert info.value.source == str(path)
    assert info.value.field == "cluster.links.network.bandwidth"
    assert "10 Gigs" in info.value.message


def test_apply_overrides_creates_paths_and_expands_shorthands():
    data = {"strategy": "mirrored", "workload": {"model": "mlp"}}
    out = apply_overrides(
        data,
        ["strategy.all_reduce=tree", "cluster.devices_per_host=4", "workload.model.hidden=[8]"],
        "--set",
    )
    assert out["strategy"] == {"kind": "mirrored", "all_reduce": "tree"}
    assert out["cluster"] == {"devices_per_host": 4}
    assert out["workload"]["model"] == {"name": "mlp", "hidden": [8]}
    assert data == {"strategy": "mirrored", "workload": {"model": "mlp"}}
    assert apply_overrides({}, ["strategy=parameter_server"], "--set") == {
        "strategy": "parameter_server"
    }


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("cluster.hosts", "no '='"),
        ("=3", "bad path"),
        ("cluster..hosts=3", "bad path"),
        ("name.x=1", "not a mapping"),
        ("seed=[1", "not valid YAML"),
    ],
)
def test_bad_set_is_a_scenario_error(override, fragment):
    with pytest.raises(ScenarioError) as info:
        apply_overrides({"name": "a"}, [override], "--set")
    assert info.value.source == "--set"
    assert fragment in info.value.message


def test_dump_round_trip(tmp_path):
    s = load_scenario(_write(tmp_path, FULL))
    text = dump_scenario(s)
    again = scenario_from_dict(yaml.safe_load(text))
    assert again == s
    assert yaml.safe_load(text)["cluster"]["links"]["network"]["bandwidth"] == 1.25e9


def test_npz_path_is_resolved_against_scenario_folder(tmp_path):
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "d.npz", x=np.zeros((4, 2)), y=np.zeros(4))
    text = "name: a\n" + WORKLOAD.replace("dataset: digits", "dataset: {npz: data/d.npz}")
    s = load_scenario(_write(tmp_path, text))
    assert s.workload.dataset.name == "npz"
    assert s.workload.dataset.path == (tmp_path / "data" / "d.npz").resolve()
    assert scenario_from_dict(yaml.safe_load(dump_scenario(s))) == s


def test_name_lists_for_the_cli():
    assert "parameter_server" in STRATEGIES and "mlp" in MODELS and "digits" in DATASETS
    assert "adam" in OPTIMIZERS and "cosine" in SCHEDULES


def test_attribute_names_are_accepted_too():
    s = Scenario.model_validate(
        yaml.safe_load(
            "name: a\ncluster: {links: {network: {bandwidth_Bps: 1e9, latency_s: 0}}}\n" + WORKLOAD
        )
    )
    assert s.cluster.links.network.bandwidth_Bps == 1e9


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_scenario_gives_one_clear_error(tmp_path, text, field, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert err.source == str(path)
    assert err.field == field, str(err)
    assert fragment in err.message, str(err)
    assert "pydantic" not in str(err) and "Traceback" not in str(err)
    assert str(err).startswith(f"{path}: ")


def test_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(tmp_path / "absent.yaml")


def test_first_error_is_reported_in_a_stable_order():
    data = yaml.safe_load(
        WORKLOAD.replace("batch_size: 32", "batch_size: x") + "seed: -1\nname: a/b\n"
    )
    for _ in range(3):
        with pytest.raises(ScenarioError) as info:
            scenario_from_dict(data, source="x.yaml")
        assert info.value.field == "name"


# ---------------------------------------------------------------- the strategy registry

_FAILURE = "faults: {failures: [{target: %s, at: 1ms, restart_after: 1ms}]}\n"
_SYNC_ONLY = (
    "has no effect with mode: sync (every gradient of a step is computed from the same "
    "version); remove it or use mode: async"
)

# Each strategy module's Spec.check (and the generic checks that ask it) keeps the exact
# messages they gave before the checks moved out of the scenario schema.
STRATEGY_CHECKS = [
    (
        "cluster: {hosts: 2}\nstrategy: tpu\n",
        "cluster.hosts",
        "got 2; strategy tpu puts all 2x2 chips on one host linked by intra_host (the ICI); "
        "use hosts: 1 and size the torus with strategy.topology",
    ),
    (
        "cluster: {devices_per_host: 3}\nstrategy: tpu\n",
        "cluster.devices_per_host",
        "got 3; strategy tpu takes its chip count from strategy.topology (2x2 = 4 chips); "
        "remove devices_per_host",
    ),
    (
        "cluster: {hosts: 2}\nstrategy: central_storage\n",
        "cluster.hosts",
        "got 2; strategy central_storage runs on one host (hosts: 1); "
        "for several hosts use strategy: multi_worker_mirrored",
    ),
    (
        "cluster: {ps: 1}\nstrategy: default\n",
        "cluster.ps",
        "got 1; parameter-server tasks are only used by strategy: parameter_server "
        "(strategy here is default); remove ps or use ps: 0",
    ),
    (
        "cluster: {ps: 1}\nstrategy: {kind: parameter_server, mode: sync, staleness_bound: 1}\n",
        "strategy.staleness_bound",
        _SYNC_ONLY,
    ),
    (
        "cluster: {ps: 1}\nstrategy: {kind: parameter_server, mode: sync, lr_staleness: inverse}\n",
        "strategy.lr_staleness",
        _SYNC_ONLY,
    ),
    (
        "cluster: {ps: 1}\nstrategy: {kind: parameter_server, mode: sync}\n"
        "checkpoint: {every_steps: 10, storage_bandwidth: 1GB/s}\n",
        "checkpoint",
        "checkpoints are simulated for parameter_server in mode: async only; "
        "remove checkpoint or use mode: async",
    ),
    (
        "cluster: {hosts: 2, ps: 1}\nstrategy: {kind: parameter_server, mode: sync}\n"
        + _FAILURE % "worker 1",
        "faults.failures[0]",
        "failures are simulated for parameter_server in mode: async only (sync mode with "
        "failures is not modelled yet); use mode: async, or a synchronous strategy such as "
        "multi_worker_mirrored",
    ),
    (
        "cluster: {hosts: 2}\nstrategy: multi_worker_mirrored\n" + _FAILURE % "ps 0",
        "faults.failures[0].target",
        "got 'ps 0'; only parameter_server has ps tasks; e.g. target: worker 0",
    ),
    (
        "cluster: {hosts: 2, ps: 1}\nstrategy: parameter_server\n" + _FAILURE % "ps 1",
        "faults.failures[0].target",
        "got 'ps 1'; this cluster has ps 0..0, e.g. target: ps 0",
    ),
    (
        "cluster: {hosts: 2}\nfaults: {stragglers: [{worker: 1, slowdown: 2}]}\n",
        "faults.stragglers[0].worker",
        "got 1; this cluster has workers 0..0, e.g. worker: 0",
    ),
    (
        "cluster: {devices_per_host: 2}\nstrategy: mirrored\n"
        "faults: {stragglers: [{device: 2, slowdown: 2}]}\n",
        "faults.stragglers[0].device",
        "got 2; this run has devices 0..1, e.g. device: 0",
    ),
    (
        "cluster: {ps: 1}\nstrategy: {kind: parameter_server, max_shards: 0}\n",
        "strategy.max_shards",
        "got 0; expected a value >= 1, e.g. max_shards: 4",
    ),
    (
        "strategy: {kind: tpu, topology: [2]}\n",
        "strategy.topology",
        "got [2]; list should have at least 2 items after validation, not 1, e.g. topology: [2, 2]",
    ),
    (
        "cluster: {ps: 1}\nstrategy: {kind: parameter_server, mode: sink}\n",
        "strategy.mode",
        "got 'sink'; expected one of 'async', 'sync', e.g. mode: async",
    ),
]


@pytest.mark.parametrize(("text", "field", "message"), STRATEGY_CHECKS)
def test_strategy_checks_give_their_exact_message(text, field, message):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(yaml.safe_load("name: a\n" + text + WORKLOAD))
    assert (info.value.field, info.value.message) == (field, message)


def test_strategy_union_is_built_from_the_registry():
    union = typing.get_args(typing.get_args(StrategySpec)[0])
    assert union == spec_classes()
    assert STRATEGIES == tuple(kind for spec in spec_classes() for kind in spec.kinds())
    assert STRATEGIES == (
        "one_device",
        "default",
        "mirrored",
        "multi_worker_mirrored",
        "central_storage",
        "tpu",
        "parameter_server",
        "pipeline",
        "zero",
        "fsdp",
        "tensor_parallel",
        "hybrid",
        "local_sgd",
        "expert_parallel",
    )


@pytest.mark.parametrize("kind", STRATEGIES)
def test_every_registered_kind_validates(kind):
    cluster = "{ps: 1}" if kind == "parameter_server" else "{}"
    data = yaml.safe_load(f"name: a\ncluster: {cluster}\nstrategy: {kind}\n" + WORKLOAD)
    if kind == "expert_parallel":  # it trains a mixture of experts only
        data["workload"]["model"] = "moe"
    s = scenario_from_dict(data)
    spec = type(s.strategy)
    assert s.strategy.kind == kind and spec in spec_classes() and kind in spec.kinds()
    assert s.replicas == s.strategy.replicas(s.cluster) >= 1
    module = MODULES[spec_classes().index(spec)]  # the Spec and the class share a module
    assert spec.__module__.split(".")[2] == strategy_class(kind).__module__.split(".")[2] == module
    assert scenario_from_dict(yaml.safe_load(dump_scenario(s))) == s


def test_runs_on_devices_reads_execution_where_a_strategy_has_it():
    """Scenario.runs_on_devices reads ``execution`` from the sections that declare it: if
    one renamed it, this list (not a silent False) would change."""
    declares = [
        kind for spec in spec_classes() if "execution" in spec.model_fields for kind in spec.kinds()
    ]
    assert declares == [
        "mirrored",
        "multi_worker_mirrored",
        "central_storage",
        "tpu",
        "zero",
        "fsdp",
        "tensor_parallel",
        "hybrid",
        "local_sgd",
        "expert_parallel",
    ]
    text = "name: a\nstrategy: {kind: mirrored, execution: %s}\nnumerics: %s\n" + WORKLOAD
    runs = {
        (execution, numerics): scenario_from_dict(
            yaml.safe_load(text % (execution, numerics))
        ).runs_on_devices
        for execution in ("devices", "batched")
        for numerics in ("true", "false")
    }
    assert runs == {
        ("devices", "true"): True,
        ("devices", "false"): False,
        ("batched", "true"): False,
        ("batched", "false"): False,
    }
    assert not scenario_from_dict(yaml.safe_load("name: a\n" + WORKLOAD)).runs_on_devices


def test_unknown_kind_lists_every_registered_kind():
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(yaml.safe_load("name: a\nstrategy: horovod\n" + WORKLOAD))
    listed = ", ".join(repr(kind) for kind in STRATEGIES)
    assert info.value.field == "strategy.kind"
    expected = f"got 'horovod'; expected one of {listed}, e.g. strategy: one_device"
    assert info.value.message == expected
    with pytest.raises(SimdistError, match="unknown strategy 'horovod'"):
        strategy_class("horovod")


def test_the_registry_imports_no_strategy_module():
    code = (
        "import sys, simdist.strategies as s\n"
        "assert len(s.MODULES) == 13\n"
        "heavy = ('simpy', 'jax', 'pandas')\n"
        "print(sorted(m for m in sys.modules if m.startswith('simdist.strategies.') "
        "or m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- ratios and times written a:b are text, not YAML 1.1's base 60 ----------------------


SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@pytest.mark.parametrize("written", ['"4:1"', "4:1", "4"])
def test_oversubscription_4_1_reads_as_four_however_it_is_written(tmp_path, written):
    """YAML 1.1 reads unquoted 4:1 as the base-60 number 241: simdist's loader does not."""
    text = (SCENARIOS / "leaf_spine_2racks.yaml").read_text()
    assert 'oversubscription: "4:1"' in text
    path = tmp_path / "racks.yaml"
    path.write_text(text.replace('oversubscription: "4:1"', f"oversubscription: {written}"))
    assert load_scenario(path).cluster.network.oversubscription == 4.0
    overridden = load_scenario(
        SCENARIOS / "leaf_spine_2racks.yaml", [f"cluster.network.oversubscription={written}"]
    )
    assert overridden.cluster.network.oversubscription == 4.0


def test_the_scenario_loader_keeps_base_60_forms_as_text():
    from simdist.scenario.strict_yaml import parse_yaml

    data = parse_yaml("a: 4:1\nb: 1:30:00\nc: 241\nd: 1.5\ne: 0x1f\nf: 2:1.5", "x.yaml")
    assert data == {"a": "4:1", "b": "1:30:00", "c": 241, "d": 1.5, "e": 31, "f": "2:1.5"}


def test_a_sweep_grid_of_ratios_keeps_them_as_text():
    from simdist.sweep.grid import expand_values

    assert expand_values("4:1,2:1", "grid") == ["4:1", "2:1"]
    assert expand_values('["4:1", 8]', "grid") == ["4:1", 8]
    assert expand_values("[4:1, 8]", "grid") == ["4:1", 8]
