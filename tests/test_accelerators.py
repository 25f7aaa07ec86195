"""Accelerators: when ``execution: devices`` can run and what it says when it cannot.

The CPU side runs here; the GPU message is checked as a pure function of
(backend, devices available, replicas).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from simdist.errors import SimdistError
from simdist.numerics.device_allreduce import device_shortfall
from simdist.strategies.sync import resolve_execution

ROOT = Path(__file__).resolve().parents[1]


def test_enough_devices_is_no_shortfall() -> None:
    assert device_shortfall("gpu", 4, 4) is None
    assert device_shortfall("cpu", 8, 4) is None


def test_fewer_gpus_than_replicas_names_the_way_out() -> None:
    assert device_shortfall("gpu", 2, 4) == (
        "execution: devices needs 4 devices; this machine's JAX backend gpu has 2; "
        "use execution: batched or fewer replicas"
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
