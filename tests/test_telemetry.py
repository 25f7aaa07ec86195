"""Per-link telemetry: links.csv, link_buckets.csv, link_load.csv, the heatmap, trace tracks.

Hand cases use powers of two (sizes, bandwidths, latencies), so bytes, busy times and
utilisations are exact binary fractions compared with ``==``. Timing only: no JAX.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import simpy
from helpers.network import make_spec
from helpers.ps_timing import FIFO, B, S, costs, scenario
from pandas.testing import assert_frame_equal

from simdist.api import read_table
from simdist.collectives import hierarchical_allreduce_s, ring_allreduce_s
from simdist.hardware.cluster import Cluster
from simdist.network import Link, Network, SwitchTopology, TorusTopology, Transfer
from simdist.network.telemetry import (
    TABLE_DTYPES,
    bucket_edges,
    bucket_rows,
    bucket_width_s,
    link_frames,
    link_rows,
)
from simdist.network.traffic import (
    collective_edges,
    double_tree_parents,
    halving_doubling_edges,
)
from simdist.report.links import heatmap_matrix, link_lines, write_link_plots
from simdist.report.tables import write_csv
from simdist.report.trace import build_trace, link_counter_rows
from simdist.runtime.engine import simulate
from simdist.runtime.recorder import Recorder
from simdist.scenario import load_scenario
from simdist.step_costs import Costs

FAIR = {"duplex": "full", "sharing": "fair"}
NIC_B, NIC_A = 2.0**30, 2.0**-16
INTRA_B, INTRA_A = 2.0**32, 2.0**-16


def switch(env, hosts=2, devices=2, ps=0, duplex="full", sharing="fair"):
    cluster = Cluster(make_spec(hosts, devices, ps))
    topology = SwitchTopology(
        env,
        cluster,
        nic_latency_s=NIC_A,
        nic_bandwidth_Bps=NIC_B,
        intra_latency_s=INTRA_A,
        intra_bandwidth_Bps=INTRA_B,
        duplex=duplex,
        sharing=sharing,
    )
    return cluster, topology, Network(env, topology, Recorder())


def by_link(rows):
    return {row["link"]: row for row in rows}


# -- links.csv on hand cases -----------------------------------------------------------


def test_two_fair_flows_busy_time_bytes_and_buckets():
    # x (4 B/s) carries a (6 B) and b (4 B); b also crosses y (1 B/s): b runs at 1 B/s,
    # a at 3 B/s until t = 2, then b alone until t = 4; the run ends at t = 5.
    env = simpy.Environment()
    x = Link(env, "x", 0.0, 4.0, "h", sharing="fair")
    y = Link(env, "y", 0.0, 1.0, "h", sharing="fair")
    Transfer(env, [x], 6)
    Transfer(env, [x, y], 4)
    env.run(until=5.0)
    rows = by_link(link_rows([x, y], 5.0))
    assert rows["x"] == {
        "link": "x",
        "channel": "x",
        "direction": "both",
        "host": "h",
        "bandwidth_Bps": 4.0,
        "bytes": 10.0,
        "busy_s": 4.0,
        "busy_share": 0.8,
        "utilisation": 10.0 / 20.0,
        "peak_utilisation": 1.0,
    }
    assert (rows["y"]["bytes"], rows["y"]["busy_s"], rows["y"]["utilisation"]) == (4.0, 4.0, 0.8)
    buckets = bucket_rows([x, y], 5.0, width_s=2.0)
    columns = ("link", "bucket_start_s", "bucket_end_s", "bytes", "utilisation")
    got = [tuple(row[c] for c in columns) for row in buckets]
    assert got == [
        ("x", 0.0, 2.0, 8.0, 1.0),
        ("x", 2.0, 4.0, 2.0, 0.25),
        ("x", 4.0, 5.0, 0.0, 0.0),  # the last bucket ends with the run
        ("y", 0.0, 2.0, 2.0, 1.0),
        ("y", 2.0, 4.0, 2.0, 1.0),
        ("y", 4.0, 5.0, 0.0, 0.0),
    ]


def test_two_pulls_from_one_server_share_its_transmit_side():
    # Full duplex, fair: the PS sends S to each of two workers at once; its transmit side
    # runs at B for 2S/B, each worker's receive side at B/2 for as long.
    env = simpy.Environment()
    cluster, topology, net = switch(env, hosts=2, devices=1, ps=1)
    ps = next(h for h in cluster.hosts if h.name == "ps0")
    for worker in cluster.workers:
        net.send(ps, worker.devices[0], S, step=0, detail="pull")
    env.run()
    end = env.now
    assert end == 2 * NIC_A + 2 * S / NIC_B
    rows = by_link(link_rows(topology.links(), end))
    assert rows["ps0/nic/tx"]["bytes"] == 2 * S
    assert rows["ps0/nic/tx"]["busy_s"] == 2 * S / NIC_B
    assert rows["ps0/nic/tx"]["peak_utilisation"] == 1.0
    for w in ("worker0", "worker1"):
        assert rows[f"{w}/nic/rx"]["bytes"] == S
        assert rows[f"{w}/nic/rx"]["busy_s"] == 2 * S / NIC_B
        assert rows[f"{w}/nic/rx"]["peak_utilisation"] == 0.5
        assert rows[f"{w}/nic/tx"]["bytes"] == 0.0
    assert rows["ps0/nic/rx"]["bytes"] == 0.0


@pytest.mark.parametrize("network", [FIFO, FAIR, {"duplex": "full", "sharing": "fifo"}])
def test_parameter_server_bytes_on_links_are_bytes_sent_times_two_nic_sides(network):
    # Every pull and push crosses exactly two links: the sender's NIC (transmit side) and
    # the receiver's (receive side). Workers' messages are recorded on their devices.
    result = simulate(scenario(3, ps=2, network=network), costs(2.0**-10, 7, (S, S // 2)))
    events = result.events
    sent = events[(events["kind"] == "comm") & events["host"].str.startswith("worker")]
    links = result.tables["links"]
    assert links["bytes"].sum() == 2 * sent["nbytes"].sum()
    # per worker: its NIC carries what it pulled and pushed, once per side it crossed
    for w in range(3):
        mine = links[links["host"] == f"worker{w}"]
        moved = sent[sent["host"] == f"worker{w}"]["nbytes"].sum()
        assert mine["bytes"].sum() == moved
    assert (links.loc[links["link"].str.endswith("/intra"), "bytes"] == 0).all()


def test_ring_allreduce_puts_its_share_on_every_nic_side_and_intra_link():
    # 2 hosts × 2 devices, ring over 4: every ring edge carries 2(n−1)/n·S = 1.5 S; each
    # host's NIC carries one edge out and one in, its intra link its one internal edge.
    for sharing in ("fair", "fifo"):
        env = simpy.Environment()
        cluster, topology, net = switch(env, sharing=sharing)
        held = topology.collective("allreduce", cluster.devices, S, "ring")[1]
        assert topology.collective_link_bytes("allreduce", cluster.devices, S, "ring", held) == [
            1.5 * S
        ] * len(held)
        env.process(_allreduce(net, cluster.devices, "ring"))
        env.run()
        assert env.now == ring_allreduce_s(4, S, NIC_A, NIC_B)
        rows = by_link(link_rows(topology.links(), env.now))
        for link in ("worker0/nic/tx", "worker0/nic/rx", "worker1/intra"):
            assert rows[link]["bytes"] == pytest.approx(1.5 * S, rel=1e-12), (sharing, link)
            assert rows[link]["busy_s"] == env.now


def _allreduce(net, devices, algo):
    yield net.collective("allreduce", devices, S, algo, step=0)


def test_hierarchical_allreduce_bytes_per_nic_and_intra_link():
    # Horovod's hierarchical on 2 hosts × 4 devices: the NIC carries 2(h−1)/h·S each way,
    # the intra link a ring reduce-scatter + all-gather, 2(d−1)·S.
    env = simpy.Environment()
    cluster, topology, _ = switch(env, hosts=2, devices=4)
    devices = cluster.devices
    seconds, held = topology.collective("allreduce", devices, S, "hierarchical")
    assert seconds == hierarchical_allreduce_s(2, 4, S, INTRA_A, INTRA_B, NIC_A, NIC_B)
    got = dict(
        zip(
            [link.name for link in held],
            topology.collective_link_bytes("allreduce", devices, S, "hierarchical", held),
            strict=True,
        )
    )
    for host in ("worker0", "worker1"):
        assert got[f"{host}/nic/tx"] == got[f"{host}/nic/rx"] == 1.0 * S
        assert got[f"{host}/intra"] == 6.0 * S


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 13, 16])
def test_every_algorithm_sends_what_its_closed_form_prices(n):
    hosts = [0] * n
    total = {algo: 0.0 for algo in ("ring", "tree", "halving_doubling")}
    sent = {algo: [0.0] * n for algo in total}
    for algo in total:
        for src, dst, share in collective_edges("allreduce", algo, hosts):
            assert src != dst and 0 <= src < n and 0 <= dst < n
            total[algo] += share
            sent[algo][src] += share
    # Ring and the double binary tree both move 2(n−1)·S in all (per tree: S/2 up and
    # S/2 down each of its n−1 edges).
    assert total["ring"] == pytest.approx(2 * (n - 1))
    assert total["tree"] == pytest.approx(2 * (n - 1))
    assert sent["ring"] == pytest.approx([2 * (n - 1) / n] * n)
    # Rabenseifner: the p' = 2^⌊log2 n⌋ ranks send 2(p'−1)/p'·S each, plus 2·S per surplus.
    p = 1 << (n.bit_length() - 1)
    assert total["halving_doubling"] == pytest.approx(2 * (p - 1) + 2 * (n - p))
    # binomial broadcast / reduce: every rank but the root receives (sends) S once
    bcast = collective_edges("broadcast", "tree", hosts)
    assert sorted(dst for _, dst, _ in bcast) == list(range(1, n))
    reduce = collective_edges("reduce", "tree", hosts)
    assert sorted(src for src, _, _ in reduce) == list(range(1, n))
    assert sum(1 for src, _, _ in bcast if src == 0) == math.ceil(math.log2(n))


def test_double_binary_tree_matches_nccl():
    # NCCL src/graph/trees.cc's picture for 14 ranks (first tree) and 12 ranks (mirror).
    first, _ = double_tree_parents(14)
    assert [first[r] for r in (8, 4, 12, 13, 1, 3)] == [0, 8, 8, 12, 2, 2]
    _, mirror = double_tree_parents(12)
    assert [mirror[r] for r in (11, 3, 7, 0, 10)] == [-1, 11, 3, 1, 9]
    _, shifted = double_tree_parents(13)
    assert [shifted[r] for r in (1, 9, 5, 0, 12)] == [-1, 1, 9, 9, 11]
    assert halving_doubling_edges(3)[:2] == [(0, 1, 1.0), (1, 0, 1.0)]


def test_bucket_width_is_one_two_or_five_and_covers_the_run():
    assert bucket_width_s(1.0) == 0.02
    assert bucket_width_s(0.006927490234375) == 0.0002
    assert bucket_width_s(3600.0) == 100.0
    edges = bucket_edges(0.0069, 0.0002)
    assert edges[0] == 0.0 and edges[-1] == 0.0069 and len(edges) == 36
    assert edges[3] == 0.0006  # correctly rounded, not 3 × 0.0002


# -- the run's tables, report and trace -------------------------------------------------


@pytest.fixture(scope="module")
def ps_run():
    return simulate(scenario(2, ps=1, network=FAIR), costs(2.0**-10, 6))


def test_tables_round_trip_through_csv_and_are_deterministic(ps_run, tmp_path):
    again = simulate(scenario(2, ps=1, network=FAIR), costs(2.0**-10, 6))
    for name in ("links", "link_buckets", "link_load"):
        write_csv(ps_run.tables[name], tmp_path / f"{name}.csv")
        write_csv(again.tables[name], tmp_path / f"{name}.again.csv")
        assert (tmp_path / f"{name}.csv").read_bytes() == (
            tmp_path / f"{name}.again.csv"
        ).read_bytes()
        loaded = read_table(tmp_path / f"{name}.csv", TABLE_DTYPES[name])
        assert_frame_equal(loaded, ps_run.tables[name], check_exact=True)
    links = ps_run.tables["links"]
    assert list(links["link"]) == [
        "worker0/intra",
        "worker0/nic/rx",
        "worker0/nic/tx",
        "worker1/intra",
        "worker1/nic/rx",
        "worker1/nic/tx",
        "ps0/intra",
        "ps0/nic/rx",
        "ps0/nic/tx",
    ]
    # the buckets add up to the link's bytes
    buckets = ps_run.tables["link_buckets"]
    per_link = buckets.groupby("link", sort=False)["bytes"].sum()
    for name, nbytes in per_link.items():
        assert nbytes == pytest.approx(links.set_index("link").loc[name, "bytes"], rel=1e-12)


def test_an_idle_run_has_empty_tables_of_the_right_dtypes(tmp_path):
    env = simpy.Environment()
    link = Link(env, "h/nic", 0.0, 1.0, "h")
    frames = link_frames([link], 0.0)
    assert frames["links"]["bytes"].tolist() == [0.0]
    for name, frame in frames.items():
        write_csv(frame, tmp_path / f"{name}.csv")
        loaded = read_table(tmp_path / f"{name}.csv", TABLE_DTYPES[name])
        assert_frame_equal(loaded, frame, check_exact=True)


def test_trace_has_a_utilisation_track_for_every_link(ps_run):
    trace = build_trace(ps_run.events, scenario=ps_run.scenario, tables=ps_run.tables)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C" and "utilisation" in e["args"]]
    links = ps_run.tables["links"]
    assert {e["name"] for e in counters} == set(links["link"])  # the workers' NICs included
    load = ps_run.tables["link_load"]
    rx = [(e["ts"], e["args"]["utilisation"]) for e in counters if e["name"] == "worker0/nic/rx"]
    first = load[load["link"] == "worker0/nic/rx"]
    assert rx == [(t * 1e6, r / B) for t, r in zip(first["time_s"], first["rate_Bps"], strict=True)]
    assert len(link_counter_rows(ps_run.tables)) == len(counters)
    json.dumps(trace, allow_nan=False)


def test_heatmap_and_links_section(ps_run, tmp_path):
    names, edges, values = heatmap_matrix(ps_run.tables["links"], ps_run.tables["link_buckets"])
    assert "worker0/intra" not in names and "ps0/nic/tx" in names  # only links that carried
    assert values.shape == (len(names), len(edges) - 1)
    assert 0 <= values.min() and values.max() <= 1.0 + 1e-12
    assert write_link_plots(ps_run, tmp_path) == ["link_utilisation.png"]
    data = (tmp_path / "link_utilisation.png").read_bytes()
    assert data.startswith(b"\x89PNG")
    (tmp_path / "again").mkdir()
    write_link_plots(ps_run, tmp_path / "again")
    assert (tmp_path / "again" / "link_utilisation.png").read_bytes() == data
    lines = link_lines(ps_run)
    assert lines[0] == "## Links" and any("`ps0/nic/tx`" in line for line in lines)


def test_multi_worker_ring_run_puts_its_share_on_each_nic_side_every_step():
    # mwm_2x4_ring: 2 hosts × 4 devices, one ring all-reduce of S per step; each NIC side
    # carries 2(n−1)/n·S per step, each intra link its 3 internal edges' worth.
    steps, grad = 5, 2**20
    scen = load_scenario("scenarios/mwm_2x4_ring.yaml", ["numerics=false", "workload.eval_every=0"])
    result = simulate(scen, Costs(1e-3, grad, 0.0, steps, (("params/w", (grad // 4,), grad),)))
    links = result.tables["links"].set_index("link")
    per_edge = 2 * 7 / 8 * grad * steps
    for host in ("worker0", "worker1"):
        for side in ("tx", "rx"):
            assert links.loc[f"{host}/nic/{side}", "bytes"] == pytest.approx(per_edge, rel=1e-12)
        assert links.loc[f"{host}/intra", "bytes"] == pytest.approx(3 * per_edge, rel=1e-12)
    # bytes sent times hops: 8 ring edges, 2 of them across the network (2 links each)
    assert links["bytes"].sum() == pytest.approx((6 + 2 * 2) * per_edge, rel=1e-12)


def test_mirrored_intra_link_carries_every_ring_edge_and_the_report_says_why_above_100():
    # mirrored_4dev: a ring over 4 devices on one shared intra link, 4 edges of 1.5 S each
    # per step; the closed form gives each edge the link's bandwidth, so the load reaches 4 B.
    steps, grad = 3, 2**26
    scen = load_scenario("scenarios/mirrored_4dev.yaml", ["numerics=false"])
    result = simulate(scen, Costs(1e-3, grad, 0.0, steps, (("params/w", (grad // 4,), grad),)))
    intra = result.tables["links"].set_index("link").loc["worker0/intra"]
    assert intra["bytes"] == pytest.approx(4 * 1.5 * grad * steps, rel=1e-12)
    assert 3.5 < intra["peak_utilisation"] < 4.0  # 4 B, less the latency terms' share
    assert any(line.startswith("Above 100%") for line in link_lines(result))


def test_topology_links_are_listed_once_each_in_host_order():
    env = simpy.Environment()
    _, half, _ = switch(env, hosts=2, devices=1, ps=1, duplex="half", sharing="fifo")
    assert [link.name for link in half.links()] == [
        "worker0/intra",
        "worker0/nic",  # one link for both directions: listed once
        "worker1/intra",
        "worker1/nic",
        "ps0/intra",
        "ps0/nic",
    ]
    torus = TorusTopology(
        env,
        Cluster(make_spec(1, 4, 0)),
        2,
        2,
        ici_latency_s=INTRA_A,
        ici_bandwidth_Bps=INTRA_B,
        nic_latency_s=NIC_A,
        nic_bandwidth_Bps=NIC_B,
        duplex="full",
    )
    assert [link.name for link in torus.links()] == [
        "worker0/ici",
        "worker0/nic/rx",
        "worker0/nic/tx",
    ]
    # torus2d on the 2 × 2 chips: rings along x carry S per edge, along y S/2
    chips = torus.cluster.devices
    held = torus.collective("allreduce", chips, S, "torus2d")[1]
    assert torus.collective_link_bytes("allreduce", chips, S, "torus2d", held) == [6 * S]


def test_link_bytes_follow_the_devices_given_not_a_stale_cache():
    env = simpy.Environment()
    cluster, topology, _ = switch(env, hosts=2, devices=2)
    devices = list(cluster.devices)
    for group, nic in ((devices, 1.5 * S), (devices[::2], 1.0 * S), (devices, 1.5 * S)):
        held = topology.collective("allreduce", group, S, "ring")[1]
        got = dict(
            zip(
                [link.name for link in held],
                topology.collective_link_bytes("allreduce", group, S, "ring", held),
                strict=True,
            )
        )
        assert got["worker0/nic/tx"] == nic
    devices.reverse()  # the same list, changed in place: its shares are computed again
    held = topology.collective("broadcast", devices, S, "tree")[1]
    got = topology.collective_link_bytes("broadcast", devices, S, "tree", held)
    # ranks host by host from the root (worker1's devices are 0, 1): of the binomial
    # tree's edges 0 → 1, 0 → 2, 2 → 3 only 0 → 2 leaves worker1
    assert dict(zip([link.name for link in held], got, strict=True))["worker1/nic/tx"] == S


def test_report_folder_has_the_link_files_and_reads_back(ps_run, tmp_path):
    import simdist
    from simdist.report import write_report
    from simdist.report.trace_text import dumps_trace

    out = write_report(ps_run, tmp_path / "report")
    for name in ("links.csv", "link_buckets.csv", "link_load.csv", "link_utilisation.png"):
        assert (out / name).is_file(), name
    text = (out / "report.md").read_text()
    assert "## Links" in text and "(link_utilisation.png)" in text and "`links.csv`" in text
    loaded = simdist.load_report(out)
    for name in ("links", "link_buckets", "link_load"):
        assert_frame_equal(loaded.tables[name], ps_run.tables[name], check_exact=True)
    trace = build_trace(
        loaded.events,
        scenario=loaded.scenario,
        metrics=loaded.metrics,
        tables=loaded.tables,
        summary=loaded.summary,
    )
    assert dumps_trace(trace) == (out / "trace.json").read_text()


def test_heatmap_keeps_the_busiest_links_in_table_order():
    names = [f"h{i}/nic/tx" for i in range(5)]
    links = pd.DataFrame({"link": names, "bytes": [1.0, 5.0, 0.0, 5.0, 2.0]})
    buckets = pd.DataFrame(
        {
            "link": [n for n in names if n != "h2/nic/tx" for _ in range(2)],
            "bucket_start_s": [0.0, 1.0] * 4,
            "bucket_end_s": [1.0, 1.5] * 4,
            "utilisation": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
        }
    )
    kept, edges, values = heatmap_matrix(links, buckets, max_links=3)
    assert kept == ["h1/nic/tx", "h3/nic/tx", "h4/nic/tx"]  # 5, 5, 2 bytes, in table order
    assert edges.tolist() == [0.0, 1.0, 1.5]
    assert values.tolist() == [[0.3, 0.4], [0.5, 0.6], [0.7, 0.8]]
