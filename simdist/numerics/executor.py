"""Gradient evaluation: the real JAX numerics behind every simulated step.

A :class:`Workload` bundles model, data, optimizer and initial parameters and
offers jitted building blocks that strategies combine:

* ``loss_and_grads`` — one replica, loss scaled by the *global* batch
  (``tf.nn.compute_average_loss`` semantics), so summing replica gradients
  gives the gradient of the mean loss over the global batch;
* ``replica_grads`` — N replicas sharing one parameter version, either as one
  ``vmap`` ("batched") or one replica per JAX device with a real ``psum``
  all-reduce under ``shard_map`` ("devices");
* :class:`DeferredGradients` — replicas on *different* parameter versions
  (asynchronous parameter servers), queued and evaluated in fixed-size
  ``vmap`` buckets so the engine pays one call per bucket, not per replica
  (DESIGN.md §6).

Every jitted function is built once per static configuration and cached.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from simdist.errors import SimdistError
from simdist.numerics.data import BatchStream, Dataset, load_dataset
from simdist.numerics.models import make_model
from simdist.numerics.optim import apply_updates, make_optimizer
from simdist.seeds import jax_key_data

EXECUTIONS: tuple[str, ...] = ("batched", "devices")
_DEVICE_FLAG = "XLA_FLAGS=--xla_force_host_platform_device_count={n}"


def ensure_devices(n: int) -> int:
    """Ask for ``n`` emulated CPU devices; return how many devices JAX has.

    Must run before JAX initialises its backend (before any JAX operation):
    it sets ``jax_num_cpu_devices``. Once the backend exists the device count
    is fixed, so this is then a no-op and ``replica_grads(..., "devices")``
    reports the shortfall. Only the CPU platform is affected.
    """
    try:
        if n > 1:
            jax.config.update("jax_num_cpu_devices", max(int(n), jax.config.jax_num_cpu_devices))
    except RuntimeError:
        pass  # backend already initialised; see the docstring
    return len(jax.devices())


def _key_str(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def tree_paths(tree: Any) -> list[str]:
    """The "/"-joined key path of every leaf, in tree order, e.g. ``params/Dense_0/kernel``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return ["/".join(_key_str(k) for k in path) for path, _ in flat]


