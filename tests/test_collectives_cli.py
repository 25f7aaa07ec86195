"""``simdist collectives``: the teaching table of all-reduce time, algbw and busbw."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from simdist.cli import app
from simdist.cli.collectives import topology_table
from simdist.cli.common import console
from simdist.collectives import ALGORITHMS, collectives_table

runner = CliRunner()


def invoke(*args: str):
    # rich fixes a console's width when the console is created (from COLUMNS or the terminal),
    # which may be before this test under any runner, so widen the CLI's console here.
    width = console.width
    console.width = 160
    try:
        return runner.invoke(app, ["collectives", *args])
    finally:
        console.width = width


def rows(output: str) -> list[list[str]]:
    """The body rows of the rich table, as lists of the seven cell texts."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines()]
    return [row for row in cells if len(row) == 7 and row[0]]


def test_defaults_give_one_row_per_algorithm():
    result = invoke()
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert [row[2] for row in table] == list(ALGORITHMS)
    assert {row[1] for row in table} == {"8"}


def test_lists_and_doubling_ranges_multiply_rows():
    result = invoke("--algo", "ring,tree", "--n", "2..16", "--size", "1MB,4MB")
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert len(table) == 2 * 4 * 2
    assert [row[1] for row in table[:8:2]] == ["2", "4", "8", "16"]
    assert [row[2] for row in table[:2]] == ["ring", "tree"]


def test_example_from_the_issue():
    result = invoke(
        "--algo", "ring", "--n", "8", "--size", "1GB", "--bandwidth", "100GB/s", "--latency", "5us"
    )
    assert result.exit_code == 0, result.output
    (row,) = rows(result.output)
    # 2·7·(5µs + 1e9/(8·1e11)) = 14 · 1.255 ms = 17.57 ms
    assert row[2:6] == ["ring", "17.6 ms", "56.9 GB/s", "99.6 GB/s"]


def test_zero_latency_ring_busbw_equals_the_link_bandwidth():
    result = invoke(
        "--algo", "ring", "--n", "2,3,4,8,16", "--bandwidth", "100GB/s", "--latency", "0"
    )
    assert result.exit_code == 0, result.output
    assert [row[5] for row in rows(result.output)] == ["100 GB/s"] * 5
    for row in collectives_table(["ring"], [2, 3, 5, 8, 64], [1e9, 12345.0], 1e11, 0.0):
        assert row["busbw_Bps"] == pytest.approx(1e11, rel=1e-12)


def test_hierarchical_uses_devices_per_host_and_the_intra_link():
    result = invoke(
        "--algo",
        "ring,hierarchical",
        "--n",
        "8",
        "--devices-per-host",
        "4",
        "--intra-bandwidth",
        "300GB/s",
        "--intra-latency",
        "2us",
    )
    assert result.exit_code == 0, result.output
    ring, hierarchical = rows(result.output)
    assert "2 hosts x 4" in hierarchical[6]
    assert hierarchical[3] != "—" and ring[3] != "—"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--size", "1XB"], "--size"),
        (["--bandwidth", "fast"], "--bandwidth"),
        (["--latency", "-5us"], "--latency"),
        (["--bandwidth", "0"], "--bandwidth"),
        (["--n", "0"], "--n"),
        (["--n", "two"], "--n"),
        (["--n", "16..2"], "--n"),
        (["--algo", "butterfly"], "--algo"),
    ],
)
def test_bad_values_exit_2_with_one_message(args, named):
    result = invoke(*args)
    assert result.exit_code == 2
    assert named in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 3


def test_leaf_spine_options_price_the_ring_through_the_uplinks():
    common = ["--algo", "ring", "--n", "2", "--bandwidth", "1GB/s", "--latency", "0"]
    leaf = ["--topology", "leaf_spine", "--oversubscription", "4:1"]
    apart = invoke(*common, *leaf, "--hosts-per-leaf", "1")
    together = invoke(*common, *leaf, "--hosts-per-leaf", "2")
    assert apart.exit_code == 0 and together.exit_code == 0, apart.output + together.output
    (row,) = rows(apart.output)
    assert row[5] == "250 MB/s" and "2 racks" in row[6]  # the uplink: 1 host x 1GB/s / 4
    (row,) = rows(together.output)
    assert row[5] == "1 GB/s"
    assert "leaf_spine 1 hosts/leaf, 4:1" in apart.output


def test_the_topology_table_takes_a_network_section():
    from simdist.collectives import ring_allreduce_s
    from simdist.scenario.schema import NetworkSpec

    network = NetworkSpec(topology="leaf_spine", hosts_per_leaf=2, oversubscription=8)
    args = (2.0**30, 2.0**-16, 2, 300e9, 2e-6, network)
    (row,) = topology_table("all_reduce", ["ring"], [8], [2.0**24], *args)
    # 4 hosts x 2 devices, 2 hosts per leaf at 8:1: the uplinks carry 2·B/8 = B/4
    assert row["time_s"] == ring_allreduce_s(8, 2.0**24, 2.0**-16, 2.0**28)
    assert row["note"] == "4 hosts x 2 in 2 racks; B 268 MB/s"
    switch = NetworkSpec(intra_host="nvlink")
    (one,) = topology_table("all_reduce", ["ring"], [8], [1e9], 1e9, 1e-5, 8, 1e11, 0.0, switch)
    assert one["time_s"] == ring_allreduce_s(8, 1e9, 0.0, 1e11)


