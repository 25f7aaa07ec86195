"""A hostile and careless user: every bad input gets one clear error, nothing is lost.

The corpus in ``tests/hostile/`` holds one file per bad scenario or data file (its data
files are in ``tests/hostile/data/``, written by ``make_data.py``). Each file's header says
what is hostile about it, the command to run (``# args:``, default ``validate {file}
--out {out}``) and what must come out (``# expect: <exit status> <start of a line>``).
All run in this process through the CLI (typer's CliRunner), never a subprocess each.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import signal
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import tiny, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import simdist
from simdist.api import preflight, resolve_scenario
from simdist.cli import app
from simdist.errors import ScenarioError, SimdistError
from simdist.numerics.data import load_dataset
from simdist.numerics.sizes import train_examples
from simdist.report.tables import MARKER, AtomicFolder, _host_tag, check_output_folder
from simdist.runtime.interrupts import Interrupted
from simdist.scenario.load import scenario_from_text
from simdist.scenario.messages import EXAMPLES

HOSTILE = Path(__file__).resolve().parent / "hostile"
DATA = HOSTILE / "data"
CASES = sorted(HOSTILE.glob("*.yaml"))
runner = CliRunner()


def _header(path: Path) -> tuple[str, int, str]:
    """(args, exit status, expected line start) from a corpus file's ``#`` header."""
    args, expect = "validate {file} --out {out}", None
    for raw in path.read_bytes().splitlines():
        line = raw.decode("utf-8", errors="replace")
        if not line.startswith("#"):
            break
        if line.startswith("# args: "):
            args = line.removeprefix("# args: ")
        elif line.startswith("# expect: "):
            expect = line.removeprefix("# expect: ")
    assert expect is not None, f"{path.name}: no '# expect:' line"
    code, _, start = expect.partition(" ")
    return args, int(code), start


def _substitute(text: str, path: Path, tmp_path: Path) -> str:
    big = tmp_path / "big.yaml"
    if "{big}" in text and not big.exists():
        with open(big, "wb") as f:
            f.truncate(5 * 2**20)  # sparse: 5 MB of NUL bytes that cost no disk
    return (
        text.replace("{file}", str(path))
        .replace("{out}", str(tmp_path / "out"))
        .replace("{data}", str(DATA))
        .replace("{big}", str(big))
    )


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 80
    assert len(list(DATA.glob("*.npz"))) >= 20


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_hostile_input_gives_one_clear_outcome(path, tmp_path):
    args, code, start = _header(path)
    result = runner.invoke(app, shlex.split(_substitute(args, path, tmp_path)))
    output = result.output
    assert result.exit_code == code, output
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    expected = _substitute(start, path, tmp_path)
    lines = output.splitlines()
    assert any(line.startswith(expected) for line in lines), f"{expected!r} not in:\n{output}"
    if code == 2:
        assert len([line for line in lines if line.startswith("error:")]) == 1, output
        assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- fuzzing the loader

_KEYS = sorted(
    {*EXAMPLES, "kind", "all_reduce", "topology", "staleness_bound", "mode", "backup_workers"}
)
_TRICKY = [
    "10Gbit/s", "50us", "1e999", "inf", "nan", "-1", "0", "worker 1", "ps 0", "device 99",
    "mirrored", "parameter_server", "tpu", "npz", "digits", "cosine", "\x00", "a\x00b",
    "x" * 5000, "/dev/zero", ".", "..", "-.inf", "2001-02-30", "1_000", "&a [*a]", "{a: 1, a: 2}",
]  # fmt: skip
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(_TRICKY + _KEYS),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=12,
)
_BASE = tiny(**{"strategy": "parameter_server", "cluster.hosts": 2, "cluster.ps": 1})


def _placed(path: list[str], value: object) -> dict:
    """_BASE with ``value`` at ``path`` (mappings created on the way), to reach deep checks."""
    data = copy.deepcopy(_BASE)
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node
        if not isinstance(node, dict):
            return data
    node[path[-1]] = value
    return data


_PATHS = st.lists(st.sampled_from(_KEYS), min_size=1, max_size=4)
_DOCUMENTS = st.one_of(
    st.text(max_size=200),
    _VALUES.map(yaml.safe_dump),
    st.builds(_placed, _PATHS, _VALUES).map(yaml.safe_dump),
)
_OVERRIDES = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.builds(
            "{}={}".format,
            _PATHS.map(".".join),
            _VALUES.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
        ),
    ),
    max_size=3,
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_DOCUMENTS, _OVERRIDES)
def test_fuzzed_yaml_and_overrides_raise_only_scenario_errors(text, overrides):
    try:
        scenario_from_text(text, "<fuzz>", overrides)
    except ScenarioError as error:
        assert str(error).startswith(("<fuzz>", "--set")) and len(str(error)) < 2000


