"""Several runs' copies of a one-run program, side by side in one XLA program.

A family whose runs share their programs (the seeds of one scenario: a
:class:`~simdist.numerics.executor.Workload` shares them across seeds) computes its step as a
program over *lanes*: a run alone is one lane, and the seeds of a batch
(:func:`simdist.runtime.engine.run_batch`) are k lanes of the same program, one dispatch for k runs.
There is one program per family, not a single-run one and a batched one.

The lanes are copies and not a ``vmap``: a lane of a ``vmap`` is a different program from
the one-run's (its dots and reductions get other shapes), and XLA:CPU picks kernels and
summation orders by shape, so a vmapped lane differed from the one-run result in the last
bit for some models, widths and batch sizes (a cnn at 2 replicas × 2 runs, an mlp at 4 × 4,
any one-replica run's loss, an adam update even at one run; the first pipeline stage's
backward and Adam's update at widths 6 and 8, differing between two processes too). A copy
has the one-run program's shapes, hence its kernels: every lane equals the run computed
alone, bit for bit (tests/test_batched_sync.py, tests/test_batched_pipeline.py).
"""

from __future__ import annotations

from collections.abc import Callable

import jax

__all__ = ["side_by_side"]


def side_by_side(fn: Callable) -> Callable:
    """Jitted: ``fn`` applied to each lane's arguments; the lanes' results as a tuple.

    Called with one tuple per argument of ``fn`` (the lanes' values, in lane order). One
    jitted function serves every width: a width is traced and compiled the first time it is
    called."""
    return jax.jit(lambda *columns: tuple(fn(*args) for args in zip(*columns, strict=True)))
