"""Several runs' pipeline micro-batches through the stages, one program per stage function.

The seeds of one pipeline scenario (gpipe, 1f1b) run the same stage programs on other
parameters and data. :class:`StageBatch` runs K runs' micro-batch through a stage in one
call: the program holds K copies of the one-run stage program side by side (each copy a
call of :class:`~simdist.numerics.stages.StagedModel`'s jitted function, which XLA
inlines), so every run's result equals its one-run call bit for bit, and K runs cost one
dispatch instead of K.

Why copies and not ``jax.vmap`` over the runs: on XLA:CPU (JAX 0.10.2) a vmapped stage
gives other bits than the one-run program — the backward of the first stage (a
dot of activations and incoming gradients with a batch dimension) and Adam's update
differ in the last bit at widths 6 and 8, and differ between two processes — while the
copies are equal at every width tried (3, 6, 8; sgd, momentum, adam; the 8-layer mlp of
scenarios/pipeline_gpipe.yaml; tests/test_batched_pipeline.py checks whole runs). A whole
micro-batch or a whole step per copy was exact too, but compiled several times longer
for no gain that could be measured: the stage programs are what the one-run calls.

The optimizer update, the BatchNormalization moments and the evaluation stay one call
per run (the one-run code itself), so only the stage programs and the sum of the
micro-batch gradients (element-wise additions in the same order: exact) are shared.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from functools import reduce
from typing import Any

import jax
import jax.numpy as jnp

from simdist.memo import remember
from simdist.numerics.models import STATE
from simdist.numerics.stages import StagedModel

__all__ = ["StageBatch", "losses_of", "stage_batch"]

#: Programs per runs' key, the most recently used few: a second batch of the same
#: scenario compiles nothing (a program is compiled once per number of runs side by side).
_BATCHES: OrderedDict[str, StageBatch] = OrderedDict()


def stage_batch(key: Hashable, staged: StagedModel) -> StageBatch:
    """The :class:`StageBatch` of runs whose stage programs are ``staged``'s (all runs of
    equal ``key`` have equal stage programs); built once per key."""
    return remember(_BATCHES, repr(key), lambda: StageBatch(staged))


def _side_by_side(fn: Callable) -> Callable:
    """Jitted: ``fn`` applied to each run's arguments, the runs' results as a tuple.

    Called with one tuple per argument of ``fn`` (the runs' values, in run order)."""
    return jax.jit(lambda *columns: tuple(fn(*args) for args in zip(*columns, strict=True)))


def _summed(trees: Sequence[Any]) -> Any:
    """``trees`` added left to right, as the one-run loop accumulates them."""
    return reduce(lambda a, b: jax.tree.map(jnp.add, a, b), trees)


class StageBatch:
    """The stage programs of several runs side by side (see the module docstring)."""

    def __init__(self, staged: StagedModel) -> None:
        self.staged = staged
        self._fns: dict[tuple, Callable] = {}

    def _fn(self, key: tuple, fn: Callable) -> Callable:
        found = self._fns.get(key)
        if found is None:
            found = self._fns[key] = _side_by_side(fn)
        return found

    def micro_batch(
        self, parts: Sequence[Sequence[Any]], xs: Sequence[Any], ys: Sequence[Any], scale: int
    ) -> tuple[list[Any], list[list[Any]], list[Any]]:
        """:meth:`StagedModel.micro_batch` of each run (its stage parameters ``parts[k]``,
        its examples ``xs[k]``, ``ys[k]``): per run its loss (a device scalar), its
        gradients per stage and its moments merged into one tree."""
        staged = self.staged
        last = staged.stages - 1
        acts, moments = [list(xs)], [{} for _ in xs]
        for s in range(last):
            out = self._fn(("F", s), lambda p, a, s=s: staged.forward(s, p, a))(
                tuple(p[s] for p in parts), tuple(acts[-1])
            )
            acts.append([a for a, _ in out])
            for into, (_, m) in zip(moments, out, strict=True):
                _merge(into, m)
        out = self._fn(("L", int(scale)), lambda p, a, y: staged.last(p, a, y, scale))(
            tuple(p[last] for p in parts), tuple(acts[-1]), tuple(ys)
        )
        losses = [loss for loss, _, _, _ in out]
        grads: list[list[Any]] = [[None] * staged.stages for _ in xs]
        g_in = []
        for k, (_, g_last, g, m) in enumerate(out):
            grads[k][last] = g_last
            g_in.append(g)
            _merge(moments[k], m)
        for s in reversed(range(last)):
            out = self._fn(("B", s), lambda p, a, g, s=s: staged.backward(s, p, a, g))(
                tuple(p[s] for p in parts), tuple(acts[s]), tuple(g_in)
            )
            for k, (g_params, g) in enumerate(out):
                grads[k][s] = g_params
                g_in[k] = g
        return losses, grads, moments

    def gradients(
        self, params: Sequence[Any], batches: Sequence[tuple[Any, Any]], pieces: int, scale: int
    ) -> tuple[list[list[Any]], list[Any], list[list[Any]]]:
        """:meth:`PipelineTrainer.gradients` of each run, ``pieces`` micro-batches of its
        global batch: per run the micro-batches' losses (device scalars, in order), the
        summed gradient (one tree) and the micro-batches' moments (non-empty ones)."""
        parts = [self.staged.split(p) for p in params]
        n = len(batches[0][0])
        size = n // pieces
        losses: list[list[Any]] = [[] for _ in params]
        trees: list[list[Any]] = [[] for _ in params]
        moments: list[list[Any]] = [[] for _ in params]
        for i in range(pieces):
            piece = slice(i * size, (i + 1) * size)
            loss, grads, m = self.micro_batch(
                parts, [x[piece] for x, _ in batches], [y[piece] for _, y in batches], scale
            )
            for k in range(len(params)):
                losses[k].append(loss[k])
                trees[k].append(self.staged.merge(grads[k]))
                if m[k]:
                    moments[k].append(m[k])
        total = self._fn(("sum", pieces), lambda *t: _summed(t))(*zip(*trees, strict=True))
        return losses, list(total), moments


def _merge(into: dict, moments: Any) -> None:
    """A stage's moments into a run's tree (as ``StagedModel.micro_batch`` merges them)."""
    if moments:
        into.setdefault(STATE, {}).update(moments[STATE])


def losses_of(values: Sequence[Sequence[Any]]) -> list[list[float]]:
    """Device scalars fetched in one transfer, as Python floats (``float(loss)``)."""
    fetched = jax.device_get([list(v) for v in values])
    return [[float(x) for x in v] for v in fetched]
