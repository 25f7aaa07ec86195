"""What the terminal shows: a quiet -q, tables whole when piped, progress that names the
run (seed, run k of n), and help text without typer's <bool> / <str> labels."""

from __future__ import annotations

import pytest
from helpers import tiny, write
from typer.testing import CliRunner

from simdist.cli import app

runner = CliRunner()


def test_quiet_run_prints_only_the_report_line(tmp_path):
    out = tmp_path / "report"
    result = runner.invoke(app, ["run", str(write(tmp_path, tiny())), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.output == f"report: {out}\n"
    assert (out / "summary.json").is_file()


def test_a_piped_table_keeps_long_strategy_names_whole_at_80_columns(tmp_path):
    reports = []
    for name, strategy in (("one", "one_device"), ("many", "multi_worker_mirrored")):
        changes = {"name": name, "strategy": strategy, "workload.steps": 2}
        if strategy != "one_device":
            changes["cluster.hosts"] = 2
        out = tmp_path / name
        ran = runner.invoke(app, ["run", str(write(tmp_path, tiny(**changes))), "--out", str(out)])
        assert ran.exit_code == 0, ran.output
        reports.append(str(out))
    result = runner.invoke(
        app,
        ["compare", *reports, "--out", str(tmp_path / "cmp"), "--target", "0.5"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    assert "multi_worker_mirrored" in result.output
    assert "…" not in result.output
    row = next(line for line in result.output.splitlines() if "multi_worker_mirrored" in line)
    assert len(row) > 80  # the row is as wide as it needs, not folded into the terminal's 80


def test_compare_over_seeds_names_the_seed_and_the_run_of_how_many(tmp_path):
    scenario = write(tmp_path, tiny(**{"workload.steps": 2}))
    args = ["compare", str(scenario), "--seeds", "0,4", "--processes", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "cmp"), "--target", "0.5"])
    assert result.exit_code == 0, result.output
    assert "simulating tiny, seed 0 (run 1 of 2) …" in result.output
    assert "simulating tiny, seed 4 (run 2 of 2) …" in result.output
    quiet = runner.invoke(app, [*args, "--out", str(tmp_path / "cmp2"), "--target", "0.5", "-q"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.output == f"report: {tmp_path / 'cmp2'}\n"


def test_compare_without_seeds_counts_the_scenarios_it_runs(tmp_path):
    first = write(tmp_path, tiny(**{"name": "a", "workload.steps": 2}), "a.yaml")
    second = write(tmp_path, tiny(**{"name": "b", "workload.steps": 2}), "b.yaml")
    result = runner.invoke(
        app, ["compare", str(first), str(second), "--out", str(tmp_path / "cmp")]
    )
    assert result.exit_code == 0, result.output
    assert "simulating a (run 1 of 2) …" in result.output
    assert "simulating b (run 2 of 2) …" in result.output


@pytest.mark.parametrize(
    "command",
    "run validate compare sweep tradeoff goodput profile cache collectives list".split(),
)
def test_help_names_values_plainly_and_keeps_phrases_together(command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for artefact in (
        "<bool>",
        "<str>",
        "<int>",
        "<float>",
        "<path>",
        "<list[str]>",
        "<list[Path]>",
    ):
        assert artefact not in result.output, artefact
    quiet_or_help = next(line for line in result.output.splitlines() if "--help" in line)
    assert quiet_or_help.split("--help")[1].split()[0] == "Show"  # a flag has no value name


def test_run_help_joins_the_docstrings_lines_into_one_paragraph():
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"})
    lines = [line.strip() for line in result.output.splitlines()]
    # The docstring's second line starts "130 / 143 / 129"; joined, no line starts there.
    assert not any(line.startswith("130 /") for line in lines)
    assert "written), 130 / 143 / 129 when SIGINT" in " ".join(lines)


def test_the_top_level_help_and_the_usage_line_name_things_plainly():
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert top.exit_code == 0 and "<bool>" not in top.output
    assert next(line for line in top.output.splitlines() if "--help" in line).split() == [
        "│", "--help", "Show", "this", "message", "and", "exit.", "│"
    ]  # fmt: skip
    usage = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"}).output
    assert "run [OPTIONS] SCENARIO" in usage and "{SCENARIO}" not in usage
    assert "compare [OPTIONS] INPUTS..." in runner.invoke(app, ["compare", "--help"]).output


def test_a_piped_collectives_table_is_whole_with_its_title_on_one_line():
    result = runner.invoke(app, ["collectives", "--protocol", "tcp"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        "all-reduce · link 1.25 GB/s, latency 50 µs · tcp: 51.5% of line rate, "
        "+29 µs per step across hosts"
    )
    hierarchical = next(line for line in lines if "hierarchical" in line)
    assert "skipped: needs devices_per_host" in hierarchical and "…" not in result.output
    assert lines[-1] == "busbw = algbw × 2(n−1)/n (nccl-tests, PERFORMANCE.md)"


def test_list_piped_keeps_each_row_on_one_line():
    result = runner.invoke(app, ["list"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    strategies = next(line for line in result.output.splitlines() if "│ strategies" in line)
    assert "one_device" in strategies and "local_sgd" in strategies  # not folded at 80

    # off a terminal, a line per model it profiles: a cold cache took 1-2 minutes in silence
    said = [line for line in result.output.splitlines() if line.startswith("profiling model ")]
    from simdist.catalog import MODELS

    first = next(iter(MODELS))
    assert said[0] == f"profiling model {first} (1 of {len(MODELS)}; once: cached afterwards) …"
    assert len(said) == len(MODELS)


@pytest.mark.parametrize(
    ("size", "shown"), [("1GB", "1 GB"), ("4MiB", "4.0 MiB"), ("1MB..4MB", "2 MB")]
)
def test_collectives_show_sizes_in_the_units_they_were_given_in(size, shown):
    result = runner.invoke(app, ["collectives", "--size", size, "--algo", "ring"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "│ ring" in line]
    assert any(row.startswith(f"│ {shown} ") for row in rows), rows


def test_run_without_a_terminal_prints_plain_progress_lines(tmp_path):
    """stderr is not a terminal here (a pipe, a log file): no bar, so lines instead."""
    scenario = write(tmp_path, tiny(**{"workload.steps": 20}))
    result = runner.invoke(app, ["run", str(scenario), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "tiny: preparing (building, compiling JAX)",
        *(f"tiny: step {step} of 20" for step in range(2, 21, 2)),
        "tiny: all steps simulated; finishing the numerics and writing the report",
    ]
    quiet = runner.invoke(app, ["run", str(scenario), "--out", str(tmp_path / "q"), "-q"])
    assert quiet.stderr == ""
