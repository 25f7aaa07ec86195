"""Stopping a run cleanly: SIGINT, SIGTERM and SIGHUP end it with one line and no report.

The CLI runs a simulation inside :func:`interruptible`: a signal unwinds the run like
Ctrl-C (the report writer removes its temporary folder as the exception passes), one line
says how far the run got, and the process exits with 128 + the signal. A watchdog thread
ends a run that cannot get back to Python (stuck inside XLA) :data:`GRACE_S` after the
signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP during a run: unwinds like Ctrl-C, remembering the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Progress:
    """How far a run got, for the line printed when it is interrupted, and the signal
    that stopped it (kept in case its exception was swallowed, see :meth:`step_done`)."""

    total: int | None = None
    step: int = 0
    now_s: float = 0.0
    signum: int | None = None

    def step_done(self, step: int, total: int) -> None:
        """Record a finished step; raise again a stop request that got lost.

        A signal handler's exception raised inside a garbage-collector callback or a
        ``__del__`` is printed and dropped by Python ("Exception ignored in ..."), so the
        run would go on; the next step re-raises it.
        """
        self.step, self.total = step, total
        if self.signum is not None:
            raise Interrupted(self.signum)


#: Seconds a signalled run has to unwind before it is ended without cleaning up.
GRACE_S = 10.0


def _watchdog(read_fd: int) -> None:
    """Wait for a signal byte on ``read_fd``; if the run has not unwound (a zero byte)
    :data:`GRACE_S` later, exit at once with 128 + the signal.

    Python runs signal handlers only between bytecodes, so a run blocked inside
    compiled code (XLA waiting on a buffer that failed to allocate never returns)
    would otherwise ignore SIGTERM for good. A temporary folder left behind is
    removed by the next run into the same parent.
    """
    import select

    from simdist.report.tables import HELD_SIGNALS

    while True:
        byte = os.read(read_fd, 1)
        if byte in (b"", b"\0"):
            return
        if byte[0] not in HELD_SIGNALS:
            continue  # another library's signal: not a request to stop
        deadline = time.monotonic() + GRACE_S
        while (left := deadline - time.monotonic()) > 0:
            if select.select([read_fd], [], [], left)[0] and os.read(read_fd, 1) in (b"", b"\0"):
                return
        name = signal.Signals(byte[0]).name
        os.write(2, f"interrupted ({name}): not stopped in {GRACE_S:g} s; exiting now\n".encode())
        os._exit(128 + byte[0])


@contextlib.contextmanager
def _watched() -> Iterator[None]:
    """Run the block with :func:`_watchdog` watching the signals Python receives."""
    import threading

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: no handlers here either
        os.close(read_fd)
        os.close(write_fd)
        yield
        return
    watcher = threading.Thread(target=_watchdog, args=(read_fd,), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.write(write_fd, b"\0")
        watcher.join()
        os.close(read_fd)
        os.close(write_fd)


def _count(n: int) -> str:
    """``1,234`` or, for a count too long to read, ``about 10^30``."""
    from simdist.spec import show

    return f"{n:,}" if n < 10**15 else show(n)


@contextlib.contextmanager
def interruptible(progress: Progress, out_dir: Path) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the run: one line, exit 128 + signal, no report.

    The report writer removes its temporary folder as the exception passes through it.
    A signal the parent set to be ignored (``nohup`` ignores SIGHUP) stays ignored.
    """
    from simdist.report.tables import HELD_SIGNALS, MARKER

    def stop(signum: int, frame: Any) -> None:
        progress.signum = signum
        raise Interrupted(signum)

    previous = {}
    for signum in HELD_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, stop)
    started = time.time()
    try:
        with _watched():
            yield
    except KeyboardInterrupt as interrupt:
        signum = interrupt.signum if isinstance(interrupt, Interrupted) else signal.SIGINT
        from simdist.units import format_duration

        marker = out_dir / MARKER
        if marker.is_file() and marker.stat().st_mtime >= started:
            what = f"after its report was written to {out_dir}"
        else:
            total = "?" if progress.total is None else _count(progress.total)
            what = (
                f"at simulated t = {format_duration(progress.now_s)}, step {progress.step:,} "
                f"of {total}: no report written"
            )
        err_console.print(f"interrupted {escape(what)}", highlight=False, soft_wrap=True)
        raise typer.Exit(128 + signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
