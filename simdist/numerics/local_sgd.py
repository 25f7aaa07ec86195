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
run as one ``vmap`` over stacked parameters and states ("batched").

Model state (BatchNormalization's moving statistics) is kept once and updated with the
replicas' mean batch moments each step, as the synchronous trainer does
(:class:`~simdist.strategies.sync_trainer.SyncState`): the moving-average update being
linear, it equals the mean of per-replica copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

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


def outer_optimizer(
    learning_rate: float, momentum: float = 0.0, nesterov: bool = False
) -> optax.GradientTransformation:
    """The outer optimizer: SGD with optional (Nesterov) momentum, as DiLoCo's outer
    optimizer (arXiv:2311.08105, Sec. 3: Nesterov momentum, rate 0.7, momentum 0.9).

    optax's trace (``m ← g + μ m``; Nesterov's update ``g + μ m``) is PyTorch's
    ``torch.optim.SGD`` formula, which DiLoCo used."""
    return optax.sgd(learning_rate, momentum=momentum or None, nesterov=nesterov)


def stack(tree: Any, k: int) -> Any:
    """``k`` copies of every leaf of ``tree`` on a new leading axis."""
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *jnp.shape(a))), tree)


class LocalSGD:
    """k replicas of ``workload`` each on ``per_replica_batch`` examples of a global batch,
    averaging their parameter deltas every ``sync_every`` steps through ``outer``."""

    def __init__(
        self,
        workload: Workload,
        replicas: int,
        per_replica_batch: int,
        outer: optax.GradientTransformation,
    ) -> None:
        self.workload = workload
        self.k = replicas
        self.per_replica_batch = per_replica_batch
        self.global_batch = replicas * per_replica_batch
        self.outer = outer
        inner = workload.optimizer
        # Each replica's loss is its own batch's mean: the gradient a lone worker steps with.
        grads = workload.stacked_vmap(per_replica_batch)

        def local_step(params: Any, states: Any, xs: jax.Array, ys: jax.Array) -> tuple:
            losses, g, moments = grads(params, xs, ys)
            updates, states = jax.vmap(inner.update)(g, states, params)
            params = jax.vmap(optax.apply_updates)(params, updates)
            return params, states, losses.mean(), jax.tree.map(lambda a: a.mean(0), moments)

        def sync(params: Any, anchor: Any, outer_state: Any) -> tuple:
            # DiLoCo's outer gradient: the mean over replicas of θ − θ_i.
            delta = jax.tree.map(lambda a, p: (a[None] - p).mean(0), anchor, params)
            updates, outer_state = self.outer.update(delta, outer_state, anchor)
            anchor = optax.apply_updates(anchor, updates)
            return stack(anchor, self.k), anchor, outer_state

        self._local_step = jax.jit(local_step)
        self._sync = jax.jit(sync)

    def init(self) -> LocalState:
        """Every replica at the workload's initial parameters, fresh optimizer states."""
        params = self.workload.params
        inner = self.workload.init_opt_state(params)
        return LocalState(
            stack(params, self.k),
            stack(inner, self.k),
            params,
            self.outer.init(params),
            self.workload.model_state,
        )

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
