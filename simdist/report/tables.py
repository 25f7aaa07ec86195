"""Writing a run's tables: CSV and JSON with stable bytes, into a folder replaced atomically.

A report folder appears whole or not at all: everything is written into a
temporary sibling folder (``.NAME.tmp.<host>.<pid>.<random>``) which is renamed
into place at the end, so an error, Ctrl-C, SIGTERM or SIGHUP never leaves a
half-written report; signals that arrive while the folder is renamed or the
temporary one removed are held until that is done. A folder left behind by a
killed run (SIGKILL, power loss) is removed by the next run into the same parent.

A folder is replaced only if simdist wrote it: it holds :data:`MARKER` (or, from
before the marker, only report files beside a summary.json or compare.csv), so
``--out`` pointing at the user's own folder, its parent or the working folder
itself deletes nothing. Report folders get the permissions of the umask, as any
folder the user makes.

``SIMDIST_PAUSE_AT_WRITE=<seconds>`` (a test hook) pauses a writer for that long
just before the rename, with the folder fully written, so a test can signal it
at that moment deterministically.

summary.json's figures are built by :mod:`simdist.summary`; this module only
writes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


#: The file that marks a folder as a simdist report, so that a later run may replace it.
MARKER = ".simdist-report"
_MARKER_TEXT = "This folder was written by simdist; the next run into it replaces it whole.\n"
#: Before the marker: a folder of only report files beside one of these was a report.
LEGACY_MARKERS = ("summary.json", "compare.csv")
_REPORT_SUFFIXES = (".csv", ".json", ".png", ".md", ".yaml", ".npz")
#: Characters a temporary folder adds to the report's name: ".tmp.<6>.<pid>.<8>" and a dot.
_TMP_EXTRA = 40
#: The test hook (see the module docstring).
PAUSE_ENV = "SIMDIST_PAUSE_AT_WRITE"
#: Signals held while a folder is renamed into place or removed.
HELD_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _host_tag() -> str:
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]


def _temp_re(name: str) -> re.Pattern[str]:
    """Temporary folders of report ``name``: this version's, and the mkdtemp ones before it."""
    current = r"(?:tmp|old)\.(?P<host>[0-9a-f]{6})\.(?P<pid>\d+)\.[0-9a-f]{8}"
    return re.compile(rf"\.{re.escape(name)}\.(?:{current}|old\.\d+|[a-z0-9_]{{8}})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or a number no process has: keep it)
    return True


def clean_stale(target: Path) -> list[Path]:
    """Remove temporary folders of ``target`` left by killed runs; return those removed.

    Only this host's folders whose process has ended, and the older versions' ones
    (whose writer is unknown), are removed: a run writing the same report right now
    keeps its own.
    """
    pattern, host, removed = _temp_re(target.name), _host_tag(), []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or not entry.is_dir() or entry.is_symlink():
            continue
        if match["pid"] is not None and (
            match["host"] != host or int(match["pid"]) == os.getpid() or _alive(int(match["pid"]))
        ):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


@contextlib.contextmanager
def report_lock(target: Path) -> Iterator[None]:
    """Hold the right to write the report folder ``target`` for the block.

    Two runs into one ``--out`` at once would both report success while the second
    silently replaced the first; the second is refused instead, before it simulates, with
    one clear error. The lock is an OS file lock (the ``filelock`` package) on a file
    named after ``target``'s absolute path in the per-user cache's ``locks`` folder, so the
    reports' folder holds nothing but reports: a killed process releases it, and the file
    is removed at the end of the block. Where no lock file can be made (a read-only home),
    the run goes on unguarded.
    """
    import filelock

    from simdist.compile_cache import cache_dir

    target = Path(target)
    digest = hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:32]
    path = cache_dir() / "locks" / f"{digest}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(path, timeout=0)
        lock.acquire()
    except filelock.Timeout:
        raise SimdistError(
            f"{target}: another simdist run is writing this report folder right now; "
            "wait for it to finish, or give another --out"
        ) from None
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # before the release: a run arriving now finds the file held
        lock.release()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP arriving inside the block are delivered at its end.

    A rename into place or a temporary folder's removal then never stops half-way.
    Only the main thread can install handlers; elsewhere the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    previous = {}
    for signum in HELD_SIGNALS:
        handler = signal.getsignal(signum)
        if handler not in (signal.SIG_IGN, None):
            previous[signum] = signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def _replaceable(folder: Path) -> bool:
    """Whether a report may replace ``folder``: it does not exist, is empty, or simdist
    wrote it (the marker, or from before the marker only report files)."""
    if not folder.exists():
        return True
    if not folder.is_dir():
        return False
    entries = list(folder.iterdir())
    if not entries or (folder / MARKER).is_file():
        return True
    return any((folder / m).is_file() for m in LEGACY_MARKERS) and all(
        e.is_file() and not e.is_symlink() and e.suffix in _REPORT_SUFFIXES for e in entries
    )


def _refuse(target: Path, why: str) -> SimdistError:
    return SimdistError(f"--out {target}: {why}")