def test_nvlink_prices_one_host_on_the_per_gpu_port():
    result = invoke(
        "--algo", "ring,hierarchical", "--n", "8", "--devices-per-host", "8",
        "--intra-host", "nvlink", "--intra-bandwidth", "150GB/s", "--intra-latency", "0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ring, hierarchical = rows(result.output)
    assert ring[5] == hierarchical[5] == "150 GB/s"
    assert "nvlink 150 GB/s" in result.output


@pytest.mark.parametrize(
    ("args", "named", "words"),
    [
        (["--hosts-per-leaf", "2"], "--hosts-per-leaf", "--topology leaf_spine"),
        (["--topology", "leaf_spine"], "--hosts-per-leaf", "missing"),
        (["--topology", "fat_tree"], "--topology", "leaf_spine"),
        (["--topology", "leaf_spine", "--hosts-per-leaf", "2", "--oversubscription", "1:2"],
         "--oversubscription", "at least 1:1"),
        (["--topology", "leaf_spine", "--hosts-per-leaf", "2", "--hop-latency", "soon"],
         "--hop-latency", ""),
        (["--intra-host", "ethernet"], "--intra-host", "nvlink"),
        (["--pcie-uplink", "8GB/s"], "--pcie-uplink", "--intra-host pcie"),
    ],
)  # fmt: skip
def test_bad_topology_options_exit_2_naming_the_option(args, named, words):
    result = invoke(*args)
    assert result.exit_code == 2
    assert f"error: {named}:" in result.output
    assert words in result.output
    assert "Traceback" not in result.output


def test_reduce_scatter_table_has_its_algorithms_title_and_busbw():
    result = invoke("--op", "reduce_scatter", "--n", "8", "--devices-per-host", "4")
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert [row[2] for row in table] == ["ring", "halving_doubling", "hierarchical", "torus2d"]
    assert "reduce-scatter · link 1.25 GB/s, latency 50 µs" in result.output
    assert "busbw = algbw × (n−1)/n" in result.output
    assert all(row[3] != "—" for row in table)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather", "all_to_all"])
def test_zero_latency_busbw_of_the_bandwidth_optimal_algorithms_is_the_link(op):
    algo = "pairwise" if op == "all_to_all" else "ring"
    args = ["--op", op, "--algo", algo, "--n", "2,3,4,8,16", "--bandwidth", "100GB/s"]
    result = invoke(*args, "--latency", "0")
    assert result.exit_code == 0, result.output
    assert [row[5] for row in rows(result.output)] == ["100 GB/s"] * 5


def test_all_to_all_broadcast_and_the_topology_path():
    result = invoke("--op", "all_to_all", "--n", "7")
    assert result.exit_code == 0, result.output
    pairwise, hierarchical, torus = rows(result.output)
    assert pairwise[2] == "pairwise" and pairwise[3] != "—"
    assert "skipped" in hierarchical[6] and "prime" in torus[6]
    result = invoke("--op", "broadcast", "--n", "8", "--latency", "0", "--bandwidth", "1GB/s")
    (row,) = rows(result.output)
    # ⌈log2 8⌉ = 3 rounds of the whole buffer: busbw = algbw = S / 3 s
    assert row[2:6] == ["tree", "3 s", "333 MB/s", "333 MB/s"]
    leaf = ["--topology", "leaf_spine", "--hosts-per-leaf", "2", "--oversubscription", "2"]
    result = invoke("--op", "all_gather", "--algo", "ring", "--n", "4", *leaf)
    assert result.exit_code == 0, result.output
    (row,) = rows(result.output)
    assert "2 racks" in row[6] and "all-gather" in result.output


def test_an_unknown_op_exits_2_naming_the_option():
    result = invoke("--op", "scatter")
    assert result.exit_code == 2
    assert "--op" in result.output and "all_to_all" in result.output
    result = invoke("--op", "broadcast", "--algo", "ring")
    assert result.exit_code == 2 and "--algo" in result.output and "tree" in result.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--algo", "hierarchical", "--n", "6,10", "--devices-per-host", "4"],
         "error: --algo hierarchical: n=6 is not a multiple of devices_per_host=4, so it runs "
         "for none of --n; e.g. --n 8 --devices-per-host 4"),
        (["--algo", "ring,torus2d", "--n", "7"],
         "error: --algo torus2d: n=7 is prime: no 2D grid (an 7x1 torus is a ring), so it runs "
         "for none of --n; e.g. --n 8"),
        (["--algo", "hierarchical", "--n", "8"],
         "error: --algo hierarchical: needs devices_per_host, so it runs for none of --n; e.g. "
         "--devices-per-host 4 --n 8"),
    ],
)  # fmt: skip
def test_a_named_algorithm_that_no_n_can_run_is_refused(args, line):
    result = invoke(*args)
    assert result.exit_code == 2 and line in " ".join(result.output.split()), result.output


def test_a_named_algorithm_runs_where_it_can_and_notes_the_rest():
    result = invoke("--algo", "torus2d", "--n", "7,8")
    assert result.exit_code == 0, result.output
    seven, eight = rows(result.output)
    assert seven[6].startswith("skipped:") and eight[3] != "—"
