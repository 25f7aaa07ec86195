"""JAX's persistent compilation cache: on by default in the per-user folder, off with
SIMDIST_COMPILATION_CACHE=0, cleared by `simdist cache clear`; reports identical with the
cache cold, warm and off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simdist import compile_cache

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "mirrored_4dev.yaml"
RUN = (sys.executable, "-m", "simdist", "run")
COMPARED = ("metrics.csv", "events.csv", "summary.json", "params.npz", "report.md")


def _run(out: Path, cache: Path, *, enabled: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(SIMDIST_CACHE_DIR=str(cache), SIMDIST_COMPILATION_CACHE="1" if enabled else "0")
    subprocess.run(
        [*RUN, str(SCENARIO), "--out", str(out), "-q", "--set", "workload.steps=20"],
        env=env,
        check=True,
        capture_output=True,
        cwd=ROOT,
    )


def test_reports_identical_with_cache_cold_warm_and_off(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run(tmp_path / "cold", cache, enabled=True)
    entries = sorted(p.name for p in (cache / "xla").iterdir() if p.is_file())
    assert any(name.endswith("-cache") for name in entries)  # programs were written
    _run(tmp_path / "warm", cache, enabled=True)
    off_cache = tmp_path / "off_cache"
    _run(tmp_path / "off", off_cache, enabled=False)
    assert not (off_cache / "xla").exists()  # off: nothing written
    for name in COMPARED:
        cold = (tmp_path / "cold" / name).read_bytes()
        assert (tmp_path / "warm" / name).read_bytes() == cold, name
        assert (tmp_path / "off" / name).read_bytes() == cold, name


def test_cache_clear_empties_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from simdist.cli import app

    monkeypatch.setenv("SIMDIST_CACHE_DIR", str(tmp_path))
    (tmp_path / "xla").mkdir()
    (tmp_path / "xla" / "jit_f-abc-cache").write_bytes(b"x" * 1000)
    assert compile_cache.folder_nbytes(tmp_path / "xla") == 1000
    result = CliRunner().invoke(app, ["cache", "clear"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "xla").exists()


def test_cache_clear_keeps_what_simdist_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$SIMDIST_CACHE_DIR naming a user's folder: their files survive byte for byte."""
    from typer.testing import CliRunner

    from simdist.cli import app

    monkeypatch.setenv("SIMDIST_CACHE_DIR", str(tmp_path))
    ours = {
        "xla/jit_step-" + "a" * 64 + "-cache": b"x" * 100,
        "xla/jit_step-" + "a" * 64 + "-atime": b"1",
        "xla/.lockfile": b"",
        "profiles/mlp-b32-" + "0" * 24 + ".json": b"{}",
        "profiles/.mlp-b32-" + "0" * 24 + ".json.ab12_x.tmp": b"{",
        "models/" + "f" * 32 + ".json": b"{}",
        "models/." + "f" * 32 + ".json.q1w2e3.tmp": b"{",
    }
    theirs = {
        "models/my_model.json": b"a user's model",
        "models/notes.txt": b"keep me",
        "profiles/layers.csv": b"name,forward_flops\n",
        "profiles/old/" + "1" * 32 + ".json": b"in a subfolder",
        "README.md": b"not simdist's",
    }
    for name, data in {**ours, **theirs}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    result = CliRunner().invoke(app, ["cache", "clear"])
    assert result.exit_code == 0, result.output
    assert "kept 4 item(s) simdist did not write" in result.output
    for name in ours:
        assert not (tmp_path / name).exists(), name
    for name, data in theirs.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert not (tmp_path / "xla").exists()  # emptied: removed
    assert (tmp_path / "models").is_dir() and (tmp_path / "profiles").is_dir()


@pytest.mark.parametrize("value", ["0", "false", "off", "no"])
def test_switch_turns_the_cache_off(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compile_cache.ENABLE_ENV, value)
    assert not compile_cache.enabled()
    monkeypatch.setenv(compile_cache.ENABLE_ENV, "1")
    assert compile_cache.enabled()
