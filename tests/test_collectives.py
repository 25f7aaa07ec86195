"""Collective closed forms against hand-computed numbers (their occupancy: test_network)."""

from __future__ import annotations

import math

import pytest

from simdist.collectives import (
    ALGORITHMS,
    algbw_Bps,
    allreduce_s,
    busbw_Bps,
    collectives_table,
    halving_doubling_allreduce_s,
    hierarchical_allreduce_s,
    ring_allreduce_s,
    square_factors,
    torus2d_allreduce_s,
    tree_allreduce_s,
)
from simdist.errors import SimdistError

S = 1e6
ALPHA = 1e-5
B = 1e9


def exact(value: float) -> object:
    return pytest.approx(value, rel=1e-12)


def test_ring_hand_computed():
    assert ring_allreduce_s(4, S, ALPHA, B) == exact(2 * 3 * (1e-5 + 2.5e-4))
    assert ring_allreduce_s(4, S, ALPHA, B) == exact(0.00156)
    assert ring_allreduce_s(2, S, ALPHA, B) == exact(2 * (1e-5 + 5e-4))


def test_tree_hand_computed():
    # n=8: depth 3; 2(3α + S/B) = 2(3e-5 + 1e-3).
    assert tree_allreduce_s(8, S, ALPHA, B) == exact(0.00206)
    # n=5: depth ⌈log2 5⌉ = 3 as well.
    assert tree_allreduce_s(5, S, ALPHA, B) == exact(0.00206)


def test_halving_doubling_hand_computed():
    # n=8: 2·3·α + 2·(7/8)·S/B = 6e-5 + 1.75e-3.
    assert halving_doubling_allreduce_s(8, S, ALPHA, B) == exact(0.00181)
    # n=6: p'=4 → 2·2·α + 2·(3/4)·S/B, plus 2(α + S/B) = 4e-5 + 1.5e-3 + 2.02e-3.
    assert halving_doubling_allreduce_s(6, S, ALPHA, B) == exact(0.00356)


def test_hierarchical_hand_computed():
    # 2 hosts x 4 devices, intra α=1e-6 B=1e10, inter α=1e-5 B=1e9:
    # intra 2·3·(1e-6 + 1e6/4e10) = 6·2.6e-5; inter 2·1·(1e-5 + 1e6/2e9) = 2·5.1e-4.
    t = hierarchical_allreduce_s(2, 4, S, 1e-6, 1e10, ALPHA, B)
    assert t == exact(1.56e-4 + 1.02e-3)


def test_hierarchical_degenerates_to_rings():
    assert hierarchical_allreduce_s(1, 4, S, ALPHA, B, 1.0, 1.0) == exact(
        ring_allreduce_s(4, S, ALPHA, B)
    )
    assert hierarchical_allreduce_s(4, 1, S, 1.0, 1.0, ALPHA, B) == exact(
        ring_allreduce_s(4, S, ALPHA, B)
    )


def test_torus2d_hand_computed():
    # 4 x 2: 2[3(α + S/4e9) + 1(α + S/8e9)] = 2[3·2.6e-4 + 1.35e-4].
    assert torus2d_allreduce_s(4, 2, S, ALPHA, B) == exact(2 * (7.8e-4 + 1.35e-4))


@pytest.mark.parametrize("x", [1, 2, 3, 8])
def test_torus2d_with_one_row_is_a_ring(x):
    assert torus2d_allreduce_s(x, 1, S, ALPHA, B) == exact(ring_allreduce_s(x, S, ALPHA, B))


@pytest.mark.parametrize("algo", ["ring", "tree", "halving_doubling"])
def test_one_participant_costs_nothing(algo):
    assert allreduce_s(algo, 1, S, ALPHA, B) == 0.0


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 1000])
def test_zero_latency_ring_busbw_equals_link_bandwidth(n):
    t = ring_allreduce_s(n, S, 0.0, B)
    assert algbw_Bps(S, t) == exact(S / t)
    assert busbw_Bps(S, t, n) == exact(B)