def save_params(path: str | Path, params: Any) -> None:
    """Write ``params`` to an ``.npz`` file keyed by leaf path (the layout ``init_from`` reads)."""
    leaves = jax.tree_util.tree_leaves(params)
    arrays = {k: np.asarray(v) for k, v in zip(tree_paths(params), leaves, strict=True)}
    # A file handle stops numpy from appending ".npz" to the given name.
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_params(path: str | Path, like: Any) -> Any:
    """Read an ``.npz`` written by :func:`save_params` into the structure of ``like``.

    Keys must match ``like``'s leaf paths exactly and shapes must agree;
    otherwise a :class:`SimdistError` lists the missing and extra keys and the
    shape mismatches. Values are cast to ``like``'s dtypes.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            stored = {k: np.asarray(f[k]) for k in f.files}
    except (OSError, ValueError) as exc:
        raise SimdistError(f"parameter file {path} cannot be read as .npz: {exc}") from exc
    leaves, treedef = jax.tree_util.tree_flatten(like)
    keys = tree_paths(like)
    missing = [k for k in keys if k not in stored]
    extra = sorted(set(stored) - set(keys))
    shapes = [
        f"{k}: file {stored[k].shape}, model {tuple(v.shape)}"
        for k, v in zip(keys, leaves, strict=True)
        if k in stored and stored[k].shape != tuple(v.shape)
    ]
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append("missing keys: " + ", ".join(missing))
        if extra:
            parts.append("unexpected keys: " + ", ".join(extra))
        if shapes:
            parts.append("shape mismatches: " + "; ".join(shapes))
        raise SimdistError(
            f"parameter file {path} does not fit the model ({'; '.join(parts)}); "
            f"expected keys: {', '.join(keys)}"
        )
    out = [jnp.asarray(stored[k], dtype=v.dtype) for k, v in zip(keys, leaves, strict=True)]
    return jax.tree_util.tree_unflatten(treedef, out)


class Workload:
    """Model, dataset, optimizer and initial parameters of one scenario, all seeded."""

    def __init__(
        self,
        model_spec: Any,
        dataset_spec: Any,
        optimizer_spec: Any,
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
        key = jax.random.PRNGKey(jax_key_data(self.seed, "init"))
        params = self.model.init(key, jnp.zeros((1, *self.dataset.input_shape), jnp.float32))
        if init_from is not None:
            params = load_params(init_from, params)
        self.params = params
        leaves = jax.tree_util.tree_leaves(params)
        self.param_leaves: list[tuple[str, int]] = [
            (k, int(v.size * v.dtype.itemsize))
            for k, v in zip(tree_paths(params), leaves, strict=True)
        ]
        self.param_bytes = sum(n for _, n in self.param_leaves)
        self._x_test = jnp.asarray(self.dataset.x_test)
        self._y_test = jnp.asarray(self.dataset.y_test)
        self._loss_and_grad_fns: dict[int, Callable] = {}
        self._batched: dict[int, Callable] = {}
        self._devices: dict[tuple[int, int], Callable] = {}
        self._stacked: dict[int, Callable] = {}
        self._flops: dict[int, float] = {}
        self._lr_scales: dict[float, jax.Array] = {}
        self._apply = jax.jit(self._apply_impl)
        self._evaluate = jax.jit(self._evaluate_impl)

    # -- pure functions (traced under jit) ---------------------------------

    def _loss_sum(self, params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        """Sum over the examples of the per-example loss."""
        out = self.model.apply(params, x)
        if self.task == "classification":
            return optax.softmax_cross_entropy_with_integer_labels(out, y).sum()
        return 0.5 * jnp.sum((out - y) ** 2)

    def _loss_and_grad_impl(
        self, params: Any, x: jax.Array, y: jax.Array, global_batch: int
    ) -> tuple:
        # tf.nn.compute_average_loss: per-replica sum scaled by 1/global_batch, so the
        # all-reduced sum is the global-batch mean.
        # https://www.tensorflow.org/api_docs/python/tf/nn/compute_average_loss
        return jax.value_and_grad(lambda p: self._loss_sum(p, x, y) / global_batch)(params)

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

    def loss_and_grads(self, params: Any, x: Any, y: Any, global_batch: int) -> tuple[Any, Any]:
        """Loss and gradients of one replica: sum of per-example losses / ``global_batch``.

        Cross-entropy for classification, ``0.5 * (pred - y)**2`` summed over outputs
        for regression. Jitted once per ``global_batch`` (and input shape).
        """
        return self._loss_and_grad_fn(int(global_batch))(params, x, y)

    def replica_grads(
        self, params: Any, xs: Any, ys: Any, global_batch: int, execution: str = "batched"
    ) -> tuple[Any, Any]:
        """Summed loss and gradients of N replicas on one parameter version.

        ``xs``/``ys`` have a leading replica axis ``[N, b, ...]``. "batched" runs one
        jitted ``vmap`` over replicas then sums; "devices" places replica ``i`` on
        ``jax.devices()[i]`` and sums with ``jax.lax.psum`` under ``shard_map`` — a real
        all-reduce. Results live on the default device in both modes.
        """
        global_batch = int(global_batch)
        if execution == "batched":
            fn = self._batched.get(global_batch)
            if fn is None:
                vm = jax.vmap(
                    lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch), (None, 0, 0)
                )
                fn = jax.jit(lambda p, xs, ys: jax.tree.map(lambda a: a.sum(0), vm(p, xs, ys)))
                self._batched[global_batch] = fn
            return fn(params, xs, ys)
        if execution == "devices":
            return self._device_fn(int(xs.shape[0]), global_batch)(params, xs, ys)
        raise SimdistError(f"unknown execution {execution!r}; expected one of {EXECUTIONS}")

    def _device_fn(self, n: int, global_batch: int) -> Callable:
        fn = self._devices.get((n, global_batch))
        if fn is not None:
            return fn
        devices = jax.devices()
        if len(devices) < n:
            raise SimdistError(
                f"execution 'devices' needs {n} JAX devices but only {len(devices)} exist; "
                f"run with {_DEVICE_FLAG.format(n=n)} (set before Python starts) or call "
                f"simdist.numerics.ensure_devices({n}) before any JAX operation"
            )
        mesh = Mesh(np.array(devices[:n]), ("replica",))

        def per_device(p: Any, xs: jax.Array, ys: jax.Array) -> tuple:
            # Each device holds a [1, b, ...] block of the replica axis. With
            # check_vma=False the gradient w.r.t. the replicated params stays per-device
            # (with vma checking on, autodiff would insert the psum itself and this
            # explicit all-reduce would count every replica N times).
            loss, grads = self._loss_and_grad_impl(p, xs[0], ys[0], global_batch)
            return jax.lax.psum((loss, grads), "replica")

        mapped = jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(P(), P("replica"), P("replica")),
            out_specs=P(),
            check_vma=False,
        )
        rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("replica"))
        sharded = jax.jit(mapped, in_shardings=(rep, split, split), out_shardings=rep)

        def fn(p: Any, xs: Any, ys: Any) -> tuple:
            # Block before returning: with several collective programs in flight, XLA:CPU's
            # emulated devices can deadlock in the all-reduce rendezvous (observed with 8
            # devices on 2 cores, JAX 0.10.2). Then hand the results back on the default
            # device so they mix with other arrays (jit refuses arguments committed to
            # different device sets).
            out = jax.block_until_ready(sharded(p, xs, ys))
            return jax.tree.map(lambda a: a.addressable_data(0), out)

        self._devices[(n, global_batch)] = fn
        return fn

    def _stacked_fn(self, global_batch: int) -> Callable:
        """Jitted: a tuple of K param trees, xs [K, b, ...], ys [K, b, ...] -> K losses, K grads.

        The batches come stacked on the host (two transfers instead of 2K per
        call); the parameter versions are device arrays and are stacked inside.
        """
        fn = self._stacked.get(global_batch)
        if fn is None:
            vm = jax.vmap(lambda p, x, y: self._loss_and_grad_impl(p, x, y, global_batch))

            def stacked(ps: tuple, xs: jax.Array, ys: jax.Array) -> tuple:
                p = jax.tree.map(lambda *a: jnp.stack(a), *ps)
                return vm(p, xs, ys)

            fn = jax.jit(stacked)
            self._stacked[global_batch] = fn
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
        """Mean test loss (and accuracy for classification) over the whole test set."""
        out = jax.device_get(self._evaluate(params, self._x_test, self._y_test))
        return {k: float(v) for k, v in out.items()}

    def flops_per_step(self, batch: int) -> float:
        """FLOPs of one replica's ``loss_and_grads`` on ``batch`` examples, per XLA.

        Read from the compiled executable's cost analysis, which is deterministic
        (a property of the HLO, not of timing). Cached per batch size.
        """
        batch = int(batch)
        if batch not in self._flops:
            x = jax.ShapeDtypeStruct((batch, *self.dataset.input_shape), jnp.float32)
            ytr = self.dataset.y_train
            y = jax.ShapeDtypeStruct((batch, *ytr.shape[1:]), ytr.dtype)
            cost = self._loss_and_grad_fn(batch).lower(self.params, x, y).compile().cost_analysis()
            if isinstance(cost, list | tuple):
                flops = sum(float(c.get("flops", 0.0)) for c in cost)
            else:
                flops = float(cost.get("flops", 0.0))
            self._flops[batch] = flops
        return self._flops[batch]

    @staticmethod
    def is_finite(loss: Any) -> bool:
        """Whether a loss value is finite (no NaN / inf): used to stop a diverged run."""
        return bool(np.all(np.isfinite(np.asarray(loss))))


class DeferredGradients:
    """Queue (params, x, y) at pull time; evaluate all pending ones together when needed.

    Asynchronous workers each compute on their own (stale) parameter version.
    Instead of one JAX call per worker, submissions wait until some result is
    asked for; then every pending one is evaluated in buckets of exactly
    ``bucket`` with one jitted ``vmap`` over stacked params and batches. The
    last bucket is padded by repeating its last entry, so shapes never change:
    one compilation, and a given submission always runs in the same program,
    which makes results bit-identical between reruns. Results are numpy arrays.
    """

    def __init__(self, workload: Workload, global_batch: int, bucket: int = 8) -> None:
        if bucket < 1:
            raise SimdistError(f"DeferredGradients bucket must be >= 1, got {bucket}")
        self.workload = workload
        self.global_batch = int(global_batch)
        self.bucket = int(bucket)
        self._fn = workload._stacked_fn(self.global_batch)
        self._next = 0
        self._pending: list[tuple[int, Any, Any, Any]] = []
        self._done: dict[int, tuple[Any, Any]] = {}
        self.calls = 0  # number of bucket evaluations, for benchmarks

    def submit(self, params: Any, x: Any, y: Any) -> int:
        """Queue one gradient evaluation; return its ticket."""
        ticket = self._next
        self._next += 1
        self._pending.append((ticket, params, x, y))
        return ticket

    @property
    def pending(self) -> int:
        """Number of submitted tickets not yet evaluated."""
        return len(self._pending)

    def result(self, ticket: int) -> tuple[Any, Any]:
        """``(loss, grads)`` of ``ticket``; evaluates every pending ticket first if needed.

        Each ticket's result can be fetched once; it is then forgotten.
        """
        if ticket not in self._done:
            if not any(t == ticket for t, *_ in self._pending):
                raise SimdistError(f"gradient ticket {ticket} is unknown or already collected")
            self.flush()
        return self._done.pop(ticket)

    def discard(self, ticket: int) -> None:
        """Forget ``ticket`` (its gradient was lost): skip it, or drop its result."""
        self._pending = [item for item in self._pending if item[0] != ticket]
        self._done.pop(ticket, None)

    def flush(self) -> None:
        """Evaluate all pending tickets, in submission order, bucket by bucket."""
        pending, self._pending = self._pending, []
        # Tickets with different batch shapes cannot share a vmap: group them, keeping order.
        groups: dict[tuple, list] = {}
        for item in pending:
            groups.setdefault((np.shape(item[2]), np.shape(item[3])), []).append(item)
        k = self.bucket
        for items in groups.values():
            for start in range(0, len(items), k):
                chunk = items[start : start + k]
                padded = chunk + [chunk[-1]] * (k - len(chunk))
                _, ps, xs, ys = zip(*padded, strict=True)
                losses, grads = jax.device_get(self._fn(ps, np.stack(xs), np.stack(ys)))
                self.calls += 1
                for i, (ticket, *_) in enumerate(chunk):
                    self._done[ticket] = (losses[i], jax.tree.map(lambda g, i=i: g[i], grads))