# ---------------------------------------------------------------- names and paths: nothing is lost


def _run(*args: object) -> object:
    return runner.invoke(app, [str(a) for a in args])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_hostile_second_run_never_destroys_the_first_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = write(tmp_path, tiny(**{"name": "first", "workload.steps": 2}), "first.yaml")
    assert _run("run", first, "-q").exit_code == 0
    reports = tmp_path / "reports"
    before = _files(reports / "first")
    assert MARKER in before
    (tmp_path / "link").symlink_to(reports)
    hostile = [
        ({"name": "."}, []),
        ({"name": ".."}, []),
        ({"name": "reports/.."}, []),
        ({}, ["--out", "reports"]),
        ({}, ["--out", "reports/."]),
        ({}, ["--out", "reports/first/.."]),
        ({}, ["--out", "link"]),
        ({}, ["--out", "."]),
        ({}, ["--out", str(tmp_path.parent)]),
    ]
    for changes, extra in hostile:
        scenario = write(tmp_path, tiny(**{"workload.steps": 2, **changes}), "hostile.yaml")
        result = _run("run", scenario, "-q", *extra)
        assert result.exit_code == 2, (changes, extra, result.output)
        assert _files(reports / "first") == before
        assert [p.name for p in reports.iterdir()] == ["first"]
    with pytest.raises(SimdistError, match="not a simdist report"):
        simdist.run(tiny(**{"workload.steps": 2}), out=reports)


def test_out_is_refused_before_anything_is_simulated(tmp_path, monkeypatch):
    simulated = []
    monkeypatch.setattr("simdist.runtime.engine.run", lambda *a, **k: simulated.append(a))
    for out in ("/proc/simdist_hostile/x", tmp_path / "x" / "..", tmp_path / ("n" * 240)):
        with pytest.raises(SimdistError, match=r"^--out "):
            simdist.run(tiny(), out=out)
    assert simulated == []


@pytest.mark.parametrize(
    ("entries", "replaceable"),
    [
        ([], True),
        ([MARKER, "metrics.csv", "notes.txt"], True),  # the marker says simdist wrote it
        (["summary.json", "metrics.csv", "loss_vs_time.png", "params.npz"], True),  # older
        (["summary.json", "metrics.csv", "notes.txt"], False),  # older, plus the user's file
        (["summary.json", "sub/"], False),
        (["compare.csv", "compare.md"], True),
        (["thesis.tex"], False),
        (["sweep.csv", "points/"], False),  # a sweep folder is not a run's report
    ],
)
def test_only_a_folder_simdist_wrote_may_be_replaced(tmp_path, entries, replaceable):
    folder = tmp_path / "out"
    folder.mkdir()
    for entry in entries:
        if entry.endswith("/"):
            (folder / entry).mkdir()
        else:
            (folder / entry).write_text("x")
    if replaceable:
        assert check_output_folder(folder) == folder.resolve()
    else:
        with pytest.raises(SimdistError, match="not a simdist report"):
            check_output_folder(folder)


def test_out_never_resolves_to_its_own_parent(tmp_path):
    report = tmp_path / "report"
    with AtomicFolder(report) as tmp:
        (tmp / "summary.json").write_text("{}")
    (report / "self").symlink_to(report)  # --out report/self would replace report itself
    with pytest.raises(SimdistError, match="the folder it is in or one above it"):
        check_output_folder(report / "self")
    (tmp_path / "up").symlink_to(tmp_path)
    with pytest.raises(SimdistError, match="the folder it is in or one above it"):
        check_output_folder(tmp_path / "up")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o755), (0o027, 0o750), (0o002, 0o775)])
