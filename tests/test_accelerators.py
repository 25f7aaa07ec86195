"""Accelerators: when ``execution: devices`` can run and what it says when it cannot.

The CPU side runs here; the GPU message is checked as a pure function of
(backend, devices available, replicas).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import pytest

import simdist
from simdist.errors import DeviceFallbackWarning, SimdistError
from simdist.numerics.device_allreduce import (
    device_shortfall,
    fallback_note,
    on_cpu_fallback,
    replica_backend,
    replica_devices,
)
from simdist.numerics.executor import ensure_devices
from simdist.runtime.preflight import preflight
from simdist.strategies.sync import resolve_execution

ROOT = Path(__file__).resolve().parents[1]


def test_enough_devices_is_no_shortfall() -> None:
    assert device_shortfall("gpu", 4, 4) is None
    assert device_shortfall("cpu", 8, 4) is None


def test_fewer_gpus_than_replicas_once_jax_started_says_how_to_force_cpu_devices() -> None:
    """What is left when the fallback to emulated CPU devices cannot be arranged: JAX
    started (with too few CPU devices) before simdist could ask for them."""
    assert device_shortfall("gpu", 2, 4) == (
        "execution: devices needs 4 devices; this machine's JAX backend gpu has 2 and JAX "
        "started before simdist could add emulated CPU devices; run with JAX_PLATFORMS=cpu "
        "XLA_FLAGS=--xla_force_host_platform_device_count=4 (set before Python starts) to use "
        "4 emulated CPU devices, or use execution: batched or at most 2 replicas on the gpu"
    )


def test_fewer_cpu_devices_names_the_xla_flag() -> None:
    message = device_shortfall("cpu", 1, 4)
    assert message is not None
    assert message.startswith(
        "execution: devices needs 4 devices; this machine's JAX backend cpu has 1;"
    )
    assert "--xla_force_host_platform_device_count=4" in message


def test_devices_run_on_emulated_cpu_devices_reports_devices(tmp_path: Path) -> None:
    """A fresh process asks for 4 emulated CPU devices and the report says ``devices``."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simdist.cli",
            "run",
            str(ROOT / "scenarios/mirrored_4dev.yaml"),
            "--set",
            "strategy.execution=devices",
            "--set",
            "workload.steps=3",
            "--out",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["execution"] == "devices"


def test_resolve_execution_refuses_devices_beyond_the_backend() -> None:
    """In a process whose JAX backend has started, more replicas than devices is refused."""
    n = jax.device_count()
    assert resolve_execution("devices", n) == "devices"
    with pytest.raises(SimdistError, match=f"^execution: devices needs {n + 1} devices; "):
        resolve_execution("devices", n + 1)


# -- an accelerator with too few devices: the fallback to emulated CPU devices ------------


class _OneGpu:
    """Stands for the one device of a one-GPU machine (no GPU runs these tests)."""

    platform = "gpu"
    id = 0


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """JAX as simdist sees it on a machine with one GPU: ``jax.devices()`` is that GPU and
    the default backend ``gpu``; the CPU backend keeps this suite's 8 devices. The default
    device a fallback sets is reset afterwards."""
    cpu_devices = jax.devices
    monkeypatch.setattr(jax, "devices", lambda backend=None: (
        cpu_devices(backend) if backend else [_OneGpu()]
    ))  # fmt: skip
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    try:
        yield
    finally:
        jax.config.update("jax_default_device", None)


def test_the_fallback_note_names_both_ways_out() -> None:
    assert fallback_note("gpu", 1, 4) == (
        "execution: devices needs 4 devices and this machine's JAX backend gpu has 1: the "
        "numerics run on 4 emulated CPU devices instead (the same results as on a CPU-only "
        "machine, more slowly); to use the gpu, set execution: batched or at most 1 replicas, "
        "or set JAX_PLATFORMS=cpu to run on the CPU without this warning"
    )


def test_too_few_gpus_fall_back_to_emulated_cpu_devices_with_a_warning(one_gpu: None) -> None:
    assert replica_backend() == "gpu" and not on_cpu_fallback()
    assert ensure_devices(1) == 1  # one replica: the GPU, no fallback
    assert jax.config.jax_default_device is None
    with pytest.warns(DeviceFallbackWarning, match="needs 4 devices and this machine's JAX"):
        assert ensure_devices(4) == 8
    assert on_cpu_fallback() and replica_backend() == "cpu"
    assert [d.platform for d in replica_devices()] == ["cpu"] * 8
    assert jax.config.jax_default_device.platform == "cpu"  # the whole run stays on the CPU
    ensure_devices(4)  # decided once: no second warning (the suite makes warnings errors)


