"""The collective registry: every closed form is its step pattern priced on a switch.

Each collective is defined once, as its pattern (which rank sends how big a share to
which rank, per step). These tests price the patterns round by round with a naive
reference (every round, every send, every port), compare with the derived closed forms
and the published formulas, check all-reduce = reduce-scatter + all-gather exactly, and
run the new collectives through a topology and the Network.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import simpy

from simdist.collectives import (
    INTER,
    algorithms,
    broadcast_s,
    collective_s,
    halving_doubling_allreduce_s,
    halving_reduce_scatter_s,
    hierarchical_allreduce_s,
    pairwise_all_to_all_s,
    pattern,
    reduce_s,
    ring_allreduce_s,
    ring_reduce_scatter_s,
    torus2d_allreduce_s,
    tree_allreduce_s,
)
from simdist.collectives.pattern import Pattern
from simdist.collectives.registry import OPS, square_factors, why_not
from simdist.errors import SimdistError
from simdist.hardware.cluster import Cluster
from simdist.network import Network, SwitchTopology
from simdist.runtime.recorder import Recorder
from simdist.scenario.cluster import ClusterSpec

S = 1e6
ALPHA, B = 1e-5, 1e9  # the network link
A_IN, B_IN = 2e-6, 3e11  # the intra-host link
NS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 31, 32]


def cases(ns=NS, per_hosts=(1, 2, 4)):
    """Every (op, algo, n, per_host) the registry can run."""
    for op in OPS:
        for algo in algorithms(op):
            for n in ns:
                for d in per_hosts if algo == "hierarchical" else (1,):
                    if n % d == 0 and (n < 2 or why_not(op, algo, n, d) is None):
                        yield op, algo, n, d


def reference_s(p: Pattern, nbytes: float, links: dict[str, tuple[float, float]]) -> float:
    """The pattern priced round by round on a non-blocking switch: each round costs α plus
    its busiest port's bytes over B; a port is a rank's own, or its host's NIC for a stage
    across hosts; a streamed tree phase costs its depth in α plus its streams over B."""
    total = 0.0
    for i, j in p.timeline:
        stage = p.stages[i]
        phase = stage.phases[j]
        alpha, bandwidth = links[stage.scope]
        if phase.pipelined:
            depth = max(r.depth for r in phase.rounds)
            streams = sum(float(r.chunk * stage.shard) for r in phase.rounds)
            total += depth * alpha + streams * nbytes / bandwidth
            continue
        for r in phase.rounds:
            for _ in range(r.repeat):
                tx: dict[int, float] = {}
                rx: dict[int, float] = {}
                for k, line in enumerate(stage.lines):
                    for s, t in r.sends:
                        # across hosts the lines share their host's NIC: port = host
                        src = line[s] - k if stage.scope == INTER else line[s]
                        dst = line[t] - k if stage.scope == INTER else line[t]
                        nb = float(r.chunk * stage.shard) * nbytes
                        tx[src] = tx.get(src, 0.0) + nb
                        rx[dst] = rx.get(dst, 0.0) + nb
                total += alpha + max(*tx.values(), *rx.values()) / bandwidth
    return total


def keywords(algo: str, d: int) -> dict[str, float | int]:
    if algo != "hierarchical":
        return {}
    return {"devices_per_host": d, "intra_latency_s": A_IN, "intra_bandwidth_Bps": B_IN}


@pytest.mark.parametrize(("op", "algo", "n", "d"), list(cases()))
def test_every_closed_form_is_its_pattern_priced_round_by_round(op, algo, n, d):
    p = pattern(op, algo, n, d, (0, 0))
    links = {"flat": (ALPHA, B), "inter": (ALPHA, B), "intra": (A_IN, B_IN)}
    derived = collective_s(op, algo, n, S, ALPHA, B, **keywords(algo, d))
    assert derived == pytest.approx(reference_s(p, S, links), rel=1e-12, abs=0.0)
    if n == 1:
        assert derived == 0.0


@pytest.mark.parametrize("n", range(1, 70))
@pytest.mark.parametrize("link", [(1e-5, 1e9), (2.0**-16, 2.0**30), (5e-5, 1.25e9), (0.0, 7e10)])
def test_the_published_formulas_equal_the_derived_closed_forms_bit_for_bit(n, link):
    a, b = link
    for size in (1.0, 12345.0, S, 2.0**24, 3.3e7):
        assert collective_s("all_reduce", "ring", n, size, a, b) == ring_allreduce_s(n, size, a, b)
        assert collective_s("all_reduce", "tree", n, size, a, b) == tree_allreduce_s(n, size, a, b)
        hd = collective_s("all_reduce", "halving_doubling", n, size, a, b)
        assert hd == halving_doubling_allreduce_s(n, size, a, b)
        assert collective_s("broadcast", "tree", n, size, a, b) == broadcast_s(n, size, a, b)
        assert collective_s("reduce", "tree", n, size, a, b) == reduce_s(n, size, a, b)
        x, y = square_factors(n)
        t2d = collective_s("all_reduce", "torus2d", n, size, a, b)
        assert t2d == torus2d_allreduce_s(x, y, size, a, b)
        for op in ("reduce_scatter", "all_gather"):
            rs = collective_s(op, "ring", n, size, a, b)
            assert rs == ring_reduce_scatter_s(n, size, a, b)
            if n & (n - 1) == 0:
                assert collective_s(op, "halving_doubling", n, size, a, b) == (
                    halving_reduce_scatter_s(n, size, a, b)
                )
        a2a = collective_s("all_to_all", "pairwise", n, size, a, b)
        assert a2a == pairwise_all_to_all_s(n, size, a, b)
        for d in range(1, 9):
            if n % d == 0:
                got = collective_s(
                    "all_reduce", "hierarchical", n, size, a, b, **keywords("hierarchical", d)
                )
                assert got == hierarchical_allreduce_s(n // d, d, size, A_IN, B_IN, a, b)


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8, 9, 12, 16, 30, 32])
def test_all_reduce_is_reduce_scatter_then_all_gather_exactly(n):
    for algo in ("ring", "halving_doubling", "hierarchical", "torus2d"):
        for d in (1, 2, 3) if algo == "hierarchical" else (1,):
            if why_not("reduce_scatter", algo, n, d) is not None:
                continue
            kw = keywords(algo, d)
            ar = collective_s("all_reduce", algo, n, S, ALPHA, B, **kw)
            rs = collective_s("reduce_scatter", algo, n, S, ALPHA, B, **kw)
            ag = collective_s("all_gather", algo, n, S, ALPHA, B, **kw)
            assert ar == rs + ag, (algo, d)
            # and per edge: what the all-reduce sends is what the two halves send
            both: dict[tuple[int, int], float] = {}
            for half in ("reduce_scatter", "all_gather"):
                for src, dst, share in pattern(half, algo, n, d).edges():
                    both[src, dst] = both.get((src, dst), 0.0) + share
            edges = pattern("all_reduce", algo, n, d).edges()
            assert {(s, t): v for s, t, v in edges} == both, (algo, d)


def test_hand_computed_new_collectives():
    # ring reduce-scatter over 4: 3 rounds of S/4; an all-gather alike
    assert collective_s("reduce_scatter", "ring", 4, S, ALPHA, B) == 3 * (ALPHA + S / (4 * B))
    assert collective_s("all_gather", "ring", 4, S, ALPHA, B) == 3 * (ALPHA + S / (4 * B))
    # recursive halving over 8: S/2, S/4, S/8 → 3α + 7/8·S/B
    assert collective_s("reduce_scatter", "halving_doubling", 8, S, ALPHA, B) == (
        3 * ALPHA + 0.875 * S / B
    )
    # pairwise all-to-all over 4: 3 rounds of S/4
    assert collective_s("all_to_all", "pairwise", 4, S, ALPHA, B) == 3 * (ALPHA + S / (4 * B))
    # 4 x 2 torus all-to-all: along x 3 rounds of S/4, along y 1 round of S/2
    t = collective_s("all_to_all", "torus2d", 8, S, ALPHA, B)
    assert t == 3 * (ALPHA + S / (4 * B)) + 1 * (ALPHA + S / (2 * B))
    # 2 hosts x 4: inside 3 rounds of S/4; across, 4 devices send S/2 each through one NIC
    t = collective_s("all_to_all", "hierarchical", 8, S, ALPHA, B, **keywords("hierarchical", 4))
    assert t == 3 * (A_IN + S / (4 * B_IN)) + (ALPHA + 2 * S / B)
    # hierarchical reduce-scatter: ring inside (S), ring across on the S/4 shard
    t = collective_s(
        "reduce_scatter", "hierarchical", 8, S, ALPHA, B, **keywords("hierarchical", 4)
    )
    assert t == 3 * (A_IN + S / (4 * B_IN)) + 1 * (ALPHA + S / (2 * B))


def test_pattern_edges_say_who_sends_what():
    assert pattern("reduce_scatter", "ring", 3).edges() == [
        (0, 1, 2 / 3),
        (1, 2, 2 / 3),
        (2, 0, 2 / 3),
    ]
    a2a = pattern("all_to_all", "pairwise", 3).edges()
    assert sorted(a2a) == [(s, t, 1 / 3) for s in range(3) for t in range(3) if s != t]
    # broadcast: every rank but the root receives the whole buffer once
    assert sorted(pattern("broadcast", "tree", 5).edges()) == [
        (0, 1, 1.0), (0, 2, 1.0), (0, 4, 1.0), (2, 3, 1.0)
    ]  # fmt: skip
    # 2 hosts x 2: rings inside on S, one ring per local rank across on S/2
    assert pattern("all_reduce", "hierarchical", 4, 2).edges() == [
        (0, 1, 1.0), (1, 0, 1.0), (2, 3, 1.0), (3, 2, 1.0),
        (0, 2, 0.5), (2, 0, 0.5), (1, 3, 0.5), (3, 1, 0.5),
    ]  # fmt: skip
    assert Fraction(pattern("all_reduce", "tree", 6).stages[0].phases[0].rounds[0].chunk) == (
        Fraction(1, 2)
    )


def test_what_the_registry_refuses():
    with pytest.raises(SimdistError, match="power of two"):
        pattern("reduce_scatter", "halving_doubling", 6)
    with pytest.raises(SimdistError, match="same number of devices"):
        pattern("all_reduce", "hierarchical", 6, 0)
    with pytest.raises(SimdistError, match="pairwise"):
        pattern("all_to_all", "ring", 4)
    with pytest.raises(ValueError, match="unknown collective"):
        pattern("scatter", "ring", 4)
    assert pattern("allreduce", "ring", 4) == pattern("all_reduce", "ring", 4)
    assert algorithms("broadcast") == ("tree",)
    assert why_not("all_gather", "halving_doubling", 6, 1) == "n=6 is not a power of two"


def switch_network(hosts: int, devices: int) -> tuple[simpy.Environment, Network]:
    env = simpy.Environment()
    spec = ClusterSpec.model_validate(
        {"hosts": hosts, "devices_per_host": devices, "device": {"profile": "v100"}}
    )
    topology = SwitchTopology(
        env,
        Cluster(spec),
        nic_latency_s=ALPHA,
        nic_bandwidth_Bps=B,
        intra_latency_s=A_IN,
        intra_bandwidth_Bps=B_IN,
        duplex="full",
        sharing="fair",
    )
    return env, Network(env, topology, Recorder())


@pytest.mark.parametrize(("op", "algo", "n", "d"), list(cases([2, 3, 4, 6, 8], (1, 2))))
def test_the_switch_prices_every_collective_with_its_closed_form(op, algo, n, d):
    hosts = n // d if algo == "hierarchical" else n
    _, net = switch_network(hosts, d)
    devices = net.topology.cluster.devices
    seconds, links = net.topology.collective(op, devices, S, algo)
    assert seconds == collective_s(op, algo, n, S, ALPHA, B, **keywords(algo, d))
    held = {f"worker{h}/nic/tx" for h in range(hosts)} if hosts > 1 else {"worker0/intra"}
    assert {link.name for link in links} >= held
    # every edge of the pattern is routed: the bytes on the held links add up to them
    carried = sum(net.topology.collective_link_bytes(op, devices, S, algo, links))
    edges = pattern(op, algo, n, d).edges()
    # inside a host an edge crosses the intra-host link, across hosts a NIC's tx and rx
    expected = sum(share * S * (1 if src // d == dst // d else 2) for src, dst, share in edges)
    assert carried == pytest.approx(expected, rel=1e-12)


def test_the_network_runs_the_new_collectives_and_records_them():
    env, net = switch_network(4, 1)
    devices = net.topology.cluster.devices
    rs = net.collective("reduce_scatter", devices, S, step=0)
    env.run()
    assert rs.value == (0.0, 3 * (ALPHA + S / (4 * B)))
    ag = net.collective("all_gather", devices, S, "halving_doubling", step=1)
    env.run()
    assert ag.value[1] - ag.value[0] == pytest.approx(2 * ALPHA + 0.75 * S / B, rel=1e-12)
    a2a = net.collective("all_to_all", devices, S, step=2)
    env.run()
    assert a2a.value[1] - a2a.value[0] == pytest.approx(
        pairwise_all_to_all_s(4, S, ALPHA, B), rel=1e-12
    )
    frame = net.recorder.events_frame()
    details = set(frame.loc[frame["kind"] == "comm", "detail"])
    assert {"reduce-scatter ring", "all-gather halving_doubling", "all-to-all pairwise"} <= details
    # a reduce-scatter's and an all-gather's bytes on each NIC side add up to the all-reduce's
    links = net.topology.collective("allreduce", devices, S, "ring")[1]
    whole = net.topology.collective_link_bytes("allreduce", devices, S, "ring", links)
    halves = [
        net.topology.collective_link_bytes(op, devices, S, "ring", links)
        for op in ("reduce_scatter", "all_gather")
    ]
    assert whole == [a + b for a, b in zip(*halves, strict=True)]


def test_the_collectives_package_imports_no_topology_or_cli():
    # the maths stays below the network: no teaching table reaching into a topology again
    import ast
    from pathlib import Path

    import simdist.collectives

    for path in Path(simdist.collectives.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for name in names:
                    assert not name.startswith(("simdist.network", "simdist.cli")), path.name
                    assert name.split(".")[0] not in ("simpy", "jax"), path.name
