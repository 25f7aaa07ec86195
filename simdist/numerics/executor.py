"""Gradient evaluation: the real JAX numerics behind every simulated step.

A :class:`Workload` bundles model, data, optimizer and initial parameters and
offers jitted building blocks that strategies combine:

* ``loss_and_grads`` — one replica, loss scaled by the *global* batch
  (``tf.nn.compute_average_loss`` semantics), so summing replica gradients
  gives the gradient of the mean loss over the global batch;
* ``replica_grads`` — N replicas sharing one parameter version, either as one
  ``vmap`` ("batched") or one replica per JAX device with a real ``psum``
  all-reduce under ``shard_map`` ("devices");
* :meth:`Workload.stacked_fn` — replicas on *different* parameter versions in one
  ``vmap``, which :class:`~simdist.numerics.deferred.DeferredGradients` fills in
  fixed-size buckets for asynchronous parameter servers.

Model state (BatchNormalization's moving statistics, ``Workload.model_state``;
empty for models without BatchNormalization) is not an input of any gradient
function: in training mode BatchNormalization normalises with batch
statistics. Each gradient function can also return the step's batch
*moments* (``with_moments=True``), in the structure of the state, and
:meth:`Workload.update_state` folds them into the moving averages — on the
replicas for the synchronous strategies, on the parameter servers for
``parameter_server``. Each replica normalises with its own batch; with
``sync_batch_norm`` the replicas of ``replica_grads`` share their moments
over the axis :data:`REPLICA_AXIS` (TF's SyncBatchNormalization).

Every jitted function is built once per static configuration and cached.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from simdist.errors import DeviceFallbackWarning, SimdistError
from simdist.numerics.chains import scan_exact
from simdist.numerics.data import BatchStream, load_dataset
from simdist.numerics.dataset import Dataset
from simdist.numerics.device_allreduce import (
    REPLICA_AXIS,
    all_reduced_on_devices,
    fallback_note,
    on_cpu_fallback,
    replica_devices,
)
from simdist.numerics.memory import check_param_bytes, remember_model_size
from simdist.numerics.models import MOMENTS, STATE, make_model, update_moving_stats
from simdist.numerics.optim import apply_updates, make_optimizer
from simdist.numerics.param_files import check_params_file, load_params, tree_paths
from simdist.seeds import jax_key_data

if TYPE_CHECKING:
    from simdist.scenario.workload import DatasetSpec, ModelSpec, OptimizerSpec

EXECUTIONS: tuple[str, ...] = ("batched", "devices")


def split_state(variables: Any) -> tuple[Any, Any]:
    """``(params, model_state)``: a Flax variables dict split into what gradients train and
    the rest (BatchNormalization's moving statistics); the state is ``{}`` without any."""
    params = {k: v for k, v in variables.items() if k == "params"}
    state = {k: v for k, v in variables.items() if k != "params"}
    return params, state


def ensure_devices(n: int) -> int:
    """Make ``n`` devices available to ``execution: devices``; return how many there are.

    Must run before JAX initialises its backend (before any JAX operation): it asks for
    ``n`` emulated CPU devices (``jax_num_cpu_devices``). When JAX's default backend is an
    accelerator with fewer than ``n`` devices (one GPU, a run that needs 4), the numerics
    fall back to those emulated CPU devices: a CPU device becomes JAX's default device, so
    every array and program of the run stays on the CPU, replicas go to
    :func:`~simdist.numerics.device_allreduce.replica_devices`, and a
    :class:`~simdist.errors.DeviceFallbackWarning` says so. Once the backend exists the CPU
    device count is fixed; if it is then too small, the run refuses with a message saying
    how to start with enough (:func:`~simdist.numerics.device_allreduce.device_shortfall`).
    """
    try:
        if n > 1:
            jax.config.update("jax_num_cpu_devices", max(int(n), jax.config.jax_num_cpu_devices))
    except RuntimeError:
        pass  # backend already initialised; see the docstring
    accelerators = jax.devices()
    if len(accelerators) < n and not on_cpu_fallback() and accelerators[0].platform != "cpu":
        cpus = jax.devices("cpu")
        if len(cpus) >= n:
            jax.config.update("jax_default_device", cpus[0])
            warnings.warn(
                fallback_note(accelerators[0].platform, len(accelerators), n),
                DeviceFallbackWarning,
                stacklevel=2,
            )
    return len(replica_devices())


def check_fits_memory(abstract_params: Any, model_spec: ModelSpec) -> tuple[int, int]:
    """Refuse a model whose parameters, gradients and optimizer state exceed the RAM;
    return its (parameter count, bytes).

    Checked on shapes alone (``jax.eval_shape``), before anything is allocated:
    XLA on CPU does not report a failed allocation of a huge buffer, it waits for it
    forever, so an oversized model would hang the run instead of failing.
    """
    leaves = jax.tree_util.tree_leaves(abstract_params)
    nbytes = sum(int(leaf.size) * leaf.dtype.itemsize for leaf in leaves)
    count = sum(int(leaf.size) for leaf in leaves)
    check_param_bytes(count, nbytes, model_spec)
    return count, nbytes


def check_model(
    model_spec: ModelSpec, input_shape: tuple[int, ...], n_outputs: int, init_from: Path | None
) -> None:
    """What building a Workload would refuse, from shapes alone: a model too large for
    the memory (:func:`check_fits_memory`) and an ``init_from`` file that does not fit it.

    Allocates no parameter; ``simdist validate`` runs it before any step.
    """
    model = make_model(model_spec, n_outputs, input_shape)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    example = jax.ShapeDtypeStruct((1, *input_shape), jnp.float32)
    abstract = jax.eval_shape(model.init, key, example)
    count, nbytes = check_fits_memory(abstract, model_spec)
    remember_model_size(model_spec, input_shape, n_outputs, count, nbytes)
    if init_from is not None:
        check_params_file(init_from, abstract)


_PROGRAMS: dict[tuple[Any, ...], dict[str, Any]] = {}
_INIT_PROGRAMS: dict[tuple[Any, tuple[int, ...]], Callable[[Any], Any]] = {}
#: :meth:`Workload.metric_names` by model and task.
_METRIC_NAMES: dict[tuple[Any, str], tuple[str, ...]] = {}


def init_program(model: Any, input_shape: tuple[int, ...]) -> Callable[[Any], Any]:
    """The jitted ``key_data -> variables`` initialisation of ``model``, one per model and shape.

    The 32-bit key data is an argument, not a constant closed over, so a second seed
    reuses the compiled program instead of tracing and compiling a new one.
    """
    cache_key = (model, input_shape)
    fn = _INIT_PROGRAMS.get(cache_key)
    if fn is None:
        shape = (1, *input_shape)

        def init(key_data: Any) -> Any:
            return model.init(jax.random.PRNGKey(key_data), jnp.zeros(shape, jnp.float32))

        fn = _INIT_PROGRAMS[cache_key] = jax.jit(init)
    return fn


class Workload:
    """Model, dataset, optimizer and initial parameters of one scenario, all seeded.

    ``params`` is what gradients train (``{"params": ...}``); ``model_state`` the rest of
    the model's variables (``{"batch_stats": ...}`` for the resnet, ``{}`` otherwise).
    """

    def __init__(
        self,
        model_spec: ModelSpec,
        dataset_spec: DatasetSpec,
        optimizer_spec: OptimizerSpec,
        *,
        seed: int,
        total_steps: int | Callable[[int], int],
        init_from: Path | None = None,
    ) -> None:
        """``total_steps`` (for learning-rate schedules) may be a function of the
        training-set size, as ``epochs`` needs, so the data is loaded only here."""
        self.seed = int(seed)
        self.dataset: Dataset = load_dataset(dataset_spec, self.seed)
        if callable(total_steps):
            total_steps = total_steps(self.dataset.n_train)
        self.task = self.dataset.task
        self.model = make_model(model_spec, self.dataset.n_outputs, self.dataset.input_shape)
        self.batches = BatchStream(self.dataset, self.seed)
        self.optimizer: optax.GradientTransformation = make_optimizer(optimizer_spec, total_steps)
        # Whether runs of updates may be fused in one lax.scan bit for bit (numerics/chains.py).
        self.scan_updates = scan_exact(optimizer_spec)
        key_data = np.uint32(jax_key_data(self.seed, "init"))
        init = init_program(self.model, tuple(self.dataset.input_shape))
        check_fits_memory(jax.eval_shape(init, key_data), model_spec)
        # One XLA program for the key, the example and the whole initialisation (run
        # eagerly, each initialiser and op was a program of its own: 23 for an mlp, each
        # compiled by every run); the values are bit-identical (tests/test_numerics.py).
        # The seed is its argument, so every seed shares it (tests/test_compile_sharing.py).
        params = init(key_data)
        if init_from is not None:
            params = load_params(init_from, params)
        self.params, self.model_state = split_state(params)
        # Synchronised BatchNormalization: the same module, its moments averaged over replicas.
        self.sync_batch_norm = bool(model_spec.sync_batch_norm)
        self._synced = self.model.clone(axis_name=REPLICA_AXIS) if self.sync_batch_norm else None
        leaves = jax.tree_util.tree_leaves(self.params)
        self.param_leaves: list[tuple[str, int]] = [
            (k, int(v.size * v.dtype.itemsize))
            for k, v in zip(tree_paths(self.params), leaves, strict=True)
        ]
        self.param_bytes = sum(n for _, n in self.param_leaves)
        self._x_test = jnp.asarray(self.dataset.x_test)
        self._y_test = jnp.asarray(self.dataset.y_test)
        # The jitted programs depend on the model, task and optimizer, never on the seed:
        # Workloads that differ only in seed share them (tests/test_compile_sharing.py).
        programs_key = (
            self.model,
            self.task,
            repr(optimizer_spec),
            total_steps,
            self.sync_batch_norm,
        )
        self.__dict__.update(
            _PROGRAMS.get(programs_key) or _PROGRAMS.setdefault(programs_key, self._programs())
        )

    @property
    def stateful(self) -> bool:
        """Whether the model keeps state besides its parameters (BatchNormalization)."""
        return bool(self.model_state)

    def _programs(self) -> dict[str, Any]:
        """This Workload's jitted entry points and their caches, keyed by attribute name."""
        momentum = getattr(self.model, "batch_norm_momentum", None)
        return {
            "_loss_and_grad_fns": {},
            "_batched": {},
            "_devices": {},
            "_stacked": {},
            "_lr_scales": {},
            # strategies/parameter_server/replay.py's programs, keyed by shards and batch.
            "_replay_programs": {},
            "_strategy_programs": {},  # the strategies' own, by shared_program
            "_apply": jax.jit(self._apply_impl),
            "_evaluate": jax.jit(self._evaluate_impl),
            "_update_state": (
                jax.jit(lambda state, moments: update_moving_stats(state, moments, momentum))
                if self.stateful
                else None
            ),
        }

    def shared_program(self, key: Any, build: Callable[[], Any]) -> Any:
        """What ``build()`` returns for ``key``, built once for every Workload differing only
        in seed: a strategy's own jitted programs (pipeline stages, ZeRO's step, ...), keyed
        by the structure they depend on besides this Workload's model, task and optimizer.
        What ``build`` closes over must not depend on the seed (tests/test_compile_sharing.py)."""
        programs = self._strategy_programs
        if key not in programs:
            programs[key] = build()
        return programs[key]

    def variables(self, params: Any, model_state: Any) -> Any:
        """Parameters and model state as one tree: what :meth:`evaluate` and ``params.npz`` take."""
        return {**params, **model_state} if model_state else params

    def update_state(self, model_state: Any, moments: Any) -> Any:
        """The moving statistics after folding in one step's batch ``moments``.

        ``moments`` has ``model_state``'s structure (the whole state, or the flat dict of
        shards a parameter server holds); without state both are empty and nothing runs.
        """
        if self._update_state is None or not moments:
            return model_state
        return self._update_state(model_state, moments)

    # -- pure functions (traced under jit) ---------------------------------

    def _loss_sum(
        self, params: Any, x: jax.Array, y: jax.Array, synced: bool = False
    ) -> tuple[jax.Array, Any]:
        """Sum over the examples of the per-example loss, and the batch moments (training mode).

        ``synced``: BatchNormalization averages its moments over :data:`REPLICA_AXIS`
        (only inside a ``vmap`` or ``shard_map`` that names it).
        """
        if self.stateful:
            model = self._synced if synced and self._synced is not None else self.model
            out, written = model.apply(params, x, train=True, mutable=[MOMENTS])
            moments = {STATE: written[MOMENTS]}
        elif getattr(self.model, "aux_losses", False):
            # A model's own loss terms (an MoE's load balancing), sown into the ``losses``
            # collection, each per replica: x its examples, so that the replicas' sum over
            # the global batch is their mean.
            out, written = self.model.apply(params, x, mutable=["losses"])
            aux = sum(jnp.sum(v) for v in jax.tree.leaves(written)) * x.shape[0]
            return self._example_losses(out, y) + aux, {}
        else:
            out, moments = self.model.apply(params, x), {}
        return self._example_losses(out, y), moments

    def _example_losses(self, out: jax.Array, y: jax.Array) -> jax.Array:
        """The per-example loss summed: cross-entropy or half the squared error."""
        if self.task == "classification":
            return optax.softmax_cross_entropy_with_integer_labels(out, y).sum()
        return 0.5 * jnp.sum((out - y) ** 2)

    def _loss_and_grad_impl(
        self, params: Any, x: jax.Array, y: jax.Array, global_batch: int, synced: bool = False
    ) -> tuple:
        """``(loss, grads, moments)`` of one replica; ``moments`` is ``{}`` without state."""

        # tf.nn.compute_average_loss: per-replica sum scaled by 1/global_batch, so the
        # all-reduced sum is the global-batch mean.
        # https://www.tensorflow.org/api_docs/python/tf/nn/compute_average_loss
        def scaled(p: Any) -> tuple[jax.Array, Any]:
            loss, moments = self._loss_sum(p, x, y, synced)
            return loss / global_batch, moments

        (loss, moments), grads = jax.value_and_grad(scaled, has_aux=True)(params)
        return loss, grads, moments

    def _replicas_impl(
        self, params: Any, xs: jax.Array, ys: jax.Array, global_batch: int, synced: bool
    ) -> tuple:
        """N replicas of one parameter version as one ``vmap``: summed loss and grads, mean moments.

        The moments are averaged: each replica folds its own into its copy of the moving
        statistics, and TF reads such variables (``synchronization=ON_READ``,
        ``aggregation=MEAN``) as the mean of the copies; the update being linear, one
        copy updated with the mean moments is that mean.
        """
        axis = REPLICA_AXIS if synced else None
        vm = jax.vmap(
            lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch, synced),
            (None, 0, 0),
            axis_name=axis,
        )
        loss, grads, moments = vm(params, xs, ys)
        summed = jax.tree.map(lambda a: a.sum(0), (loss, grads))
        return (*summed, jax.tree.map(lambda a: a.mean(0), moments))

    def _apply_impl(self, params: Any, opt_state: Any, grads: Any, lr_scale: jax.Array) -> tuple:
        return apply_updates(self.optimizer, params, opt_state, grads, lr_scale)

    def _evaluate_impl(self, params: Any, x: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
        out = self.model.apply(params, x)
        if self.task == "classification":
            loss = optax.softmax_cross_entropy_with_integer_labels(out, y).mean()
            acc = jnp.mean(jnp.argmax(out, axis=-1) == y)
            return {"test_loss": loss, "test_accuracy": acc}
        return {"test_loss": 0.5 * jnp.mean(jnp.sum((out - y) ** 2, axis=-1))}

    # -- jitted entry points ------------------------------------------------

    def _loss_and_grad_fn(self, global_batch: int) -> Callable:
        fn = self._loss_and_grad_fns.get(global_batch)
        if fn is None:
            fn = jax.jit(lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch))
            self._loss_and_grad_fns[global_batch] = fn
        return fn

    def loss_and_grads(
        self, params: Any, x: Any, y: Any, global_batch: int, *, with_moments: bool = False
    ) -> tuple:
        """Loss and gradients of one replica: sum of per-example losses / ``global_batch``.

        Cross-entropy for classification, ``0.5 * (pred - y)**2`` summed over outputs
        for regression. Jitted once per ``global_batch`` (and input shape).
        ``with_moments``: ``(loss, grads, moments)``, the batch moments for
        :meth:`update_state` (``{}`` for a model without state).
        """
        loss, grads, moments = self._loss_and_grad_fn(int(global_batch))(params, x, y)
        return (loss, grads, moments) if with_moments else (loss, grads)

    def replica_grads(
        self,
        params: Any,
        xs: Any,
        ys: Any,
        global_batch: int,
        execution: str = "batched",
        *,
        with_moments: bool = False,
    ) -> tuple:
        """Summed loss and gradients of N replicas on one parameter version.

        ``xs``/``ys`` have a leading replica axis ``[N, b, ...]``. "batched" runs one
        jitted ``vmap`` over replicas then sums; "devices" places replica ``i`` on
        ``jax.devices()[i]`` and sums with ``jax.lax.psum`` under ``shard_map`` — a real
        all-reduce. Results live on the default device in both modes.
        ``with_moments``: ``(loss, grads, moments)``, the replicas' mean batch moments
        (each replica's own, or the shared ones with ``sync_batch_norm``).
        """
        global_batch = int(global_batch)
        if execution == "batched":
            fn = self._batched.get(global_batch)
            if fn is None:
                synced = self.sync_batch_norm
                fn = jax.jit(lambda p, xs, ys: self._replicas_impl(p, xs, ys, global_batch, synced))
                self._batched[global_batch] = fn
            loss, grads, moments = fn(params, xs, ys)
        elif execution == "devices":
            loss, grads, moments = self._device_fn(int(xs.shape[0]), global_batch)(params, xs, ys)
        else:
            raise SimdistError(f"unknown execution {execution!r}; expected one of {EXECUTIONS}")
        return (loss, grads, moments) if with_moments else (loss, grads)

    def _device_fn(self, n: int, global_batch: int) -> Callable:
        fn = self._devices.get((n, global_batch))
        if fn is None:
            synced = self.sync_batch_norm
            fn = self._devices[(n, global_batch)] = all_reduced_on_devices(
                lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch, synced), n
            )
        return fn

    def replica_loss_and_grad(self, global_batch: int) -> Callable:
        """Not jitted: ``(params, x, y) -> (loss, grads, moments)`` of one replica, its loss
        scaled by ``global_batch``, for strategies that build their own per-device step
        (ZeRO's sharded update). With ``sync_batch_norm`` the moments are shared over
        :data:`REPLICA_AXIS`, so it is traced under a ``vmap`` or ``shard_map`` naming it."""
        global_batch, synced = int(global_batch), self.sync_batch_norm
        return lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch, synced)

    def stacked_vmap(self, global_batch: int, replicas: int = 1) -> Callable:
        """Not jitted: params with a leading axis of K versions, xs [K, b, ...], ys [K, b, ...]
        -> K losses, K grads, K moments — the body of :meth:`stacked_fn`.

        ``replicas > 1``: each of the K batches is split into that many replicas
        (a worker's devices), as :meth:`replica_grads` "batched" does.
        """
        if replicas == 1:
            return jax.vmap(lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch))
        synced = self.sync_batch_norm

        def one(p: Any, x: jax.Array, y: jax.Array) -> tuple:
            split = (replicas, x.shape[0] // replicas)
            xs, ys = x.reshape(split + x.shape[1:]), y.reshape(split + y.shape[1:])
            return self._replicas_impl(p, xs, ys, global_batch, synced)

        return jax.vmap(one)

    def stacked_fn(self, global_batch: int, replicas: int = 1) -> Callable:
        """Jitted: a tuple of K param trees, xs [K, b, ...], ys [K, b, ...] -> K losses,
        K grads, K moments (:meth:`stacked_vmap`).

        The batches come stacked on the host (two transfers instead of 2K per
        call); the parameter versions are device arrays and are stacked inside.
        """
        fn = self._stacked.get((global_batch, replicas))
        if fn is None:
            vm = self.stacked_vmap(global_batch, replicas)

            def stacked(ps: tuple, xs: jax.Array, ys: jax.Array) -> tuple:
                p = jax.tree.map(lambda *a: jnp.stack(a), *ps)
                return vm(p, xs, ys)

            fn = jax.jit(stacked)
            self._stacked[(global_batch, replicas)] = fn
        return fn

    def init_opt_state(self, params: Any) -> Any:
        """Fresh optimizer state for ``params``."""
        return self.optimizer.init(params)

    def apply(self, params: Any, opt_state: Any, grads: Any, lr_scale: float = 1.0) -> tuple:
        """One optimizer step; ``lr_scale`` scales this step's learning rate (see optim).

        The scale is kept on the device per value: parameter servers apply
        thousands of small updates, mostly with the same few scales.
        """
        scale = self._lr_scales.get(lr_scale)
        if scale is None:
            scale = jnp.asarray(np.float32(lr_scale))
            if len(self._lr_scales) < 4096:
                self._lr_scales[lr_scale] = scale
        return self._apply(params, opt_state, grads, scale)

    def evaluate(self, params: Any) -> dict[str, float]:
        """Mean test loss (and accuracy for classification) over the whole test set.

        ``params`` holds the model state too when there is one (:meth:`variables`):
        BatchNormalization then normalises with the moving statistics (inference mode).
        """
        return self.evaluated(self.evaluate_async(params))

    def evaluate_async(self, params: Any) -> Any:
        """:meth:`evaluate` without waiting for the device: :meth:`evaluated` reads it."""
        return self._evaluate(params, self._x_test, self._y_test)

    def metric_names(self) -> tuple[str, ...]:
        """The names :meth:`evaluate` returns, in its order, found without evaluating (a run
        whose numerics are computed later reserves their rows before it has values)."""
        key = (self.model, self.task)
        names = _METRIC_NAMES.get(key)
        if names is None:
            variables = self.variables(self.params, self.model_state)
            names = _METRIC_NAMES[key] = tuple(jax.eval_shape(self.evaluate_async, variables))
        return names

    @staticmethod
    def evaluated(out: Any) -> dict[str, float]:
        """The metrics of an :meth:`evaluate_async` result, as floats (waits for them)."""
        return {k: float(v) for k, v in jax.device_get(out).items()}

    @staticmethod
    def is_finite(loss: Any) -> bool:
        """Whether a loss value is finite (no NaN / inf): used to stop a diverged run."""
        return bool(np.all(np.isfinite(np.asarray(loss))))
