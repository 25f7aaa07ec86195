"""Step-time variability: on by default, seeded, and what it changes about sync against async."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from helpers import tiny

import simdist
from simdist.errors import ScenarioError
from simdist.hardware.variability import DEVICE_SIGMA, STEP_SIGMA, Variability
from simdist.runtime.ties import random_ties
from simdist.scenario import scenario_from_dict
from simdist.strategies.parameter_server.sync_backup import Arrival, first_arrivals

PS_4W2S = "scenarios/ps_4w2s.yaml"
OFF = {"cluster.device.variability": 0}


# -- the draws (pure) -------------------------------------------------------------------


def test_factors_have_mean_one_and_the_measured_spreads():
    draws = Variability([(STEP_SIGMA, 0.0)], seed=0)
    logs = np.log([draws.factor(0, 0, step) for step in range(20_000)])
    assert np.exp(logs).mean() == pytest.approx(1.0, abs=1e-3)
    assert logs.std() == pytest.approx(STEP_SIGMA, rel=0.02)
    devices = Variability([(0.0, DEVICE_SIGMA)], seed=0, devices=[5_000])
    per_device = np.array([devices.device_factor(0, local) for local in range(5_000)])
    assert np.log(per_device).std() == pytest.approx(DEVICE_SIGMA, rel=0.05)
    assert per_device.mean() == pytest.approx(1.0, rel=1e-12)  # the class's mean: nominal
    # a persistent factor: the same at every step
    assert {devices.factor(0, 7, step) for step in range(600)} == {devices.device_factor(0, 7)}


def test_persistent_factors_have_mean_one_per_device_class():
    draws = Variability(
        [(0.0, 0.3)] * 3, seed=0, classes=["v100", "a100", "v100"], devices=[4, 2, 4]
    )
    v100 = [draws.device_factor(h, d) for h in (0, 2) for d in range(4)]
    a100 = [draws.device_factor(1, d) for d in range(2)]
    assert sum(v100) / 8 == pytest.approx(1.0, rel=1e-12) and len(set(v100)) == 8
    assert sum(a100) / 2 == pytest.approx(1.0, rel=1e-12)
    alone = Variability([(0.05, 0.3)], seed=0)  # one device: exactly its nominal speed
    assert alone.device_factor(0, 0) == 1.0


def test_a_factor_is_a_pure_function_of_seed_device_and_step():
    one = Variability([(0.1, 0.1)] * 2, seed=3, devices=[4, 4])
    other = Variability([(0.1, 0.1)] * 5, seed=3, devices=[4] * 5)  # more hosts
    picks = [(0, 0, 0), (1, 3, 300), (0, 2, 17), (1, 0, 255), (1, 0, 256)]
    # the first two hosts keep their draws; only their class's common divisor moves
    ratios = [one.factor(*p) / other.factor(*p) for p in picks]
    assert ratios == pytest.approx([ratios[0]] * len(picks), rel=1e-12)
    again = Variability([(0.1, 0.1)] * 2, seed=3, devices=[4, 4])
    assert [again.factor(*p) for p in reversed(picks)][::-1] == [one.factor(*p) for p in picks]
    assert one.factor(0, 0, 5) != Variability([(0.1, 0.1)] * 2, seed=4).factor(0, 0, 5)
    assert not Variability([(0.0, 0.0)], seed=0)
    assert Variability([(0.0, 0.0)], seed=0).factor(0, 0, 9) == 1.0


# -- the scenario field -----------------------------------------------------------------


def test_variability_is_on_by_default_and_zero_turns_it_off():
    spec = scenario_from_dict(tiny(**{"cluster.device": {"profile": "v100"}}))
    assert (spec.cluster.device.variability.step, spec.cluster.device.variability.device) == (
        STEP_SIGMA,
        DEVICE_SIGMA,
    )
    for off in (0, False, "off"):
        spec = scenario_from_dict(tiny(**{"cluster.device.variability": off}))
        assert spec.cluster.device.variability.model_dump() == {"step": 0.0, "device": 0.0}
    for on in (True, "on"):
        spec = scenario_from_dict(tiny(**{"cluster.device.variability": on}))
        assert spec.cluster.device.variability.model_dump() == {
            "step": STEP_SIGMA,
            "device": DEVICE_SIGMA,
        }
    spec = scenario_from_dict(tiny(**{"cluster.device.variability": {"step": 0.1}}))
    assert spec.cluster.device.variability.model_dump() == {"step": 0.1, "device": DEVICE_SIGMA}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.05, r"cluster\.device\.variability.*a number alone can only be 0.*step: 0\.05"),
        ({"step": -0.1}, r"cluster\.device\.variability\.step"),
        ({"jitter": 0.1}, r"cluster\.device\.variability\.jitter"),
    ],
)
def test_a_bad_variability_is_one_clear_error(value, message):
    with pytest.raises(ScenarioError, match=message):
        scenario_from_dict(tiny(**{"cluster.device.variability": value}))


def test_listed_hosts_take_the_clusters_variability_unless_they_set_their_own():
    hosts = [
        {"name": "a", "profile": "v100"},
        {"name": "b", "device": {"profile": "a100"}},
        {"name": "c", "device": {"profile": "a100", "variability": {"step": 0.2}}},
    ]
    spec = scenario_from_dict(
        tiny(**{"cluster.hosts": hosts, "strategy.kind": "multi_worker_mirrored"})
    ).cluster
    spreads = [spec.host_device(i).variability.model_dump() for i in range(3)]
    assert spreads == [
        {"step": 0.0, "device": 0.0},  # TINY's cluster.device.variability: 0
        {"step": 0.0, "device": 0.0},
        {"step": 0.2, "device": DEVICE_SIGMA},
    ]


# -- the clock ----------------------------------------------------------------------------


def test_one_device_steps_take_the_calibrated_time_times_each_steps_factor():
    spread = {"step": 0.2, "device": 0.1}
    result = simdist.run(
        tiny(**{"cluster.device.variability": spread, "numerics": False, "workload.steps": 6})
    )
    draws = Variability([(0.2, 0.1)], seed=0)
    compute = result.events[result.events["kind"] == "compute"]
    expected = [1e-3 * draws.factor(0, 0, step) for step in range(6)]
    assert (compute["end_s"] - compute["start_s"]).tolist() == pytest.approx(expected, rel=1e-12)
    assert result.summary["simulated_time_s"] == pytest.approx(sum(expected), rel=1e-12)


def test_two_workers_of_the_main_job_differ_in_step_time_by_default():
    events = simdist.run(PS_4W2S, numerics=False, workload__steps=200).events
    compute = events[events["kind"] == "compute"]
    seconds = (compute["end_s"] - compute["start_s"]).groupby([compute["step"], compute["device"]])
    per_step = seconds.sum().unstack().iloc[:40]  # every worker's first 40 iterations
    assert per_step.notna().all().all()
    assert (per_step["w0/cpu0"] != per_step["w1/cpu0"]).all()
    assert (per_step.std(axis=0) > 0).all()  # and each varies from step to step


def test_the_same_seed_gives_byte_identical_reports_across_processes(tmp_path):
    """With variability on (the default), two processes write the same bytes, file by file."""
    for out in ("a", "b"):
        subprocess.run(
            [sys.executable, "-m", "simdist", "run", PS_4W2S, "--out", str(tmp_path / out),
             "-q", "--set", "workload.steps=200", "--set", "workload.eval_every=50"],
            check=True,
            capture_output=True,
        )  # fmt: skip
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "events.csv" in names and "updates.csv" in names and "trace.json" in names
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    one, again = (simdist.run(PS_4W2S, numerics=False, workload__steps=100) for _ in range(2))
    assert one.events.equals(again.events) and one.tables["updates"].equals(again.tables["updates"])
    other = simdist.run(PS_4W2S, numerics=False, workload__steps=100, seed=1)
    assert not one.events["end_s"].equals(other.events["end_s"])


# -- sync against async on the main job ------------------------------------------------


@pytest.fixture(scope="module")
def main_job():
    """ps_4w2s, 400 gradients: async at its rate, and sync steps of 4 gradients at 4 × it."""
    short = {"workload.steps": 400, "workload.eval_every": 40}
    sync = {
        **short,
        "workload.steps": 100,
        "workload.eval_every": 10,
        "strategy.mode": "sync",
        "workload.optimizer.learning_rate": 0.4,
    }
    return simdist.run(PS_4W2S, overrides=short), simdist.run(PS_4W2S, overrides=sync)


def test_staleness_of_the_main_job_is_not_the_worker_index(main_job):
    updates = main_job[0].tables["updates"]
    per_worker = updates.groupby("worker")["staleness"]
    assert (per_worker.nunique() >= 3).all()  # each worker sees several stalenesses
    assert per_worker.mean().max() - per_worker.mean().min() < 1.0  # no worker is "k"
    assert updates["staleness"].max() > 3  # beyond workers - 1: the workers drift


def shared_read_share(updates, ps: int) -> float:
    """The share of iterations in which every worker read one version from PS ``ps``.

    ``version`` is the PS's version *after* an update (unique per update), so the version a
    worker read, and computed its gradient from, is ``version - 1 - staleness``. Only the
    iterations every worker reached count (the last few are some workers' alone).
    """
    mine = updates[updates["ps"] == ps]
    read = (mine["version"] - 1 - mine["staleness"]).groupby(mine["iteration"])
    everyone = read.size() == mine["worker"].nunique()
    return float((read.nunique() == 1)[everyone].mean())


def test_the_workers_of_the_main_job_rarely_read_one_version_together():
    """ps_4w2s as shipped: all four read the same version in 0.6% (ps0) and 0.2% (ps1) of
    their 483 common iterations; lock-step makes it every one (the next test)."""
    updates = simdist.run(PS_4W2S, numerics=False).tables["updates"]
    assert updates["iteration"].max() >= 470
    shares = [shared_read_share(updates, ps) for ps in (0, 1)]
    assert shares == pytest.approx([3 / 483, 1 / 483], abs=1e-12)
    assert max(shares) <= 0.05


def test_async_differs_from_sync_at_the_matched_learning_rate(main_job):
    async_run, sync_run = main_job
    a, s = (r.metrics[r.metrics["metric"] == "test_accuracy"] for r in main_job)
    # the same gradients seen at each evaluation: async update 40k against sync step 10k
    a = a.set_index("step")["value"]
    s = s.set_index(s["step"] * 4)["value"]
    common = a.index.intersection(s.index)
    assert len(common) >= 10
    assert (a[common] != s[common]).any()
    flat_a = np.concatenate([np.ravel(x) for x in _leaves(async_run.params)])
    flat_s = np.concatenate([np.ravel(x) for x in _leaves(sync_run.params)])
    assert np.abs(flat_a - flat_s).max() > 1e-3  # lock-step made them equal to 6e-7


def test_with_variability_off_the_main_job_is_lock_step():
    updates = simdist.run(PS_4W2S, overrides={**OFF, "workload.steps": 200}).tables["updates"]
    first = updates[updates["ps"] == 0]
    assert (first.groupby("worker")["staleness"].nunique() == 1).all()
    assert sorted(first.groupby("worker")["staleness"].first()) == [0, 1, 2, 3]
    assert [shared_read_share(updates, ps) for ps in (0, 1)] == [1.0, 1.0]


# -- the order of simultaneous events --------------------------------------------------


def _updates(overrides: dict) -> Any:
    return simdist.run(PS_4W2S, numerics=False, overrides=overrides).tables["updates"]


def _staleness(overrides: dict) -> tuple[float, int]:
    updates = _updates(overrides)
    return float(updates["staleness"].mean()), int(updates["staleness"].max())


def test_random_tie_order_leaves_the_staleness_unchanged():
    """The tolerance of benchmarks/tie_order.py: figures within 1e-9 relative, counts equal."""
    short = {"workload.steps": 400}
    as_scheduled = _staleness(short)
    for seed in range(3):
        with random_ties(seed):
            mean, most = _staleness(short)
        assert most == as_scheduled[1]
        assert mean == pytest.approx(as_scheduled[0], rel=1e-9, abs=0)


def test_without_variability_the_tie_order_decides_the_staleness():
    """What the test above guards against: lock-step runs take staleness from the tie order.
    Each round's four gradients reach a PS together and are applied side by side, ending
    together (one is 0 updates stale, one 1, 2 and 3: mean 1.5 either way); which worker
    gets which is the order of the simultaneous arrivals: as scheduled, worker k is k."""
    short = {**OFF, "workload.steps": 400}
    as_scheduled = _updates(short)
    with random_ties(0):
        shuffled = _updates(short)
    assert as_scheduled["staleness"].mean() == shuffled["staleness"].mean() == 1.5
    by_worker = [u[u["ps"] == 0].groupby("worker")["staleness"] for u in (as_scheduled, shuffled)]
    assert list(by_worker[0].unique().map(list)) == [[0], [1], [2], [3]]
    assert (by_worker[1].nunique() > 1).all()


def test_simultaneous_backup_arrivals_are_ordered_by_a_seeded_draw_not_the_index():
    arrivals = [Arrival(w, None, 1.0) for w in range(8)]
    orders = {tuple(a.worker for a in first_arrivals(arrivals, 7, 0, step)) for step in range(40)}
    assert len({order[-1] for order in orders}) >= 5  # the dropped one varies with the step
    assert first_arrivals(arrivals, 7, 0, 3) == first_arrivals(arrivals[::-1], 7, 0, 3)
    spread = [Arrival(0, None, 2.0), Arrival(1, None, 1.0), Arrival(2, None, 3.0)]
    assert [a.worker for a in first_arrivals(spread, 2, 0, 0)] == [1, 0, 2]


def test_identical_backup_workers_are_dropped_at_random_not_the_last_one():
    result = simdist.run(
        tiny(
            **{
                "strategy": {"kind": "parameter_server", "mode": "sync", "backup_workers": 1},
                "cluster.hosts": 4,
                "cluster.ps": 1,
                "cluster.links.network": {"bandwidth": "1GB/s", "latency": "10us"},
                "workload.steps": 40,
                "numerics": False,
            }
        )
    )
    dropped = result.tables["dropped"]
    assert len(dropped) == 40
    assert dropped["worker"].nunique() == 4  # each worker is late some time


def _leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def test_variability_costs_nothing_when_off():
    assert math.isclose(
        simdist.run(tiny(numerics=False)).summary["simulated_time_s"], 12e-3, rel_tol=1e-12
    )
