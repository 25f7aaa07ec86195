"""The ``simdist`` command line: run, validate, list, profile, collectives, sweep, compare,
tradeoff, goodput.

Every user error (bad scenario, bad option) is printed as one message and
exits with status 2 — never a traceback, never a half-written report.

Exit status: 0 done, 2 bad input (nothing written), 3 the run diverged (its report is
written), 128 + the signal for a run stopped by SIGINT (130), SIGTERM (143) or SIGHUP
(129), which writes no report and leaves no temporary folder.

Each command lives in the module named after it (list in listing.py; compare and tradeoff
in compare.py); common.py holds the app and what the commands share.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from simdist.cli.common import EXIT_BAD_INPUT, EXIT_DIVERGED, app, console, err_console

# Importing a command module registers its commands on ``app``; ``simdist --help`` lists
# them in the order they are imported here.
# isort: off
from simdist.cli import run, listing, profile, collectives, sweep, compare, cache  # noqa: F401
from simdist.cli import goodput  # noqa: F401
# isort: on

__all__ = ["EXIT_BAD_INPUT", "EXIT_DIVERGED", "app", "console", "err_console", "main"]


def _fast_exit(code: Any) -> None:
    """End the process at once once JAX is loaded, skipping the interpreter's teardown.

    Tearing down JAX, XLA, pandas and matplotlib at exit took about 0.5 s of a 3.5 s run.
    By the time the command returns, every file is written and closed (report
    folders are renamed into place; JAX writes compiled programs as it compiles), so only
    the output streams and logging need flushing. Not with Dask loaded (a sweep's worker
    processes are shut down by their own handlers) or with ``SIMDIST_FAST_EXIT=0``.
    """
    if "jax" not in sys.modules or "distributed" in sys.modules:
        return
    if os.environ.get("SIMDIST_FAST_EXIT", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    import logging

    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message") prints the message and exits 1
        print(code, file=sys.stderr, flush=True)
        status = 1
    os._exit(status)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted: no report written")
        sys.exit(130)
    except SystemExit as exc:
        _fast_exit(exc.code)
        raise
