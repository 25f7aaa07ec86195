"""A report's plots drawn in a second process while this one writes the rest.

On the 2-core machine of docs/PERFORMANCE.md, matplotlib's import and the plots are
about 2 of a warm ``simdist run``'s 5–8 seconds, and nothing else in the report needs
them: the tables, trace.json and report.md only need the plots' file names. So
``simdist run`` forks a *painter* before the run imports JAX (forking a process that
runs XLA's threads is unsafe); it imports matplotlib while the run simulates, then
draws the plots and writes trace.json into the report's temporary folder while the run
writes the tables. Same code, same data: the files are the same bytes as when written
in-process (tested). On two cores or more the painter forks a helper when the plots are
due (matplotlib is loaded by then, so the fork costs little) and each does every second
job (:func:`_draw_shared`): ps_4w2s's seven figures take 1.4 s instead of 2.1 s.

Whatever goes wrong on the painter's side falls back to drawing in-process, so a
report never depends on it: a platform without ``fork``, JAX already imported, a
painter that died or whose plot raised (the in-process drawing then raises the same
error, with its traceback). ``SIMDIST_PLOT_PROCESS=0`` turns the painter off.
The painter ignores the signals that stop a run: the run kills it, then removes its
temporary folder.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simdist.report.drawn import Drawn

if TYPE_CHECKING:
    from simdist.runtime.engine import Result

#: ``SIMDIST_PLOT_PROCESS=0`` draws every plot in-process.
ENV = "SIMDIST_PLOT_PROCESS"
#: The report's Chrome trace, which the painter writes too (:func:`file_jobs`).
TRACE = "trace.json"


def plot_jobs(result: Result | Drawn, folder: Path) -> list[Callable[[], list[str]]]:
    """Every plot of ``result`` as a job drawing into ``folder`` and returning the names it
    wrote, in report.md's order: ``loss_vs_time.png`` (not for a timing-only run, which
    computed no loss), those of
    :func:`simdist.report.plots.plot_jobs`, then the links' heatmap (none when no link
    carried bytes)."""
    from simdist.report import links, plots

    def loss_vs_time() -> list[str]:
        # Through the module, so a test may replace it.
        plots.plot_loss_vs_time(result.metrics, result.scenario.name, folder / "loss_vs_time.png")
        return ["loss_vs_time.png"]

    def job(name: str, draw: Callable[[], None]) -> Callable[[], list[str]]:
        def drawn() -> list[str]:
            draw()
            return [name]

        return drawn

    learned = [loss_vs_time] if result.summary.get("numerics", True) else []
    return [
        *learned,
        *(job(name, draw) for name, draw in plots.plot_jobs(result, folder)),
        lambda: links.write_link_plots(result, folder),
    ]


def file_jobs(result: Result | Drawn, folder: Path) -> list[Callable[[], list[str]]]:
    """Every file the painter writes, as jobs: ``trace.json``, then :func:`plot_jobs`.

    trace.json needs no matplotlib, but building it is the longest job of a run with many
    events (ps_4w2s: 42,000 events, about 0.5 s): drawn beside the plots, it keeps the run
    from writing it alone while the painter and its helper wait for the CPU it holds.
    """
    from simdist.report import trace as chrome_trace

    def trace() -> list[str]:
        # Through the module, so a test may replace it.
        chrome_trace.write_trace(result, folder / TRACE)
        return [TRACE]

    return [trace, *plot_jobs(result, folder)]


def draw_files(result: Result | Drawn, folder: Path) -> list[str]:
    """Write every file of :func:`file_jobs` into ``folder``; their names, in order."""
    return [name for job in file_jobs(result, folder) for name in job()]


def _draw_shared(result: Result | Drawn, folder: Path) -> list[str]:
    """:func:`draw_files` on two cores: a forked helper does every second job.

    The helper draws into a private folder and sends the files' bytes back through a
    pipe; this process writes them into ``folder``. So only this process ever writes
    into the report's folder, and a helper left alone (this painter killed) fails on the
    pipe and ends without touching it. A helper that fails leaves its plots to this one.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper
        os.close(read_fd)
        status = 1
        try:
            with tempfile.TemporaryDirectory(prefix="simdist-plots-") as private:
                jobs = file_jobs(result, Path(private))
                files = {
                    i: [(name, (Path(private) / name).read_bytes()) for name in jobs[i]()]
                    for i in range(1, len(jobs), 2)
                }
                with os.fdopen(write_fd, "wb") as out:
                    pickle.dump(files, out)
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    pipe = os.fdopen(read_fd, "rb")
    try:
        jobs = file_jobs(result, folder)
        names = {i: jobs[i]() for i in range(0, len(jobs), 2)}
        try:
            theirs = pickle.load(pipe)
        except Exception:  # the helper failed: its pipe ended early
            theirs = None
    finally:
        pipe.close()  # a helper still writing then fails and ends
        os.waitpid(pid, 0)
    for i in range(1, len(jobs), 2):
        if theirs is None:
            names[i] = jobs[i]()
            continue
        names[i] = []
        for name, data in theirs[i]:
            (folder / name).write_bytes(data)
            names[i].append(name)
    return [name for i in sorted(names) for name in names[i]]


