"""ZeRO's sharded update, for real: each device holds and updates 1/N of the flat state.

The parameters are flattened into one vector (``jax.flatten_util.ravel_pytree``), padded
with zeros to a multiple of N and cut into N contiguous shards; the optimizer state is
built over that vector, so each device's slice of it is the state of its own parameter
shard (SGD, momentum and Adam update element by element, so the update of a shard is the
shard of the update; the zero padding stays zero). One step on each device
(Rajbhandari et al. 2020, "ZeRO", Sec. 5):

* stage 3 gathers the full parameters from the shards (``all_gather``); stages 1 and 2
  hold them whole;
* the device's gradient of its share of the global batch (loss scaled by the global
  batch, so the sum over devices is the global batch's gradient);
* stage 1 all-reduces the gradient (``psum``) and keeps its shard; stages 2 and 3
  reduce-scatter it (``psum_scatter``): each device receives only the sum of its shard;
* the optimizer updates the device's parameter shard with its optimizer-state shard;
* stages 1 and 2 all-gather the updated shards back into whole parameters; stage 3 keeps
  its shard.

``devices`` runs the devices as JAX devices under ``shard_map`` (emulated CPU devices do
the collectives for real); ``batched`` runs the same per-device function under ``vmap``
with the same named axis, on one device. Either way the returned state is the global
view: the flat parameters (``[N·k]``; for stages 1 and 2 every device holds them whole)
and the optimizer state over them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from simdist.hardware.mesh import Mesh
from simdist.numerics.device_allreduce import (
    REPLICA_AXIS,
    device_shortfall,
    replica_backend,
    replica_devices,
)
from simdist.numerics.optim import apply_updates

__all__ = ["FlatShards", "ShardedStep"]


class FlatShards(NamedTuple):
    """How a parameter tree is flattened and cut into ``n`` shards of ``shard`` elements."""

    size: int  # real elements
    n: int
    shard: int
    unravel: Callable[[Any], Any]

    @classmethod
    def of(cls, params: Any, n: int) -> FlatShards:
        flat, unravel = ravel_pytree(params)
        size = int(flat.size)
        return cls(size, n, -(-size // n), unravel)

    def flatten(self, tree: Any) -> jax.Array:
        """``tree`` (parameters or gradients) as one vector padded to ``n · shard``."""
        flat = ravel_pytree(tree)[0]
        return jnp.pad(flat, (0, self.n * self.shard - self.size))

    def tree(self, flat: Any) -> Any:
        """The parameter tree of a padded flat vector."""
        return self.unravel(jnp.asarray(flat)[: self.size])


def _state_specs(opt_state: Any, axis: P) -> Any:
    """Each optimizer-state leaf's spec: split with the parameters, or replicated (a count)."""
    return jax.tree.map(lambda leaf: axis if jnp.ndim(leaf) else P(), opt_state)


