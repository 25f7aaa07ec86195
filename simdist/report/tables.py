"""Writing a run's tables: CSV and JSON with stable bytes, into a folder replaced atomically.

A report folder appears whole or not at all: everything is written into a
temporary sibling folder which is renamed into place at the end, so an error
or Ctrl-C never leaves a half-written report.  summary.json's figures are
built by :mod:`simdist.summary`; this module only writes them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from simdist.errors import SimdistError


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
