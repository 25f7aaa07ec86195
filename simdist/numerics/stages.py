"""The zoo models as a sequence of layers, cut into pipeline stages, trained for real.

A zoo model is one Flax module; its *layers* are its top-level submodules, in call order,
exactly as :mod:`simdist.numerics.profile` costs them: layer ``k`` is submodule ``k`` plus the
glue its parent runs before the next submodule (an activation, a pooling, a flatten). So the
activation a stage sends is the input of the next stage's first submodule, and the per-layer
costs of the clock and the cut of the numerics agree.

Running layers ``[first, stop)`` alone (:meth:`LayerSequence.apply`) intercepts the module's
calls: submodules before ``first`` and from ``stop`` on are skipped (they return their input,
and under ``jit`` whatever the glue computes from it is dead code), submodule ``first`` gets
the given activation, and the input of submodule ``stop`` is the result. Nothing else
changes: the same parameters, the same operations, so the stages composed compute the model.

Training (no SimPy here; the strategy :mod:`simdist.strategies.pipeline` keeps the time):

* :class:`PipelineTrainer` (gpipe, 1f1b): a micro-batch's forward runs stage by stage, its
  backward stage by stage in reverse with ``jax.vjp`` and the activation gradient of the next
  stage; each micro-batch's loss is its summed per-example loss divided by the *global*
  batch, and the micro-batch gradients are summed, so one update equals one_device's on the
  global batch (BatchNormalization aside: it normalises each micro-batch by its own moments,
  as a mirrored replica does its shard).
* :class:`PipeDreamTrainer` (pipedream): every micro-batch is an update of each stage's own
  weights, applied when its backward reaches that stage (Narayanan et al. 2019, "PipeDream:
  generalized pipeline parallelism for DNN training", §3.3); *weight stashing*: a
  micro-batch's backward uses the weights its forward used on that stage. Each update's
  staleness (updates of that stage between the forward's version and the update) is kept.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from simdist.errors import SimdistError
from simdist.layers import stage_bounds as bounds
from simdist.numerics.lanes import side_by_side
from simdist.numerics.models import MOMENTS, STATE

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload

__all__ = [
    "LayerSequence",
    "PipeDreamTrainer",
    "PipelineTrainer",
    "StagedModel",
    "Update",
    "bounds",
    "loss_sum",
]


def _top_level(context: Any) -> bool:
    return len(context.module.scope.path) == 1 and context.method_name == "__call__"


class LayerSequence:
    """A zoo model's top-level submodules as layers that can run in contiguous runs."""

    def __init__(self, model: nn.Module, input_shape: Sequence[int]) -> None:
        if getattr(model, "aux_losses", False):
            raise SimdistError(
                f"model {type(model).__name__} adds a loss term of its own over its layers (a "
                "mixture of experts' load balancing) and computes between them: it cannot be "
                "cut into pipeline stages; run it timing-only (numerics: false), or use "
                "strategy: expert_parallel"
            )
        self.model = model
        self.input_shape = tuple(int(d) for d in input_shape)
        call = inspect.signature(type(model).__call__).parameters
        self.train = "train" in call  # BatchNormalization: training mode writes moments
        x = jax.ShapeDtypeStruct((1, *self.input_shape), jnp.float32)
        variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
        names: list[str] = []

        def record(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
            if _top_level(context):
                names.append(context.module.scope.path[0])
            return next_fun(*args, **kwargs)

        params = variables.get("params", {})
        with nn.intercept_methods(record):
            jax.eval_shape(lambda v, a: model.apply(v, a), variables, x)
        if len(set(names)) != len(names):
            raise SimdistError(
                f"model {type(model).__name__} calls a submodule twice; a shared layer "
                "cannot be cut into pipeline stages"
            )
        own = sorted(set(params) - set(names))
        if own:
            raise SimdistError(f"model {type(model).__name__} has parameters outside its layers")
        self.names: tuple[str, ...] = tuple(names)

    def __len__(self) -> int:
        return len(self.names)

    def apply(self, variables: Any, x: jax.Array, first: int, stop: int) -> tuple[jax.Array, Any]:
        """Layers ``[first, stop)`` on ``x`` (the model's input when ``first == 0``, else the
        input of submodule ``first``): ``(output, moments)``. ``variables`` needs only those
        layers' parameters; ``moments`` holds the batch moments their BatchNormalizations
        wrote (training mode), ``{}`` for a model without any."""
        n = len(self.names)
        if not 0 <= first < stop <= n:
            raise ValueError(f"layers [{first}, {stop}) of a model with {n} layers")
        seen = [0]
        captured: list[Any] = []

        def cut(next_fun: Callable, args: Any, kwargs: Any, context: Any) -> Any:
            if not _top_level(context):
                return next_fun(*args, **kwargs)
            k = seen[0]
            seen[0] += 1
            if k == first and first > 0:
                args = (x, *args[1:])
            if k == stop:
                captured.append(args[0])
            if k < first or k >= stop:
                return args[0]
            return next_fun(*args, **kwargs)

        inputs = x if first == 0 else jnp.zeros((x.shape[0], *self.input_shape), x.dtype)
        with nn.intercept_methods(cut):
            if self.train:
                out, written = self.model.apply(variables, inputs, train=True, mutable=[MOMENTS])
                moments = {STATE: dict(written[MOMENTS])} if written.get(MOMENTS) else {}
            else:
                out, moments = self.model.apply(variables, inputs), {}
        return (captured[0] if stop < n else out), moments


def _loss_sum(task: str, out: jax.Array, y: jax.Array) -> jax.Array:
    """Summed per-example loss, as ``Workload._loss_sum``: cross-entropy or half squared error."""
    if task == "classification":
        return optax.softmax_cross_entropy_with_integer_labels(out, y).sum()
    return 0.5 * jnp.sum((out - y) ** 2)


class StagedModel:
    """The workload's model cut into stages of ``counts`` layers: jitted forward and backward
    of each stage, and the parameters split into (and merged from) the stages' parts."""

    def __init__(self, workload: Workload, counts: Sequence[int]) -> None:
        self.workload = workload
        self.sequence = LayerSequence(workload.model, workload.dataset.input_shape)
        counts = tuple(int(c) for c in counts)
        if sum(counts) != len(self.sequence) or min(counts) < 1:
            raise SimdistError(
                f"partition {list(counts)}: expected {len(counts)} positive layer counts adding "
                f"up to the model's {len(self.sequence)} layers ({', '.join(self.sequence.names)})"
            )
        self.counts = counts
        self.bounds = bounds(counts)
        self.stages = len(counts)
        self.names = [self.sequence.names[a:b] for a, b in self.bounds]
        # The stage programs depend on the model and the cut, never on the seed: Workloads
        # differing only in seed share them (tests/test_compile_sharing.py).
        self._fns: dict[tuple, Callable] = workload.shared_program(("stages", counts), dict)

    # -- parameters ----------------------------------------------------------

    def split(self, params: Any) -> list[Any]:
        """``{"params": {...}}`` into one such tree per stage (its layers' parameters)."""
        inner = params["params"]
        return [{"params": {n: inner[n] for n in names if n in inner}} for names in self.names]

    def merge(self, parts: Sequence[Any]) -> Any:
        """The stages' parameter trees back into one, in the model's layer order."""
        joined = {n: v for part in parts for n, v in part["params"].items()}
        return {"params": {n: joined[n] for n in self.sequence.names if n in joined}}

    # -- jitted stage functions ----------------------------------------------

    def _fn(self, key: tuple, make: Callable[[], Callable]) -> Callable:
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = jax.jit(make())
        return fn

    def forward(self, s: int, params: Any, x: Any) -> tuple[jax.Array, Any]:
        """Stage ``s`` on ``x``: its output activation and its BatchNormalization moments."""
        first, stop = self.bounds[s]
        return self._fn(("F", s), lambda: lambda p, a: self.sequence.apply(p, a, first, stop))(
            params, x
        )

    def backward(self, s: int, params: Any, x: Any, grad_out: Any) -> tuple[Any, Any]:
        """Stage ``s`` (not the last): the gradient of its parameters and of its input, from the
        gradient of its output (the next stage's). The first stage's input is the data: its
        gradient is not computed (``None``)."""
        first, stop = self.bounds[s]

        def make() -> Callable:
            def fn(p: Any, a: Any, g: Any) -> tuple[Any, Any]:
                if s == 0:
                    _, pull = jax.vjp(lambda q: self.sequence.apply(q, a, first, stop)[0], p)
                    return pull(g)[0], None
                _, pull = jax.vjp(lambda q, b: self.sequence.apply(q, b, first, stop)[0], p, a)
                return pull(g)

            return fn

        return self._fn(("B", s), make)(params, x, grad_out)

    def last(self, params: Any, x: Any, y: Any, scale: int) -> tuple[Any, Any, Any, Any]:
        """The last stage: ``(loss, parameter gradient, input gradient, moments)`` of its summed
        per-example loss divided by ``scale`` (the global batch: ``compute_average_loss``)."""
        s = self.stages - 1
        first, stop = self.bounds[s]
        task = self.workload.task

        def make() -> Callable:
            def fn(p: Any, a: Any, labels: Any) -> tuple:
                def loss(q: Any, b: Any) -> tuple[jax.Array, Any]:
                    out, moments = self.sequence.apply(q, b, first, stop)
                    return _loss_sum(task, out, labels) / scale, moments

                argnums = (0,) if s == 0 else (0, 1)
                (value, moments), grads = jax.value_and_grad(loss, argnums, has_aux=True)(p, a)
                return value, grads[0], (grads[1] if s > 0 else None), moments

            return fn

        return self._fn(("L", int(scale)), make)(params, x, y)

    def _lanes(self, key: tuple, fn: Callable) -> Callable:
        """``fn`` over runs' lanes (:func:`~simdist.numerics.lanes.side_by_side`), built once
        per ``key`` and shared as the stage programs are."""
        lanes = self._fns.get(("lanes", *key))
        if lanes is None:
            lanes = self._fns[("lanes", *key)] = side_by_side(fn)
        return lanes

    def micro_batch(
        self, parts: Sequence[Sequence[Any]], xs: Sequence[Any], ys: Sequence[Any], scale: int
    ) -> tuple[list[Any], list[list[Any]], list[Any]]:
        """One micro-batch of each run through every stage and back, the runs as lanes of
        each stage program (a run alone: one lane). Run ``k`` has the stage parameters
        ``parts[k]`` and the examples ``xs[k]``, ``ys[k]``; per run: its loss (a device
        scalar), its gradients per stage and the moments of every stage's forward merged
        into one tree."""
        last = self.stages - 1
        acts, moments = [tuple(xs)], [{} for _ in xs]
        for s in range(last):
            out = self._lanes(("F", s), lambda p, a, s=s: self.forward(s, p, a))(
                tuple(p[s] for p in parts), acts[-1]
            )
            acts.append(tuple(a for a, _ in out))
            for into, (_, m) in zip(moments, out, strict=True):
                _merge_moments(into, m)
        out = self._lanes(("L", int(scale)), lambda p, a, y: self.last(p, a, y, scale))(
            tuple(p[last] for p in parts), acts[-1], tuple(ys)
        )
        losses = [loss for loss, _, _, _ in out]
        grads: list[list[Any]] = [[None] * self.stages for _ in xs]
        g_in = []
        for k, (_, g_last, g, m) in enumerate(out):
            grads[k][last] = g_last
            g_in.append(g)
            _merge_moments(moments[k], m)
        for s in reversed(range(last)):
            out = self._lanes(("B", s), lambda p, a, g, s=s: self.backward(s, p, a, g))(
                tuple(p[s] for p in parts), acts[s], tuple(g_in)
            )
            for k, (g_params, g) in enumerate(out):
                grads[k][s] = g_params
                g_in[k] = g
        return losses, grads, moments

    def summed(self, trees: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
        """Each run's micro-batch gradients ``trees[k]`` added left to right (element-wise,
        in micro-batch order), the runs as lanes of one program."""
        count = len(trees[0])
        return self._lanes(("sum", count), lambda *t: reduce(_add, t))(*zip(*trees, strict=True))


def _add(a: Any, b: Any) -> Any:
    return jax.tree.map(jnp.add, a, b)


def _merge_moments(into: dict, moments: Any) -> None:
    if moments:
        into.setdefault(STATE, {}).update(moments[STATE])


def _micro_slices(n: int, pieces: int) -> list[slice]:
    size = n // pieces
    return [slice(i * size, (i + 1) * size) for i in range(pieces)]


class PipelineTrainer:
    """gpipe and 1f1b numerics: the global batch of a step split over ``replicas`` pipelines
    and each pipeline's share into ``micro_batches``; the gradients of all of them summed
    (loss scaled by the global batch) and one update applied to the whole model.

    The schedule orders the work in time but not the arithmetic: every micro-batch's
    gradient is taken from the same weights and they are summed in micro-batch order.
    """

    def __init__(
        self,
        workload: Workload,
        counts: Sequence[int],
        replicas: int,
        micro_batches: int,
        batch: int,
    ) -> None:
        self.workload = workload
        self.staged = StagedModel(workload, counts)
        self.replicas = int(replicas)
        self.micro_batches = int(micro_batches)
        self.global_batch = int(replicas) * int(batch)

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order (the one one_device would take)."""
        return self.workload.batches.batch(step, self.global_batch)

    def gradients(
        self, params: Sequence[Any], batches: Sequence[tuple[Any, Any]]
    ) -> tuple[list[list[Any]], tuple[Any, ...], list[list[Any]]]:
        """Each run's (parameters ``params[k]``, global batch ``batches[k]``) micro-batches
        through the stages, the runs as lanes (a run alone: one): per run the micro-batches'
        losses (device scalars, in order), the summed gradient (one tree) and the
        micro-batches' moments (the non-empty ones)."""
        parts = [self.staged.split(p) for p in params]
        pieces = self.replicas * self.micro_batches
        losses: list[list[Any]] = [[] for _ in params]
        trees: list[list[Any]] = [[] for _ in params]
        moments: list[list[Any]] = [[] for _ in params]
        for piece in _micro_slices(len(batches[0][0]), pieces):
            loss, grads, m = self.staged.micro_batch(
                parts, [x[piece] for x, _ in batches], [y[piece] for _, y in batches],
                self.global_batch,
            )  # fmt: skip
            for k in range(len(params)):
                losses[k].append(loss[k])
                trees[k].append(self.staged.merge(grads[k]))
                if m[k]:
                    moments[k].append(m[k])
        return losses, self.staged.summed(trees), moments

    def step(
        self, states: Sequence[Any], batches: Sequence[tuple[Any, Any]]
    ) -> tuple[list[Any], list[list[Any]]]:
        """One training step of each run (its state ``states[k]``, a ``SyncState`` or any
        NamedTuple with ``_replace``; its global batch ``batches[k]``) whose trainers share
        this one's programs (a run alone: one): the new states and each run's micro-batch
        losses (device scalars, in order). Each run's update is its own call."""
        losses, grads, moments = self.gradients([s.params for s in states], batches)
        new = []
        for state, tree, mine in zip(states, grads, moments, strict=True):
            params, opt_state = self.workload.apply(state.params, state.opt_state, tree)
            mean = jax.tree.map(lambda *a: sum(a) / len(a), *mine) if mine else {}
            model_state = self.workload.update_state(state.model_state, mean)
            new.append(state._replace(params=params, opt_state=opt_state, model_state=model_state))
        return new, losses

    def update(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, float]:
        """One training step on ``batch``: the new state and the step's loss, the sum of
        its micro-batches' (each a float, added in order)."""
        (state,), (losses,) = self.step([state], [batch])
        return state, loss_sum(jax.device_get(losses))


def loss_sum(losses: Sequence[Any]) -> float:
    """A step's loss from its micro-batches' (in order): each as a float, added left to right."""
    total = 0.0
    for loss in losses:
        total += float(loss)
    return total


@dataclass(frozen=True)
class Update:
    """One PipeDream update of one stage: micro-batch ``micro_batch``'s gradient, computed on
    weight version ``forward_version``, applied to version ``version`` (which it turns into
    ``version + 1``); ``staleness = version - forward_version``."""

    stage: int
    micro_batch: int
    forward_version: int
    version: int

    @property
    def staleness(self) -> int:
        """Updates of this stage between the weights the forward used and this update."""
        return self.version - self.forward_version


class PipeDreamTrainer:
    """pipedream numerics: per-stage weights, optimizer states and versions, weight stashing.

    Micro-batch ``j`` is ``examples [j·b, (j+1)·b)`` of the data order (``b`` the micro-batch:
    the micro-batches of step ``k`` are the contiguous pieces of one_device's global batch
    ``k``); its loss is its mean per-example loss, and its gradient updates each stage as soon
    as its backward leaves that stage. :meth:`forward` and :meth:`backward` are called in the
    order the schedule runs them on each stage (any order respecting the data dependencies
    gives the same numbers: a stage's weights change only by its own updates).
    """

    def __init__(
        self, workload: Workload, counts: Sequence[int], micro_batches: int, batch: int
    ) -> None:
        self.workload = workload
        self.staged = StagedModel(workload, counts)
        self.micro_batches = int(micro_batches)
        self.micro = int(batch) // int(micro_batches)
        self.params = self.staged.split(workload.params)
        self.opt_states = [workload.init_opt_state(p) for p in self.params]
        self.model_state = workload.model_state
        self.versions = [0] * self.staged.stages
        self.updates: list[Update] = []
        self.losses: dict[int, float] = {}
        self._stash: list[dict[int, tuple[Any, int, Any]]] = [{} for _ in self.params]
        self._acts: list[dict[int, Any]] = [{} for _ in self.params]  # arriving activations
        self._grads: list[dict[int, Any]] = [{} for _ in self.params]  # arriving gradients
        self._labels: dict[int, Any] = {}

    def micro_batch(self, j: int) -> tuple[Any, Any]:
        """Micro-batch ``j``'s examples: piece ``j mod M`` of global batch ``j div M``."""
        m = self.micro_batches
        x, y = self.workload.batches.batch(j // m, self.micro * m)
        piece = _micro_slices(len(x), m)[j % m]
        return x[piece], y[piece]

    def forward(self, s: int, j: int) -> None:
        """Stage ``s`` runs micro-batch ``j``'s forward on its current weights, stashing them."""
        if s == 0:
            x, y = self.micro_batch(j)
            self._labels[j] = y
        else:
            x = self._acts[s].pop(j)
        p = self.params[s]
        self._stash[s][j] = (p, self.versions[s], x)
        if s < self.staged.stages - 1:
            out, moments = self.staged.forward(s, p, x)
            self._acts[s + 1][j] = out
            self._fold(moments)

    def backward(self, s: int, j: int) -> None:
        """Stage ``s`` runs micro-batch ``j``'s backward on the stashed weights, then updates."""
        p, version, x = self._stash[s].pop(j)
        if s == self.staged.stages - 1:
            loss, grads, g_in, moments = self.staged.last(p, x, self._labels.pop(j), self.micro)
            self.losses[j] = float(loss)
            self._fold(moments)
        else:
            grads, g_in = self.staged.backward(s, p, x, self._grads[s].pop(j))
        if s > 0:
            self._grads[s - 1][j] = g_in
        self.updates.append(Update(s, j, version, self.versions[s]))
        self.params[s], self.opt_states[s] = self.workload.apply(
            self.params[s], self.opt_states[s], grads
        )
        self.versions[s] += 1

    def _fold(self, moments: Any) -> None:
        """Fold a stage's batch moments into its layers' moving statistics (at its forward)."""
        if not moments:
            return
        names = moments[STATE]
        state = {STATE: {n: self.model_state[STATE][n] for n in names}}
        new = self.workload.update_state(state, moments)
        self.model_state = {STATE: {**self.model_state[STATE], **new[STATE]}}

    @property
    def current(self) -> Any:
        """The latest weights of every stage as one parameter tree."""
        return self.staged.merge(self.params)

    def run(self, ops: Sequence[Sequence[tuple[str, int]]]) -> None:
        """Replay per-stage op lists (``("F", j)`` / ``("B", j)``) in a dependency order."""
        done: set[tuple[str, int, int]] = set()
        pos = [0] * len(ops)
        last = len(ops) - 1
        while any(pos[s] < len(ops[s]) for s in range(len(ops))):
            moved = False
            for s, stage_ops in enumerate(ops):
                while pos[s] < len(stage_ops):
                    kind, j = stage_ops[pos[s]]
                    need = ("F", s - 1, j) if kind == "F" and s > 0 else None
                    if kind == "B" and s < last:
                        need = ("B", s + 1, j)
                    if need is not None and need not in done:
                        break
                    (self.forward if kind == "F" else self.backward)(s, j)
                    done.add((kind, s, j))
                    pos[s] += 1
                    moved = True
            if not moved:
                raise SimdistError("pipeline schedule deadlocks")

    def staleness(self) -> np.ndarray:
        """``[stage, micro_batch, forward_version, version, staleness]`` per update, in order."""
        rows = [
            (u.stage, u.micro_batch, u.forward_version, u.version, u.staleness)
            for u in self.updates
        ]
        return np.asarray(rows, dtype=np.int64).reshape(-1, 5)
