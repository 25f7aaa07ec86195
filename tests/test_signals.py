"""Signals stop a run cleanly: one line, exit 128 + signal, no report, no temporary folder.

Each test drives a real ``simdist run`` in a subprocess and signals it at a known point:
``SIMDIST_PAUSE_AT_WRITE`` makes the report writer pause with the temporary folder fully
written, just before renaming it into place, and announce it on stderr.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import tiny, write

from simdist.report.tables import PAUSE_ENV
from simdist.runtime import interrupts

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


#: What the child prints on stderr once the run's first step is done, when its environment
#: has ``TEST_ANNOUNCE_FIRST_STEP=1``: the simulation is under way, a signal stops it mid-run.
FIRST_STEP = "test: the first step is done"

# The test runner may have been started with SIGINT ignored (as a background job is), and a
# child inherits that; it must see the signals as a user's shell delivers them. Set here,
# not in a preexec_fn: forking a process that runs JAX's threads is unsafe.
_CHILD = f"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
if os.environ.get("TEST_ANNOUNCE_FIRST_STEP") == "1":
    from simdist.runtime.interrupts import Progress
    step_done = Progress.step_done
    def announced(self, step, total):
        step_done(self, step, total)
        if step == 1:
            print({FIRST_STEP!r}, file=sys.stderr, flush=True)
    Progress.step_done = announced
from simdist.cli import main
sys.argv[0] = 'simdist'
main()
"""


def _start(args: list[object], cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *map(str, args)],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(proc: subprocess.Popen[str], text: str, seen: str = "", timeout: float = 240) -> str:
    """Read the child's stderr until it holds ``text``; return all of it read so far.

    ``seen`` is what earlier calls returned: a chunk read may hold the next line too. The
    pipe is read directly, not through ``proc.stderr``'s buffer, where a line already read
    would wait unseen by ``select``. The timeout only guards against a run that hangs.
    """
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    data = seen.encode()
    deadline = time.monotonic() + timeout
    while text.encode() not in data:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} within {timeout} s; stderr so far:\n{data.decode()}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"the run ended before {text!r} (exit {proc.wait()}):\n{data.decode()}"
            data += chunk
    return data.decode(errors="replace")


@pytest.mark.parametrize("signum", STOPPING, ids=lambda s: signal.Signals(s).name)
def test_a_signal_while_the_report_is_written_leaves_nothing(tmp_path, signum):
    scenario = write(tmp_path, tiny(**{"workload.steps": 3}))
    reports = tmp_path / "reports"
    args = ["run", scenario, "-q", "--out", reports / "tiny"]
    proc = _start(args, tmp_path, **{PAUSE_ENV: "120"})
    try:
        _wait_for(proc, PAUSE_ENV)
        (temporary,) = reports.iterdir()  # the report, whole, not yet renamed into place
        assert temporary.name.startswith(".tiny.tmp.") and (temporary / "summary.json").is_file()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert err.strip().endswith(
        "interrupted at simulated t = 3 ms, step 3 of 3: no report written"
    ), err
    assert list(reports.iterdir()) == []


def test_a_huge_run_warns_before_it_starts_and_stops_on_ctrl_c(tmp_path):
    scenario = write(tmp_path, tiny(**{"workload.steps": 10**7}))
    proc = _start(
        ["run", scenario, "-q", "--out", tmp_path / "out"], tmp_path, TEST_ANNOUNCE_FIRST_STEP="1"
    )
    try:
        seen = _wait_for(proc, "steps is huge")
        assert "workload.steps: 10,000,000 steps is huge: simulating them would take" in seen
        _wait_for(proc, FIRST_STEP, seen)  # into the simulation
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert re.search(
        r"interrupted at simulated t = .+, step [1-9][\d,]* of 10,000,000: no report written", err
    ), err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["scenario.yaml"]


def test_the_watchdog_ends_a_run_that_cannot_unwind(monkeypatch):
    """A run stuck in compiled code never runs its Python signal handler: the watchdog
    thread exits the process GRACE_S after the signal, with 128 + the signal."""
    exits: list[int] = []

    def exit_now(code: int) -> None:
        exits.append(code)
        raise SystemExit  # ends the watchdog's thread, as os._exit ends the process

    monkeypatch.setattr(interrupts, "GRACE_S", 0.2)
    monkeypatch.setattr(interrupts.os, "_exit", exit_now)

    def watch(data: bytes) -> None:
        read_fd, write_fd = os.pipe()

        def watchdog() -> None:
            with contextlib.suppress(SystemExit):
                interrupts._watchdog(read_fd)

        try:
            watcher = threading.Thread(target=watchdog)
            watcher.start()
            os.write(write_fd, data)
            watcher.join(timeout=10)
            assert not watcher.is_alive()
        finally:
            os.close(read_fd)
            os.close(write_fd)

    # SIGCHLD is another library's business; SIGTERM, not unwound after 0.2 s, ends the run.
    watch(bytes([signal.SIGCHLD, signal.SIGTERM]))
    assert exits == [128 + signal.SIGTERM]
    # A run that unwinds in time (the zero byte the CLI writes) is left alone.
    watch(bytes([signal.SIGINT]) + b"\0")
    assert exits == [128 + signal.SIGTERM]
