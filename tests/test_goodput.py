"""The long horizon (simdist.goodput.horizon): exact lost work on hand cases, every second
accounted for, the Young/Daly optimum, asynchronous checkpoints, elastic recovery, and draws
that are a pure function of the seed, across processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from simdist.bands import aggregate
from simdist.goodput.checkpoint import CheckpointCost
from simdist.goodput.horizon import Plan, Tally, simulate_horizon
from simdist.goodput.rates import Cause, JobCause, Layout
from simdist.goodput.study import Study, fit_optimum
from simdist.goodput.young_daly import daly_interval, first_order_goodput, young_interval

ROOT = Path(__file__).resolve().parent.parent
GPU = JobCause(Cause("GPU", "gpu", 1.0, local=True), 1e-6, 1)
SWITCH = JobCause(Cause("Switch", "switch", 1.0), 1e-6, 0)
PLANNED = JobCause(Cause("Planned", "job", 1.0, planned=True), 1e-6, 0)


def hand_plan(**changes) -> Plan:
    """Steps of 1 s, a checkpoint every 10 steps costing 2 s (2 bytes at 1 B/s), restart 5 s
    plus the reload (2 s), 100 s of horizon."""
    plan = Plan(
        step_s=1.0,
        every_steps=10,
        checkpoint=CheckpointCost(nbytes=2.0, storage_Bps=1.0),
        restart_s=5.0,
        horizon_s=100.0,
    )
    return replace(plan, **changes)


def accounted(t: Tally) -> float:
    return t.useful_s + t.degraded_s + t.checkpoint_s + t.restart_s + t.lost_s


def test_a_failure_loses_the_steps_since_the_last_checkpoint_and_the_step_in_progress():
    # Cycles of 10 steps + 2 s of checkpoint: checkpoints end at 12 and 24 (steps 10, 20);
    # at 25.5 step 21 is done and step 22 half done: 1.5 s lost. Restart 5 + 2 s: up at
    # 32.5; then cycles of 12 s end at 44.5, 56.5, 68.5, 80.5, 92.5 (steps 30..70), and
    # 7.5 s more give steps 71..77 and half a step, lost at the horizon.
    t = simulate_horizon(hand_plan(), [SWITCH], 0, failures=[(25.5, 0)])
    assert t.lost_s == 1.5 + 0.5
    assert t.restart_s == 7.0
    assert t.checkpoint_s == 7 * 2.0
    assert t.steps == 77
    assert t.useful_s == 77.0
    assert t.checkpoints == 7
    assert t.interruptions == {"Switch": 1}
    assert accounted(t) == 100.0
    assert t.goodput == 0.77
    assert t.ettr == (100.0 - 7.0 - 2.0) / 100.0


@pytest.mark.parametrize(
    ("at", "lost"),
    [
        (10.0, 10.0),  # the 10th step just done, its checkpoint not begun: all 10 lost
        (11.0, 10.0),  # during the checkpoint: it never completes
        (12.0, 0.0),  # the checkpoint just completed
        (12.25, 0.25),  # a quarter of step 11
        (21.75, 9.75),  # 9 steps and three quarters of the 10th since the checkpoint
    ],
)
def test_lost_work_at_known_times(at, lost):
    # The horizon ends at a checkpoint's end, two cycles after the restart (7 s): nothing
    # in progress is lost there, so all that is lost is lost at the failure.
    t = simulate_horizon(hand_plan(horizon_s=at + 7.0 + 24.0), [SWITCH], 0, failures=[(at, 0)])
    assert t.lost_s == pytest.approx(lost, abs=1e-12)
    assert accounted(t) == pytest.approx(at + 31.0, abs=1e-12)


def test_a_failure_during_the_restart_starts_it_again():
    t = simulate_horizon(hand_plan(), [SWITCH], 0, failures=[(25.5, 0), (30.0, 0)])
    assert t.restart_s == 4.5 + 7.0  # 25.5 -> 30, then 30 -> 37
    assert t.interruptions == {"Switch": 2}
    # Up at 37: cycles end at 49, 61, 73, 85, 97; 3 steps more by 100.
    assert t.steps == 20 + 50 + 3
    assert t.lost_s == 1.5
    assert accounted(t) == 100.0


def test_a_planned_stop_saves_first_and_loses_only_the_step_in_progress():
    t = simulate_horizon(hand_plan(), [PLANNED], 0, failures=[(25.5, 0)])
    # At 25.5: save 2 s (21 steps kept), restart 7 s: up at 34.5; cycles end at 46.5, 58.5,
    # 70.5, 82.5, 94.5; 5 steps and half a step more by 100.
    assert t.steps == 21 + 50 + 5
    assert t.lost_s == 0.5 + 0.5
    assert t.restart_s == 7.0
    assert t.checkpoint_s == 2 * 2.0 + 2.0 + 5 * 2.0
    assert accounted(t) == 100.0


@pytest.mark.parametrize(("at", "lost"), [(28.0, 17.0), (29.0, 8.0)])
def test_asynchronous_checkpoints_count_only_once_written(at, lost):
    # Blocking 0.5 s (the copy to host), then 8 s of writing: checkpoint 1 (step 10) blocks
    # at 10-10.5 and is written at 18.5; checkpoint 2 (step 20) blocks at 20.5-21 and is
    # written at 29. At 28 the last written is step 10's: 17 steps lost; at 29, step 20's.
    cost = CheckpointCost(nbytes=8.0, storage_Bps=1.0, mode="async", host_copy_Bps=16.0)
    assert (cost.blocking_s, cost.background_s, cost.reload_s()) == (0.5, 8.0, 8.0)
    # Up 13 s later (restart 5 + reload 8); the horizon ends two cycles (10.5 s) after.
    plan = hand_plan(checkpoint=cost, horizon_s=at + 13.0 + 21.0)
    t = simulate_horizon(plan, [SWITCH], 0, failures=[(at, 0)])
    assert t.lost_s == lost
    assert accounted(t) == pytest.approx(plan.horizon_s, abs=1e-12)


def test_a_checkpoint_due_while_the_last_is_being_written_waits_for_it():
    # The write (30 s) outlasts the 10 s of steps: after the first cycle (10.5 s) each is
    # 0.5 + max(10, 30) = 30.5 s; 327 of them end at 9984, then 10 steps and a wait.
    cost = CheckpointCost(nbytes=30.0, storage_Bps=1.0, mode="async", host_copy_Bps=60.0)
    t = simulate_horizon(hand_plan(checkpoint=cost, horizon_s=10_000.0), [SWITCH], 0,
                         failures=[])  # fmt: skip
    assert t.steps == 10 + 327 * 10 + 10
    assert t.checkpoint_s == pytest.approx(0.5 + 327 * 20.5 + 6.0, abs=1e-6)
    assert t.checkpoints == 327  # the last one still being written
    assert accounted(t) == pytest.approx(10_000.0, abs=1e-6)


def test_whole_cycles_advanced_at_once_are_exact():
    # No failure in 10^6 s: 83,333 cycles of 12 s end at 999,996 s, then 4 steps.
    t = simulate_horizon(hand_plan(horizon_s=1e6), [SWITCH], 0, failures=[])
    assert t.steps == 833_330 + 4
    assert t.checkpoints == 83_333
    assert t.checkpoint_s == pytest.approx(166_666.0, abs=1e-6)
    assert t.lost_s == pytest.approx(0.0, abs=1e-6)


def test_elastic_goes_on_with_one_copy_fewer_and_takes_it_back():
    # 4 copies. At 25.5 a GPU fails (step 21 done, half of 22 lost); 3 copies go on after
    # 3 s with steps of 4/3 s: steps 22-30 end at 40.5, the checkpoint at 42.5, two steps
    # more by 45.5 when the copy rejoins (a third of a step lost); 3 s later steps of 1 s
    # again: 8 steps to 56.5, checkpoints end at 58.5, 70.5, 82.5, 94.5; 5.5 steps by 100.
    plan = hand_plan(replicas=4, elastic=True, reconfigure_s=3.0, rejoin_s=20.0)
    t = simulate_horizon(plan, [GPU], 0, failures=[(25.5, 0)])
    assert t.rejoins == 1
    assert t.steps == 75
    assert t.restart_s == 6.0
    assert t.checkpoint_s == 7 * 2.0
    assert t.degraded_s == pytest.approx(11 / 3, abs=1e-12)
    assert t.lost_s == pytest.approx(0.5 + 1 / 3 + 0.5, abs=1e-12)
    assert accounted(t) == pytest.approx(100.0, abs=1e-12)
    assert t.goodput == 0.75
    # Stop-and-restart here: 7 s down, steps 21-22 redone: 77 steps (the first hand case).
    # Two pauses of 3 s and eleven slower steps cost more than one 7 s restart; against a
    # restart of 30 s (rescheduling a 16k-GPU job takes minutes) elastic wins.
    stop = simulate_horizon(replace(plan, elastic=False), [GPU], 0, failures=[(25.5, 0)])
    assert stop.goodput == 0.77
    slow = replace(plan, restart_s=30.0)
    assert simulate_horizon(slow, [GPU], 0, failures=[(25.5, 0)]).goodput == 0.75
    assert simulate_horizon(replace(slow, elastic=False), [GPU], 0,
                            failures=[(25.5, 0)]).goodput < 0.75  # fmt: skip


def test_elastic_restarts_when_too_few_copies_would_be_left():
    plan = hand_plan(replicas=2, elastic=True, reconfigure_s=3.0, rejoin_s=1e9, min_replicas=2)
    t = simulate_horizon(plan, [GPU], 0, failures=[(25.5, 0)])
    assert t.rejoins == 0
    assert t.restart_s == 7.0 and t.lost_s == 2.0


def young_daly_study(seeds: int = 8) -> Study:
    # δ = 6 s, M = 1 h (δ/M = 1/600: Young's regime), no restart cost, 100 days.
    cost = CheckpointCost(nbytes=6.0, storage_Bps=1.0, read_Bps=1e18)
    plan = Plan(step_s=1.0, every_steps=208, checkpoint=cost, restart_s=0.0,
                horizon_s=100 * 86400.0)  # fmt: skip
    return Study(plan, Layout(1, 1, 1, 1), (Cause("GPU", "gpu", 24.0),), seeds=seeds)


def test_the_simulated_optimum_interval_is_young_s_within_ten_percent():
    study = young_daly_study()
    assert study.mtbf_s() == pytest.approx(3600.0)
    young = young_interval(6.0, 3600.0)
    assert young == pytest.approx(207.846, abs=1e-3)
    swept = study.intervals()
    bands = aggregate(swept.drop(columns="seed"), ["every_steps", "interval_s"])
    optimum_s, goodput = fit_optimum(bands)
    assert abs(optimum_s / young - 1.0) < 0.10
    # Daly's higher-order optimum is closer still.
    assert abs(optimum_s - daly_interval(6.0, 3600.0)) < abs(optimum_s - young)
    # The goodput there is the first-order formula's at Young's interval.
    assert goodput == pytest.approx(first_order_goodput(young, 6.0, 3600.0), abs=0.003)
    assert goodput == pytest.approx(1.0 - math.sqrt(2 * 6.0 / 3600.0), abs=0.003)


def test_same_seed_same_horizon_and_other_seeds_differ():
    study = young_daly_study(seeds=1)
    plan = replace(study.plan, horizon_s=5 * 86400.0)
    one, again = study.horizon(3, plan), study.horizon(3, plan)
    assert one.row() == again.row()
    assert study.horizon(4, plan).row() != one.row()


def test_a_horizon_is_the_same_in_another_process():
    study = young_daly_study(seeds=1)
    plan = replace(study.plan, horizon_s=5 * 86400.0)
    here = study.horizon(3, plan).row()
    code = (
        "import json; from dataclasses import replace\n"
        "from tests.test_goodput import young_daly_study\n"
        "s = young_daly_study(seeds=1)\n"
        "p = replace(s.plan, horizon_s=5 * 86400.0)\n"
        "print(json.dumps(s.horizon(3, p).row()))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True, env=env)  # fmt: skip
    assert json.loads(done.stdout) == json.loads(json.dumps(here))


def test_weibull_gaps_keep_the_mean_and_cluster_the_failures():
    import numpy as np

    from simdist.goodput.failures import Interruptions

    causes = [JobCause(Cause("GPU", "gpu", 1.0), 1 / 3600, 0)]
    spread = {}
    for distribution, shape in (("exponential", 1.0), ("weibull", 0.7)):
        stream = Interruptions(causes, 0, distribution, shape)
        gaps = np.diff([0.0] + [stream.next()[0] for _ in range(40_000)])
        assert gaps.mean() == pytest.approx(3600.0, rel=0.03)
        spread[distribution] = gaps.std() / gaps.mean()
    # Coefficient of variation: 1 for exponential gaps; for Weibull shape 0.7,
    # sqrt(Γ(1 + 2/k) / Γ(1 + 1/k)² − 1) = 1.46: more short gaps and more long ones.
    assert spread["exponential"] == pytest.approx(1.0, abs=0.03)
    k = 0.7
    cv = math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1)
    assert spread["weibull"] == pytest.approx(cv, rel=0.06)


def test_causes_are_drawn_in_proportion_to_their_rates():
    from simdist.goodput.failures import Interruptions

    causes = [JobCause(Cause("a", "gpu", 1.0), 3e-4, 0), JobCause(Cause("b", "host", 1.0), 1e-4, 0)]
    stream = Interruptions(causes, 7)
    kinds = [stream.next()[1] for _ in range(20_000)]
    assert kinds.count(0) / len(kinds) == pytest.approx(0.75, abs=0.01)


def test_the_long_horizon_needs_neither_the_engine_nor_jax():
    code = (
        "import json, sys\n"
        "import simdist.goodput.study, simdist.goodput.measure\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=True, env=env)  # fmt: skip
    loaded = set(json.loads(done.stdout))
    assert not loaded & {"jax", "simpy", "simdist.runtime.engine", "matplotlib", "pandas"}