@pytest.fixture(scope="module")
def zero3() -> Any:
    """zero3_4dev, 5 steps."""
    short = ["workload.steps=5", "workload.eval_every=5"]
    return simdist.load_scenario(ROOT / "scenarios/zero3_4dev.yaml", short)


@pytest.fixture(scope="module")
def zero3_on_cpu(zero3: Any) -> Any:
    return simdist.run(zero3)


def test_a_run_that_fell_back_says_so_and_equals_the_cpu_run(
    zero3: Any, zero3_on_cpu: Any, one_gpu: None
) -> None:
    """zero3_4dev on a "one-GPU machine": the warning among preflight's (which the CLI
    prints), ``execution: devices`` reported, and this suite's CPU run to the bit."""
    with pytest.warns(DeviceFallbackWarning):
        checked = preflight(zero3, source="zero3_4dev.yaml")
    assert checked.warnings == (
        f"zero3_4dev.yaml: strategy.execution: {fallback_note('gpu', 1, 4)}",
    )
    fell_back = simdist.run(zero3)
    assert fell_back.summary["execution"] == "devices"
    assert fell_back.metrics.equals(zero3_on_cpu.metrics)
    assert len(fell_back.metrics[fell_back.metrics["metric"] == "train_loss"]) == 5


def test_the_cli_prints_the_fallback_once_as_a_warning_line(one_gpu: None) -> None:
    from typer.testing import CliRunner

    from simdist.cli import app

    done = CliRunner().invoke(app, ["validate", "scenarios/zero3_4dev.yaml"])
    assert done.exit_code == 0, done.output
    said = " ".join(done.stderr.split())
    assert said.count("warning:") == 1 and "DeviceFallbackWarning" not in said
    assert (
        f"warning: scenarios/zero3_4dev.yaml: strategy.execution: {fallback_note('gpu', 1, 4)}"
        in said
    )


def test_gpu_check_compares_each_figure_at_its_stated_tolerance() -> None:
    """benchmarks/gpu_check.py's verdicts on made-up figures (the script itself runs three
    processes, a minute on the CPU: it is run by hand, and on a GPU when one is lent)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    def figures(loss_scale: float, params: np.ndarray, accuracy: float = 0.9) -> dict:
        case = {"train_loss": [2.0 * loss_scale, 0.5 * loss_scale], "execution": "batched",
                "test_accuracy": [0.5, accuracy], "wall_s": 1.0}  # fmt: skip
        return {
            "cases": dict.fromkeys(gpu_check.CASES, case),
            "params": dict.fromkeys(gpu_check.CASES, params),
        }

    ones = np.ones(100)
    reference = figures(1.0, ones)
    close = figures(1.005, ones * 1.01)  # 0.5 % on the losses, 1 % on the parameters
    rows = gpu_check.compare(reference, close, close, gpu_check.RTOL)
    assert [row["within"] and row["repeat identical"] for row in rows] == [True] * 4
    assert rows[0]["loss rel. diff"] == pytest.approx(0.005)
    assert rows[0]["params rel. diff"] == pytest.approx(0.01)
    far = figures(1.0, ones, accuracy=0.8)  # an accuracy 11 % lower
    rows = gpu_check.compare(reference, far, close, gpu_check.RTOL)
    assert [row["within"] for row in rows] == [False] * 4
    assert [row["repeat identical"] for row in rows] == [False] * 4
    assert gpu_check.table(rows).splitlines()[2].startswith("| one_device | 100 | batched |")


def test_sweep_workers_do_not_preallocate_gpu_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several JAX processes on one GPU: each would otherwise take 75 % of its memory."""
    from simdist.sweep.runner import PREALLOCATE, dask_client

    monkeypatch.delenv(PREALLOCATE, raising=False)
    with dask_client(None, 1) as client:
        assert list(client.run(_environment_variable, PREALLOCATE).values()) == ["false"]


def _environment_variable(name: str) -> str | None:
    """``name`` in the environment of the process that calls it (a Dask worker's)."""
    return os.environ.get(name)