def test_hierarchical_wins_only_when_the_network_is_slower():
    # Condition tested: zero latency (bandwidth-bound), 4 hosts x 4 devices, flat ring
    # over all 16 devices limited by the network link. Its bandwidth term is
    # 2·(15/16)·S/B_net; hierarchical pays 2·(3/4)·S/B_intra + 2·(3/4)·S/B_net.
    hosts, d, inter_B = 4, 4, 1e9
    flat = ring_allreduce_s(hosts * d, S, 0.0, inter_B)
    ten_x = hierarchical_allreduce_s(hosts, d, S, 0.0, 10 * inter_B, 0.0, inter_B)
    equal = hierarchical_allreduce_s(hosts, d, S, 0.0, inter_B, 0.0, inter_B)
    assert ten_x == exact(1.65e-3) and flat == exact(1.875e-3)
    assert ten_x < flat
    assert equal == exact(3e-3)
    assert equal > flat


def test_dispatcher_matches_formulas_and_topology():
    assert allreduce_s("ring", 4, S, ALPHA, B) == ring_allreduce_s(4, S, ALPHA, B)
    assert allreduce_s(
        "hierarchical",
        8,
        S,
        ALPHA,
        B,
        devices_per_host=4,
        intra_latency_s=1e-6,
        intra_bandwidth_Bps=1e10,
    ) == hierarchical_allreduce_s(2, 4, S, 1e-6, 1e10, ALPHA, B)
    assert allreduce_s("torus2d", 8, S, ALPHA, B) == torus2d_allreduce_s(4, 2, S, ALPHA, B)
    assert allreduce_s("torus2d", 8, S, ALPHA, B, x=2, y=4) == torus2d_allreduce_s(
        2, 4, S, ALPHA, B
    )
    assert set(ALGORITHMS) == {"ring", "tree", "halving_doubling", "hierarchical", "torus2d"}
    with pytest.raises(SimdistError, match="ring"):
        allreduce_s("butterfly", 4, S, ALPHA, B)
    with pytest.raises(SimdistError, match="devices_per_host"):
        allreduce_s("hierarchical", 6, S, ALPHA, B, devices_per_host=4)
    with pytest.raises(ValueError, match="topology"):
        allreduce_s("ring", 4, S, ALPHA, B, hosts=2)


def test_square_factors():
    assert square_factors(16) == (4, 4)
    assert square_factors(8) == (4, 2)
    assert square_factors(12) == (4, 3)
    assert square_factors(7) == (7, 1)


def test_collectives_table_rows_and_skips():
    rows = collectives_table(ALGORITHMS, [1, 4, 7], [S], B, ALPHA, devices_per_host=2)
    by_key = {(r["algo"], r["n"]): r for r in rows}
    assert len(rows) == 15
    assert [r["algo"] for r in rows[:5]] == list(ALGORITHMS)
    ring4 = by_key[("ring", 4)]
    assert ring4["time_s"] == exact(0.00156)
    assert ring4["algbw_Bps"] == exact(S / 0.00156)
    assert ring4["busbw_Bps"] == exact(S / 0.00156 * 1.5)
    assert by_key[("torus2d", 4)]["note"] == "2x2 torus"
    assert by_key[("hierarchical", 4)]["note"] == "2 hosts x 2 devices"
    for key in [("ring", 1), ("torus2d", 7), ("hierarchical", 7)]:
        assert by_key[key]["time_s"] is None
        assert by_key[key]["note"].startswith("skipped:")
    assert by_key[("tree", 7)]["time_s"] == exact(tree_allreduce_s(7, S, ALPHA, B))


def test_collectives_table_without_devices_per_host_skips_hierarchical():
    rows = collectives_table(["hierarchical"], [4], [S], B, ALPHA)
    assert rows[0]["time_s"] is None and "devices_per_host" in rows[0]["note"]


def test_invalid_inputs_raise():
    with pytest.raises(ValueError):
        ring_allreduce_s(0, S, ALPHA, B)
    with pytest.raises(ValueError):
        ring_allreduce_s(4, S, ALPHA, 0.0)
    with pytest.raises(ValueError):
        algbw_Bps(S, 0.0)
    assert math.isfinite(busbw_Bps(S, 1.0, 4))