class ShardedStep:
    """One ZeRO step of ``n`` devices: ``(flat params, opt state, xs, ys) -> (flat params,
    opt state, summed loss, mean moments)``; ``xs``/``ys`` have a leading device axis."""

    def __init__(
        self,
        loss_and_grad: Callable[..., tuple],
        optimizer: Any,
        shards: FlatShards,
        stage: int,
        execution: str,
    ) -> None:
        self.shards, self.stage, self.execution = shards, stage, execution
        self.optimizer = optimizer
        self._loss_and_grad = loss_and_grad
        self._fn: Callable | None = None
        self._mesh: jax.sharding.Mesh | None = None

    def _per_device(self, p: Any, opt: Any, x: Any, y: Any) -> tuple:
        s = self.shards
        index = jax.lax.axis_index(REPLICA_AXIS)
        whole = jax.lax.all_gather(p, REPLICA_AXIS, tiled=True) if self.stage == 3 else p
        loss, grads, moments = self._loss_and_grad(s.tree(whole), x, y)
        flat = s.flatten(grads)
        if self.stage == 1:
            summed = jax.lax.psum(flat, REPLICA_AXIS)
            grad = jax.lax.dynamic_slice(summed, (index * s.shard,), (s.shard,))
        else:
            grad = jax.lax.psum_scatter(flat, REPLICA_AXIS, scatter_dimension=0, tiled=True)
        own = p if self.stage == 3 else jax.lax.dynamic_slice(p, (index * s.shard,), (s.shard,))
        own, opt = apply_updates(self.optimizer, own, opt, grad)
        new = own if self.stage == 3 else jax.lax.all_gather(own, REPLICA_AXIS, tiled=True)
        loss = jax.lax.psum(loss, REPLICA_AXIS)
        moments = jax.lax.pmean(moments, REPLICA_AXIS) if moments else moments
        return new, opt, loss, moments

    def init(self, params: Any) -> tuple[Any, Any]:
        """The flat parameters and the optimizer state over them, placed for the run."""
        flat = self.shards.flatten(params)
        opt = self.optimizer.init(flat)
        if self.execution == "devices":
            mesh = self.mesh()
            split = NamedSharding(mesh, P(REPLICA_AXIS))
            rep = NamedSharding(mesh, P())
            flat = jax.device_put(flat, split if self.stage == 3 else rep)
            opt = jax.tree.map(
                lambda leaf: jax.device_put(leaf, split if jnp.ndim(leaf) else rep), opt
            )
        return flat, opt

    def mesh(self) -> jax.sharding.Mesh:
        """The JAX mesh of the ``n`` devices (refused, with the fix, when too few exist)."""
        if self._mesh is None:
            devices = replica_devices()
            shortfall = device_shortfall(replica_backend(), len(devices), self.shards.n)
            if shortfall is not None:
                from simdist.errors import SimdistError

                raise SimdistError(shortfall)
            n = self.shards.n
            self._mesh = Mesh(devices[:n], [(REPLICA_AXIS, n)]).to_jax()
        return self._mesh

    def __call__(self, flat: Any, opt: Any, xs: Any, ys: Any) -> tuple:
        if self._fn is None:
            self._fn = self._devices(opt) if self.execution == "devices" else self._batched(opt)
        return self._fn(flat, opt, xs, ys)

    def _devices(self, opt: Any) -> Callable:
        mesh = self.mesh()
        params = P(REPLICA_AXIS) if self.stage == 3 else P()
        states = _state_specs(opt, P(REPLICA_AXIS))
        mapped = jax.shard_map(
            self._per_device_block,
            mesh=mesh,
            in_specs=(params, states, P(REPLICA_AXIS), P(REPLICA_AXIS)),
            out_specs=(params, states, P(), P()),
            check_vma=False,
        )
        jitted = jax.jit(mapped)

        def fn(flat: Any, opt: Any, xs: Any, ys: Any) -> tuple:
            # Blocked, as device_allreduce does: XLA:CPU's emulated devices may deadlock with
            # several collective programs in flight. The loss and moments go back to the
            # default device, where the model state is updated.
            flat, opt, loss, moments = jax.block_until_ready(jitted(flat, opt, xs, ys))
            local = jax.tree.map(lambda a: a.addressable_data(0), (loss, moments))
            return flat, opt, *local

        return fn

    def _per_device_block(self, p: Any, opt: Any, xs: Any, ys: Any) -> tuple:
        """Under ``shard_map`` each device sees a ``[1, b, ...]`` block of the batch."""
        return self._per_device(p, opt, xs[0], ys[0])

    def _batched(self, opt: Any) -> Callable:
        n, stage = self.shards.n, self.stage
        leaf_axes = jax.tree.map(lambda leaf: 0 if jnp.ndim(leaf) else None, opt)
        mapped = jax.vmap(
            self._per_device,
            in_axes=(0 if stage == 3 else None, leaf_axes, 0, 0),
            axis_name=REPLICA_AXIS,
        )

        def step(flat: Any, opt: Any, xs: Any, ys: Any) -> tuple:
            blocks = jax.tree.map(lambda a: a.reshape(n, -1) if jnp.ndim(a) else a, opt)
            p = flat.reshape(n, -1) if stage == 3 else flat
            new, opt, loss, moments = mapped(p, blocks, xs, ys)
            # Stages 1 and 2 gathered identical whole vectors on every device; a count is
            # the same on every device: keep one of each.
            new = new.reshape(-1) if stage == 3 else new[0]
            opt = jax.tree.map(lambda a: a.reshape(-1) if a.ndim > 1 else a[0], opt)
            return new, opt, loss[0], jax.tree.map(lambda a: a[0], moments)

        return jax.jit(step)