def _serve(conn: Any) -> None:
    """The painter: draw each (result, folder) received, answer with the names or None."""
    from simdist.report.tables import HELD_SIGNALS

    for signum in HELD_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)  # the parent's watchdog pipe is not ours
    import simdist.report.links
    import simdist.report.plots
    import simdist.report.trace  # noqa: F401  (imported now, while the run simulates)

    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the run has ended, or was killed
        if job is None:
            return
        result, folder = job
        try:
            draw = _draw_shared if (os.cpu_count() or 1) > 1 else draw_files
            names: list[str] | None = draw(result, folder)
        except Exception:
            names = None  # the run draws again in-process and gets the error itself
        try:
            conn.send(names)
        except OSError:
            return


class Painter:
    """The run's side of a painter process."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()

    def submit(self, result: Result, folder: Path) -> bool:
        """Ask for ``result``'s plots in ``folder``; False if the painter cannot take them."""
        try:
            self._conn.send((Drawn.of(result), Path(folder)))
        except (OSError, ValueError):
            return False
        return True

    def collect(self) -> list[str] | None:
        """The names of the plots submitted last, or None if they must be drawn here."""
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return None

    def kill(self) -> None:
        """Stop the painter now (the run is being stopped); it writes nothing more."""
        self._process.kill()
        self._process.join()
        self._conn.close()

    def close(self) -> None:
        """Let the painter finish and end."""
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self._process.join(timeout=5)
        if self._process.is_alive():
            self.kill()
        else:
            self._conn.close()


_current: Painter | None = None


def current() -> Painter | None:
    """The painter of the ``painting()`` block being run, if any."""
    return _current


def usable() -> bool:
    """Whether a painter may be forked here and now (see the module docstring)."""
    return (
        os.environ.get(ENV, "1") != "0"
        and sys.platform == "linux"
        and "jax" not in sys.modules
        and _current is None
    )


@contextlib.contextmanager
def painting() -> Iterator[None]:
    """Reports written inside the block draw their plots in a painter, when :func:`usable`."""
    global _current
    if not usable():
        yield
        return
    try:
        painter = _current = Painter()
    except OSError:  # no process to spare: draw in-process
        yield
        return
    try:
        yield
    finally:
        if _current is painter:  # not killed by a stopped report
            _current = None
            painter.close()


def plots_beside(result: Result, folder: Path, write_rest: Callable[[], None]) -> list[str]:
    """Draw ``result``'s plots and trace.json into ``folder`` while ``write_rest()`` writes
    the other files.

    In the current painter if there is one, else after ``write_rest`` in-process;
    returns the plots' names. An exception (a signal) kills the painter first, so
    nothing writes into the folder while it is removed.
    """
    global _current
    painter = current()
    sent = painter is not None and painter.submit(result, folder)
    try:
        write_rest()
        names = painter.collect() if sent and painter is not None else None
    except BaseException:
        if sent and painter is not None:
            painter.kill()
            _current = None
        raise
    names = names if names is not None else draw_files(result, folder)
    return [name for name in names if name != TRACE]