def _writable(folder: Path) -> None:
    """Raise unless a folder can be made in ``folder`` (tried, so that root on /proc fails)."""
    probe = folder / f".simdist-probe.{os.getpid()}.{secrets.token_hex(4)}"
    with signals_held():
        try:
            os.mkdir(probe)
        except OSError as exc:
            raise SimdistError(f"cannot write into {folder}: {exc.strerror or exc}") from None
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def check_output_folder(target: Path) -> Path:
    """The absolute report folder ``target`` names, checked before any simulation.

    Refused: a path ending in ``.`` or ``..`` or going up through ``..``, the working
    folder or any folder above it, a file, a folder simdist did not write (not empty
    and no marker), a name too long for the file system, and a place where no folder
    can be made (tried, since ``os.access`` says yes to root on ``/proc``).
    """
    target = Path(target)
    if str(target) in ("", ".") or target.name in ("", ".", "..") or ".." in target.parts:
        raise _refuse(
            target,
            "must name a new or report folder inside its parent (no '.' or '..'), "
            "e.g. --out reports/my_run",
        )
    try:
        resolved = target.resolve()
        cwd = Path.cwd().resolve()
    except (OSError, RuntimeError) as exc:
        raise _refuse(target, f"cannot resolve it: {exc}") from None
    if resolved == cwd or resolved in cwd.parents:
        raise _refuse(
            target,
            f"is {'the working folder' if resolved == cwd else 'a parent of the working folder'} "
            f"({resolved}); a report replaces its folder whole, e.g. --out reports/my_run",
        )
    try:
        parent = target.absolute().parent.resolve()
    except (OSError, RuntimeError) as exc:
        raise _refuse(target, f"cannot resolve it: {exc}") from None
    if resolved == parent or resolved in parent.parents:  # a symlink up the tree
        raise _refuse(
            target,
            f"resolves to {resolved}, the folder it is in or one above it; a report replaces "
            "its folder whole, e.g. --out reports/my_run",
        )
    if len(os.fsencode(resolved.name)) + _TMP_EXTRA > 255:
        raise _refuse(
            target,
            f"the folder name has {len(os.fsencode(resolved.name))} bytes; at most "
            f"{255 - _TMP_EXTRA} (file names end at 255), e.g. --out reports/my_run",
        )
    try:
        if resolved.exists() and not resolved.is_dir():
            raise _refuse(target, "exists and is not a folder; choose another path")
        if not _replaceable(resolved):
            raise _refuse(
                target,
                f"the folder exists and is not a simdist report (no {MARKER}); refusing to "
                "replace it — choose a new or empty folder, e.g. --out reports/my_run",
            )
        parent = next((p for p in resolved.parents if p.exists()), None)
        if parent is None or not parent.is_dir():
            raise _refuse(target, f"cannot create it: {parent} is not a folder")
    except OSError as exc:
        raise _refuse(target, f"cannot use it: {exc}") from None
    try:
        _writable(parent)
    except SimdistError as exc:
        raise _refuse(target, f"cannot create it: {exc}") from None
    return resolved


def _pause_for_tests(tmp: Path) -> None:
    seconds = os.environ.get(PAUSE_ENV)
    if not seconds:
        return
    print(f"{PAUSE_ENV}: pausing {seconds} s before renaming {tmp}", file=sys.stderr, flush=True)
    time.sleep(float(seconds))


class AtomicFolder:
    """A temporary folder beside ``target`` that replaces ``target`` on success.

    Used as a context manager: on a clean exit the marker is written and the temporary
    folder renamed to ``target`` (an older report there is removed); on any exception,
    Ctrl-C and the signals the CLI turns into exceptions included, it is deleted and
    ``target`` is left as it was. A ``target`` simdist may not write is refused
    (:func:`check_output_folder`), stale temporary folders of killed runs are removed,
    and file-system errors become one :class:`SimdistError`.
    """

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.tmp: Path | None = None

    def _name(self, kind: str) -> Path:
        tag = f"{kind}.{_host_tag()}.{os.getpid()}.{secrets.token_hex(4)}"
        return self.target.with_name(f".{self.target.name}.{tag}")

    def __enter__(self) -> Path:
        self.target = check_output_folder(self.target)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            clean_stale(self.target)
            with signals_held():
                tmp = self._name("tmp")
                os.mkdir(tmp)  # mode 0o777 less the umask, as any folder the user makes
                self.tmp = tmp
        except OSError as exc:
            raise SimdistError(f"cannot write the report folder {self.target}: {exc}") from None
        return tmp

    def _discard(self) -> None:
        if self.tmp is not None:
            with signals_held():
                shutil.rmtree(self.tmp, ignore_errors=True)

    def _commit(self) -> None:
        assert self.tmp is not None
        (self.tmp / MARKER).write_text(_MARKER_TEXT)
        with signals_held():
            if not _replaceable(self.target):
                raise SimdistError(
                    f"--out {self.target}: became something else than a simdist report "
                    "while the run was writing; refusing to replace it"
                )
            old = None
            if self.target.exists():
                old = self._name("old")
                self.target.rename(old)
            try:
                self.tmp.rename(self.target)
            except OSError:
                if old is not None:
                    old.rename(self.target)
                raise
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        try:
            if exc_type is None:
                _pause_for_tests(self.tmp)
                self._commit()
                return False
        except BaseException as error:
            self._discard()
            if isinstance(error, OSError):
                raise SimdistError(
                    f"cannot write the report folder {self.target}: {error}"
                ) from None
            raise
        self._discard()
        if issubclass(exc_type, OSError):
            raise SimdistError(f"cannot write the report folder {self.target}: {exc}") from None
        return False
