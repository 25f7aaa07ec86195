"""The numerics of local SGD / DiLoCo: replicas that step alone and average their deltas.

DiLoCo (Douillard et al. 2023, "DiLoCo: distributed low-communication training of language
models", arXiv:2311.08105, Algorithm 1): each of the k replicas starts an outer step from
the shared parameters θ, takes H inner steps with its own inner optimizer on its own data,
then the outer gradient Δ = (1/k) Σ_i (θ − θ_i) (the mean of the replicas' deltas, an
all-reduce) is applied to θ by the outer optimizer, and every replica restarts from the new
θ. With the outer optimizer plain SGD of rate 1 this is local SGD with periodic model
averaging (Stich 2019, "Local SGD converges fast and communicates little", Algorithm 1; Lin
et al. 2020, "Don't use large mini-batches, use local SGD", Algorithm 1).

Each replica keeps its own inner optimizer state across outer steps (DiLoCo, Algorithm 1:
the inner optimizer is never reset); the outer optimizer's state is kept once. The replicas
run as one ``vmap`` over stacked parameters and states ("batched"), or one per JAX device
with a real all-reduce at each sync ("devices").

Model state (BatchNormalization's moving statistics) is kept once and updated with the
replicas' mean batch moments each step, as the synchronous trainer does
(:class:`~simdist.strategies.sync_trainer.SyncState`): the moving-average update being
linear, it equals the mean of per-replica copies.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from simdist.errors import SimdistError
from simdist.numerics.device_allreduce import (
    REPLICA_AXIS,
    device_shortfall,
    replica_backend,
    replica_devices,
)

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload


class LocalState(NamedTuple):
    """Stacked replica parameters and inner optimizer states (leading axis k), the shared
    parameters θ of the last sync (the anchor), the outer optimizer's state over θ, and the
    model state."""

    replicas: Any
    inner_state: Any
    anchor: Any
    outer_state: Any
    model_state: Any


@cache
def outer_optimizer(
    learning_rate: float, momentum: float = 0.0, nesterov: bool = False
) -> optax.GradientTransformation:
    """The outer optimizer: SGD with optional (Nesterov) momentum, as DiLoCo's outer
    optimizer (arXiv:2311.08105, Sec. 3: Nesterov momentum, rate 0.7, momentum 0.9).

    optax's trace (``m ← g + μ m``; Nesterov's update ``g + μ m``) is PyTorch's
    ``torch.optim.SGD`` formula, which DiLoCo used. One object per setting, so the
    programs built on it are shared (:class:`LocalSGD`)."""
    return optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov)


def stack(tree: Any, k: int) -> Any:
    """``k`` copies of every leaf of ``tree`` on a new leading axis."""
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *jnp.shape(a))), tree)


class LocalSGD:
    """k replicas of ``workload`` each on ``per_replica_batch`` examples of a global batch,
    averaging their parameter deltas every ``sync_every`` steps through ``outer``.

    ``execution``: ``batched`` (the replicas as one ``vmap``, the mean over its axis) or
    ``devices`` (replica i on JAX device i under ``shard_map``, no communication in a
    local step, the sync's mean a real ``pmean`` all-reduce across the devices)."""

    def __init__(
        self,
        workload: Workload,
        replicas: int,
        per_replica_batch: int,
        outer: optax.GradientTransformation,
        execution: str = "batched",
    ) -> None:
        self.workload = workload
        self.k = replicas
        self.per_replica_batch = per_replica_batch
        self.global_batch = replicas * per_replica_batch
        self.outer = outer
        self.execution = execution
        self._mesh: Any = None
        # Shared by the Workloads differing only in seed (tests/test_compile_sharing.py).
        self._local_step, self._sync = workload.shared_program(
            ("local_sgd", replicas, per_replica_batch, outer, execution), self._programs
        )

    def _programs(self) -> tuple[Callable, Callable]:
        """The jitted local step and sync."""
        if self.execution == "devices":
            return self._on_devices()
        local = jax.jit(partial(self._local_body, mean=_axis_mean))
        return local, jax.jit(partial(self._sync_body, mean=_axis_mean))

    def _local_body(self, params: Any, states: Any, xs: Any, ys: Any, mean: Callable) -> tuple:
        """One inner step of a stack of replicas; the loss and moments averaged by ``mean``."""
        # Each replica's loss is its own batch's mean: the gradient a lone worker steps with.
        grads = self.workload.stacked_vmap(self.per_replica_batch)
        losses, g, moments = grads(params, xs, ys)
        updates, states = jax.vmap(self.workload.optimizer.update)(g, states, params)
        params = jax.vmap(optax.apply_updates)(params, updates)
        return params, states, mean(losses), jax.tree.map(mean, moments)

    def _sync_body(self, params: Any, anchor: Any, outer_state: Any, mean: Callable) -> tuple:
        """DiLoCo's outer gradient, the mean over replicas of θ − θ_i, applied to θ."""
        delta = jax.tree.map(lambda a, p: mean(a[None] - p), anchor, params)
        updates, outer_state = self.outer.update(delta, outer_state, anchor)
        anchor = optax.apply_updates(anchor, updates)
        count = jax.tree.leaves(params)[0].shape[0]
        return stack(anchor, count), anchor, outer_state

    def _on_devices(self) -> tuple[Callable, Callable]:
        """The local step and the sync under ``shard_map``, one replica per device."""
        from jax.sharding import PartitionSpec as P

        mesh = self.mesh()

        def mean(a: Any) -> Any:
            return jax.lax.pmean(a.mean(0), REPLICA_AXIS)

        r = P(REPLICA_AXIS)
        local = jax.jit(
            jax.shard_map(
                partial(self._local_body, mean=mean),
                mesh=mesh,
                in_specs=(r, r, r, r),
                out_specs=(r, r, P(), P()),
                check_vma=False,
            )
        )
        sync = jax.jit(
            jax.shard_map(
                partial(self._sync_body, mean=mean),
                mesh=mesh,
                in_specs=(r, P(), P()),
                out_specs=(r, P(), P()),
                check_vma=False,
            )
        )

        def local_step(params: Any, states: Any, xs: Any, ys: Any) -> tuple:
            # Blocked, as device_allreduce does (emulated devices may deadlock with several
            # collective programs in flight); loss and moments back on the default device.
            params, states, loss, moments = jax.block_until_ready(local(params, states, xs, ys))
            return params, states, *jax.tree.map(lambda a: a.addressable_data(0), (loss, moments))

        def sync_step(params: Any, anchor: Any, outer_state: Any) -> tuple:
            return jax.block_until_ready(sync(params, anchor, outer_state))

        return local_step, sync_step

    def mesh(self) -> Any:
        """The JAX mesh of the k devices (refused, with the fix, when too few exist)."""
        if self._mesh is None:
            from simdist.hardware.mesh import Mesh

            devices = replica_devices()
            shortfall = device_shortfall(replica_backend(), len(devices), self.k)
            if shortfall is not None:
                raise SimdistError(shortfall)
            self._mesh = Mesh(devices[: self.k], [(REPLICA_AXIS, self.k)]).to_jax()
        return self._mesh

    def init(self) -> LocalState:
        """Every replica at the workload's initial parameters, fresh optimizer states;
        with ``devices``, replica i's on device i and the outer state on every device."""
        params = self.workload.params
        inner = self.workload.init_opt_state(params)
        state = LocalState(
            stack(params, self.k),
            stack(inner, self.k),
            params,
            self.outer.init(params),
            self.workload.model_state,
        )
        if self.execution != "devices":
            return state
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        split, rep = NamedSharding(self.mesh(), P(REPLICA_AXIS)), NamedSharding(self.mesh(), P())
        return state._replace(
            replicas=jax.device_put(state.replicas, split),
            inner_state=jax.device_put(state.inner_state, split),
            anchor=jax.device_put(state.anchor, rep),
            outer_state=jax.device_put(state.outer_state, rep),
        )

    def anchor(self, state: LocalState) -> Any:
        """The shared parameters on the default device (where evaluation runs)."""
        if self.execution != "devices":
            return state.anchor
        return jax.tree.map(lambda a: a.addressable_data(0), state.anchor)

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order (replica i takes its i-th shard)."""
        return self.workload.batches.batch(step, self.global_batch)

    def local_step(self, state: LocalState, batch: tuple[Any, Any]) -> tuple[LocalState, Any]:
        """One inner step on every replica: the new state and the replicas' mean loss
        (a device scalar, not waited for)."""
        from simdist.numerics.data import shard

        x, y = batch
        params, inner, loss, moments = self._local_step(
            state.replicas, state.inner_state, shard(x, self.k), shard(y, self.k)
        )
        model_state = self.workload.update_state(state.model_state, moments)
        return state._replace(replicas=params, inner_state=inner, model_state=model_state), loss

    def sync(self, state: LocalState) -> LocalState:
        """The outer step: average the replicas' deltas, apply them to the anchor with the
        outer optimizer, restart every replica from it."""
        replicas, anchor, outer_state = self._sync(state.replicas, state.anchor, state.outer_state)
        return state._replace(replicas=replicas, anchor=anchor, outer_state=outer_state)


def _axis_mean(a: Any) -> Any:
    """The mean over the replicas' stacked axis (``batched``)."""
    return a.mean(0)
