"""``simdist collectives``: the teaching table of all-reduce time, algbw and busbw."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from simdist.cli import app
from simdist.collectives import ALGORITHMS, collectives_table

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["collectives", *args], env={"COLUMNS": "160"})


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