def test_report_folders_get_the_umask_permissions(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        with AtomicFolder(tmp_path / "report") as tmp:
            (tmp / "summary.json").write_text("{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "report").stat().st_mode) == mode
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == [MARKER, "summary.json"]


def test_stale_temporary_folders_of_killed_runs_are_cleaned(tmp_path):
    dead = _dead_pid()
    host = _host_tag()
    other_host = "000000" if host != "000000" else "111111"
    stale = [
        f".report.tmp.{host}.{dead}.0123abcd",
        f".report.old.{host}.{dead}.0123abcd",
        ".report.x7_k2m9q",  # a temporary folder of an older version (mkdtemp)
        ".report.old.4242",
    ]
    kept = [
        f".report.tmp.{host}.{os.getpid()}.0123abcd",  # this process: maybe still writing
        f".report.tmp.{host}.1.0123abcd",  # pid 1 is alive
        f".report.tmp.{other_host}.{dead}.0123abcd",  # another machine's run
        ".reports.tmp.abcdefgh",
        ".report.notes",
    ]
    for name in stale + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.csv").write_text("x")
    with AtomicFolder(tmp_path / "report") as tmp:
        (tmp / "summary.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "report"])


def _dead_pid() -> int:
    """The pid of a process that has ended (its number is not reused this quickly)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# ---------------------------------------------------------------- runs: exit status and warnings


@pytest.mark.parametrize("strategy", ["one_device", "parameter_server"])
def test_a_diverged_run_exits_3_and_its_steps_agree(tmp_path, strategy):
    changes = {"workload.optimizer.learning_rate": 1e30, "workload.steps": 20}
    if strategy == "parameter_server":
        changes.update({"strategy": strategy, "cluster.hosts": 2, "cluster.ps": 1})
    out = tmp_path / "out"
    result = _run("run", write(tmp_path, tiny(**changes)), "-q", "--out", out)
    assert result.exit_code == 3, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["diverged"] is True
    assert summary["steps"] == summary["diverged_at_step"] < 20
    assert f"diverged: the loss was not finite at step {summary['steps']}" in result.output


def test_an_interrupted_run_says_where_and_writes_nothing(tmp_path, monkeypatch):
    def stop(*args, **kwargs):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr("simdist.report.plots.plot_loss_vs_time", stop)
    out = tmp_path / "reports" / "tiny"
    scenario = write(tmp_path, tiny(**{"workload.steps": 2}))
    result = _run("run", scenario, "-q", "--out", out)
    assert result.exit_code == 143
    assert "interrupted at simulated t = 2 ms, step 2 of 2: no report written" in result.output
    assert list(out.parent.iterdir()) == []


def test_running_out_of_memory_is_one_clear_error(tmp_path, monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError("Unable to allocate 116. TiB for an array")

    monkeypatch.setattr("simdist.runtime.engine.run", exhausted)
    result = _run("run", write(tmp_path, tiny()), "-q", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert "error: out of memory (Unable to allocate 116. TiB" in result.output
    assert "Traceback" not in result.output


def test_a_huge_run_is_estimated_before_it_starts():
    checked = preflight(resolve_scenario(tiny(**{"workload.steps": 10**7})))
    assert checked.total_steps == 10**7 and checked.wall_s > 3600
    assert (
        "workload.steps: 10,000,000 steps is huge: simulating them would take"
        in (checked.warnings[0])
    )
    assert preflight(resolve_scenario(tiny())).warnings == ()
    # 10^30 steps would also record more than any memory holds: an error, not a warning.
    with pytest.raises(ScenarioError, match=r"about 10\^30 steps is huge: .* of memory"):
        preflight(resolve_scenario(tiny(**{"workload.steps": 10**30})))


@pytest.mark.parametrize(
    "dataset",
    [
        "digits",
        {"name": "digits", "test_fraction": 0.33},
        {"name": "synthetic_regression", "n_examples": 1001, "test_fraction": 0.3},
        {"npz": str(DATA / "good.npz")},
    ],
)
def test_the_training_set_size_is_known_without_loading_it(dataset):
    spec = resolve_scenario(tiny(**{"workload.dataset": dataset})).workload.dataset
    assert train_examples(spec, seed=3) == load_dataset(spec, seed=3).n_train


# ---------------------------------------------------------------- the third round, both ways

#: The third probe's cases that a scenario refuses (issue 45): validate and run must both
#: refuse them, with the same one error line, before any work.
BOTH_WAYS = sorted(
    p
    for p in CASES
    if p.stem.startswith(("gpt_", "horovod_cycle", "local_sgd_outer_lr", "ps_m", "seed_2_64"))
    or p.stem in ("hybrid_zero_true", "zero_stage_true")
)


def test_the_third_round_is_all_there():
    assert len(BOTH_WAYS) == 17


@pytest.mark.parametrize("path", BOTH_WAYS, ids=[p.stem for p in BOTH_WAYS])
def test_validate_and_run_refuse_the_third_round_alike(path, tmp_path, monkeypatch):
    monkeypatch.setattr("simdist.runtime.engine.run", lambda *a, **k: pytest.fail("it ran"))
    out = tmp_path / "out"
    lines = []
    for args in (f"validate {path} --out {out}", f"run {path} -q --out {out}"):
        result = runner.invoke(app, shlex.split(args))
        assert result.exit_code == 2, result.output
        lines.append([x for x in result.output.splitlines() if x.startswith("error:")])
    assert lines[0] == lines[1] and len(lines[0]) == 1
    _, _, start = _header(path)
    assert lines[0][0].startswith(_substitute(start, path, tmp_path))
    assert not out.exists()
