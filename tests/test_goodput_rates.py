"""Failure rates from published fleets (simdist.goodput.rates): Table 5 of the Llama 3 paper
as transcribed, Kokolis et al.'s node rates, and the Llama 3 snapshot's interruption count
reproduced within its Poisson band from rates that were not fitted on it."""

from __future__ import annotations

import pytest

from simdist.goodput.checkpoint import CheckpointCost
from simdist.goodput.horizon import Plan
from simdist.goodput.rates import (
    KOKOLIS_NODE_RATES,
    LLAMA3_DAYS,
    LLAMA3_INTERRUPTIONS,
    LLAMA3_PLANNED,
    LLAMA3_TABLE5,
    Layout,
    expected_interruptions,
    job_causes,
    preset,
)
from simdist.goodput.study import Study, poisson_band

LLAMA3 = Layout(gpus=16_384, hosts=2_048, switches=1_024, replicas=128)


def test_table5_as_transcribed():
    assert sum(count for _, _, count, _, _ in LLAMA3_TABLE5) == 419
    assert LLAMA3_INTERRUPTIONS - LLAMA3_PLANNED == 419
    gpu = sum(count for _, category, count, _, _ in LLAMA3_TABLE5 if category == "GPU")
    # The text's "58.7%" of GPU issues is the sum of the GPU rows' printed percentages.
    assert gpu == 268
    hardware = sum(
        count for _, category, count, _, _ in LLAMA3_TABLE5
        if category in ("GPU", "Host", "Network")
    )  # fmt: skip
    # "about 78% of unexpected interruptions [...] attributed to hardware" (Sec. 3.3.4)
    assert hardware / 419 == pytest.approx(0.773, abs=0.001)


def test_the_fitted_preset_reproduces_the_snapshot_by_construction():
    expected = expected_interruptions(preset("llama3_405b"), LLAMA3, LLAMA3_DAYS)
    assert sum(expected.values()) == pytest.approx(466.0)
    assert expected["Faulty GPU"] == pytest.approx(148.0)
    assert expected["Planned maintenance"] == pytest.approx(47.0)


def test_kokolis_node_rate_gives_their_mttf_for_16k_gpus():
    # RSC-1: 6.50 failures per 1,000 node-days; 2,048 nodes of 8 GPUs: MTTF 1.8 h.
    mttf_h = 24.0 / (2_048 * KOKOLIS_NODE_RATES["rsc1"])
    assert mttf_h == pytest.approx(1.80, abs=0.01)


def test_llama3_count_within_the_poisson_band_of_rates_from_a_second_source():
    # rsc2_nodes: the host hardware rows at Kokolis et al.'s RSC-2 node rate (2.34 per
    # 1,000 node-days, a second source); the other rows at Table 5's own rates.
    expected = expected_interruptions(preset("rsc2_nodes"), LLAMA3, LLAMA3_DAYS)
    hardware = sum(v for name, v in expected.items() if name in _hardware_rows())
    assert hardware == pytest.approx(2.34e-3 * 2_048 * 54)  # 258.8
    total = sum(expected.values())
    assert total == pytest.approx(435.785, abs=1e-3)
    low, high = poisson_band(total)
    assert (low, high) == (395, 477)
    assert low <= LLAMA3_INTERRUPTIONS <= high
    unplanned = total - expected["Planned maintenance"]
    low, high = poisson_band(unplanned)
    assert low <= 419 <= high


def test_rsc1_rates_would_not_reproduce_it():
    # RSC-1's node rate is 2.8 times RSC-2's: the count it predicts is far outside the band.
    total = sum(expected_interruptions(preset("rsc1_nodes"), LLAMA3, LLAMA3_DAYS).values())
    low, _ = poisson_band(total)
    assert low > LLAMA3_INTERRUPTIONS


def test_the_simulated_counts_follow_the_rates():
    cost = CheckpointCost(nbytes=1e9, storage_Bps=1e9)
    plan = Plan(step_s=6.0, every_steps=100, checkpoint=cost, restart_s=600.0,
                horizon_s=LLAMA3_DAYS * 86400.0)  # fmt: skip
    study = Study(plan, LLAMA3, preset("rsc2_nodes"), seeds=20)
    table = study.interruptions()
    mean = table["mean"].sum()
    # 20 horizons: the mean's standard deviation is sqrt(435.8 / 20) = 4.7.
    assert abs(mean - 435.785) < 3 * 4.7
    assert table["expected"].sum() == pytest.approx(435.785, abs=1e-3)
    low, high = poisson_band(435.785)
    per_seed = study.per_seed()["interruptions"]
    assert ((per_seed >= low - 20) & (per_seed <= high + 20)).all()


def test_elastic_takes_out_the_copies_on_a_failed_host():
    layout = Layout(gpus=64, hosts=8, switches=4, replicas=64, replicas_per_host=8)
    causes = {
        c.cause.name: c.replicas_lost for c in job_causes(preset("llama3_405b"), layout, True)
    }
    assert causes["Faulty GPU"] == 1
    assert causes["NIC"] == 8
    assert causes["Host Maintenance"] == 8
    assert causes["Network Switch/Cable"] == 0
    assert causes["Software Bug"] == 0
    assert causes["Planned maintenance"] == 0
    stopping = job_causes(preset("llama3_405b"), layout, False)
    assert {c.replicas_lost for c in stopping} == {0}


def _hardware_rows() -> set[str]:
    return {name for name, _, _, _, hw in LLAMA3_TABLE5 if hw}
