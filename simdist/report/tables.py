"""summary.json and the tidy CSV tables of a run, written atomically.

A report folder appears whole or not at all: everything is written into a
temporary sibling folder which is renamed into place at the end, so an error
or Ctrl-C never leaves a half-written report.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simdist.errors import SimdistError

SUMMARY_VERSION = 1


def _last(metrics: pd.DataFrame, name: str) -> float | None:
    rows = metrics[metrics["metric"] == name]
    return None if rows.empty else float(rows["value"].iloc[-1])


def time_split(events: pd.DataFrame, devices: Sequence[str], sim_time_s: float) -> dict[str, float]:
    """Share of the training devices' time spent computing, communicating, and idle.

    Shares are of ``len(devices) × sim_time_s`` device-seconds, with
    overlapping spans on one device counted once (a worker pulling from two
    parameter servers at once communicates, not twice). Compute includes a
    straggler's excess; idle is everything else (barriers, waits, failures).
    """
    from simdist.report.trace import time_split_by_device

    total = len(devices) * sim_time_s
    if total <= 0:
        return {"compute": 0.0, "comm": 0.0, "idle": 0.0}
    split = time_split_by_device(events, sim_time_s, devices).sum()
    compute = float(split["compute"]) / total
    comm = float(split["comm"]) / total
    return {"compute": compute, "comm": comm, "idle": max(0.0, 1.0 - compute - comm)}


def build_summary(
    *,
    scenario: Any,
    metrics: pd.DataFrame,
    events: pd.DataFrame,
    sim_time_s: float,
    steps: int,
    costs: Any,
    devices: Sequence[str],
    examples_per_step: int,
    diverged_at: int | None,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The headline figures of one run, as plain JSON-able values."""
    examples = steps * examples_per_step
    summary: dict[str, Any] = {
        "summary_version": SUMMARY_VERSION,
        "name": scenario.name,
        "strategy": scenario.strategy.kind,
        "seed": scenario.seed,
        "numerics": bool(scenario.numerics),
        "replicas": scenario.replicas,
        "global_batch": scenario.global_batch,
        "steps": steps,
        "simulated_time_s": sim_time_s,
        "examples": examples,
        "examples_per_s": examples / sim_time_s if sim_time_s > 0 else None,
        "compute_s_per_replica_step": costs.compute_s,
        "flops_per_replica_step": costs.flops_per_replica_step,
        "param_bytes": costs.grad_nbytes,
        "final_train_loss": _last(metrics, "train_loss"),
        "final_test_loss": _last(metrics, "test_loss"),
        "final_test_accuracy": _last(metrics, "test_accuracy"),
        "diverged": diverged_at is not None,
        "diverged_at_step": diverged_at,
        "time_split": time_split(events, devices, sim_time_s),
    }
    summary.update(extra)
    return summary


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """A CSV with round-trip float formatting, so identical runs give identical bytes."""
    frame.to_csv(path, index=False, lineterminator="\n")


def write_json(data: dict[str, Any], path: Path) -> None:
    """Sorted, indented JSON; NaN becomes null so every JSON reader accepts it."""
    path.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=True) + "\n")


#: Files that mark a folder as written by simdist, so it may be replaced.
REPORT_MARKERS = ("summary.json", "compare.csv", "sweep.csv")


def check_output_folder(target: Path) -> None:
    """Refuse to replace a folder that simdist did not write, or that cannot be written.

    A report folder is replaced whole; a folder holding anything else (the
    user's files) is never deleted. Checked before a run starts, so a bad
    ``--out`` costs no simulation.
    """
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise SimdistError(f"--out {target}: exists and is not a folder; choose another path")
    if target.is_dir() and any(target.iterdir()):
        if not any((target / marker).is_file() for marker in REPORT_MARKERS):
            raise SimdistError(
                f"--out {target}: the folder exists and is not a simdist report "
                f"(no {' / '.join(REPORT_MARKERS)}); refusing to replace it — "
                "choose a new or empty folder, e.g. --out reports/my_run"
            )
    parent = next((p for p in [target.parent, *target.parent.parents] if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise SimdistError(f"--out {target}: cannot create it: {parent} is not a writable folder")


class AtomicFolder:
    """A temporary folder beside ``target`` that replaces ``target`` on success.

    Used as a context manager: on a clean exit the temporary folder is renamed
    to ``target`` (an older report in ``target`` is removed first); on any
    exception, Ctrl-C included, it is deleted and ``target`` is left as it was.
    A ``target`` that is not a simdist report is refused (:func:`check_output_folder`),
    and file-system errors become one :class:`SimdistError`.
    """

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.tmp: Path | None = None

    def __enter__(self) -> Path:
        check_output_folder(self.target)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(
                tempfile.mkdtemp(prefix=f".{self.target.name}.", dir=self.target.parent)
            )
        except OSError as exc:
            raise SimdistError(f"cannot write the report folder {self.target}: {exc}") from None
        return self.tmp

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        assert self.tmp is not None
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if issubclass(exc_type, OSError):
                raise SimdistError(f"cannot write the report folder {self.target}: {exc}") from None
            return False
        old = None
        try:
            if self.target.exists():
                old = self.target.with_name(f".{self.target.name}.old.{os.getpid()}")
                self.target.rename(old)
            self.tmp.rename(self.target)
        except OSError as error:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise SimdistError(f"cannot write the report folder {self.target}: {error}") from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return False
