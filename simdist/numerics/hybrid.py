"""3D parallelism for real on the zoo's mlp: pipeline stages of tensor-parallel groups.

Each of the P stages owns a ``data`` × ``tensor`` mesh of its own D × T emulated JAX
devices (stage p: devices p·D·T … (p+1)·D·T − 1), and runs its dense layers as
:mod:`simdist.numerics.tensor_parallel` does — column/row-parallel pairs under
``shard_map``, the row-parallel sums a ``psum`` over ``tensor`` — on the micro-batch rows
of every data copy (split over ``data``). A micro-batch's activation moves to the next
stage's mesh with ``jax.device_put`` (the point-to-point send); its gradient comes back
the same way, as autodiff transposes the move. The loss of every micro-batch is summed
(each per-example loss divided by the global batch, as ``tf.nn.compute_average_loss``), so
the gradient of a step is the global batch's — the gradient accumulation over
micro-batches GPipe and 1F1B do before their flush — summed over ``data`` by the
``psum`` of the loss. Between steps the parameters and the optimizer state are kept
whole on the default device and split onto each stage's mesh as the step begins (the
update is one optimizer step on the whole tree, as one_device's: the optimizer's tree
cannot span the stages' device sets in one jitted update); the clock prices the sharded
update ZeRO and the tensor split make.

Equal to one_device with the global batch (``tests/test_hybrid.py``: tree against tree).
The order the schedule runs micro-batches in does not change the sum, so it is not
replayed here; the clock has it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.numerics.device_allreduce import device_shortfall, replica_backend, replica_devices
from simdist.numerics.tensor_parallel import DATA, TENSOR, dense, dense_specs, loss_sum, mlp_roles

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload


def stage_meshes(data: int, tensor: int, stages: int) -> list[jax.sharding.Mesh]:
    """P meshes of D × T devices each, on the first D·T·P JAX devices."""
    devices = replica_devices()
    n = data * tensor * stages
    shortfall = device_shortfall(replica_backend(), len(devices), n)
    if shortfall is not None:
        raise SimdistError(f"strategy hybrid: {shortfall}")
    block = data * tensor
    return [
        Mesh(devices[p * block : (p + 1) * block], [(DATA, data), (TENSOR, tensor)]).to_jax()
        for p in range(stages)
    ]


def stage_function(
    layers: Sequence[int], roles: Sequence[str], n_dense: int, mesh: jax.sharding.Mesh
) -> tuple[dict, Callable[[Any, jax.Array], jax.Array]]:
    """Stage ``layers`` (dense-layer indices) as ``(specs, fn(params, x))``, jitted, under
    ``shard_map`` on ``mesh``: rows split over ``data``, the output whole on the group.

    Jitted, so each stage is one cached program: run eagerly, ``shard_map`` compiled every
    operation of the body again on every call (280 programs a step for 2 stages of 2 dense
    layers and 2 micro-batches)."""
    specs = {f"Dense_{i}": dense_specs(roles[i]) for i in layers}

    def local(params: Any, x: jax.Array) -> jax.Array:
        x = x.reshape((x.shape[0], -1))
        for i in layers:
            x = dense(params[f"Dense_{i}"], x, roles[i])
            if i < n_dense - 1:
                x = nn.relu(x)
        return x

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(specs, P(DATA)), out_specs=P(DATA)))
    return specs, fn


def stage_functions(
    data: int, tensor: int, counts: Sequence[int]
) -> tuple[list[jax.sharding.Mesh], list[tuple[dict, Callable[[Any, jax.Array], jax.Array]]]]:
    """The stages' meshes and :func:`stage_function` s of an mlp of ``sum(counts)`` dense
    layers cut into stages of ``counts`` layers."""
    n_dense = sum(counts)
    roles = mlp_roles(n_dense)
    meshes = stage_meshes(data, tensor, len(counts))
    starts = np.cumsum([0, *counts])
    stages = [
        stage_function(range(starts[s], starts[s + 1]), roles, n_dense, meshes[s])
        for s in range(len(counts))
    ]
    return meshes, stages


class HybridTrainer:
    """The synchronous trainer's interface (``init``, ``batch``, ``update``) for D copies of
    a pipeline of P stages of T-way tensor groups training the workload's mlp."""

    def __init__(
        self,
        workload: Workload,
        mesh: dict[str, int],
        counts: Sequence[int],
        micro_batches: int,
        per_replica_batch: int,
        make_state: Callable[[Any, Any, Any], Any],
    ) -> None:
        """``counts``: the dense layers of each stage; ``make_state(params, opt_state,
        model_state)``: the strategy's state type."""
        self._state = make_state
        self.workload = workload
        self.D, T, S = mesh["data"], mesh["tensor"], mesh["pipeline"]
        self.M, self.batch_size = micro_batches, per_replica_batch
        self.global_batch = self.D * per_replica_batch
        n_dense = len(workload.params["params"])
        if sum(counts) != n_dense:
            raise SimdistError(
                f"strategy hybrid: the partition {list(counts)} covers {sum(counts)} layers; "
                f"the mlp has {n_dense} dense layers"
            )
        # Shared by the Workloads differing only in seed (tests/test_compile_sharing.py).
        self.meshes, self.stages = workload.shared_program(
            ("hybrid", self.D, T, S, tuple(counts)), lambda: stage_functions(self.D, T, counts)
        )
        self._grads = jax.value_and_grad(self._loss)

    def _rows(self, a: Any, m: int) -> Any:
        """Micro-batch ``m`` of every data copy's shard, copies in order."""
        size = self.batch_size // self.M
        shaped = a.reshape((self.D, self.batch_size, *a.shape[1:]))
        return shaped[:, m * size : (m + 1) * size].reshape((self.D * size, *a.shape[1:]))

    def _loss(self, params: Any, x: Any, y: Any) -> jax.Array:
        total = 0.0
        for m in range(self.M):
            a = self._rows(x, m)
            for mesh, (specs, fn) in zip(self.meshes, self.stages, strict=True):
                a = jax.device_put(a, NamedSharding(mesh, P(DATA)))
                a = fn(self._place(params, specs, mesh), a)
            labels = jax.device_put(self._rows(y, m), NamedSharding(self.meshes[-1], P(DATA)))
            total = total + loss_sum(a, labels, self.workload.task) / self.global_batch
        return total

    @staticmethod
    def _place(params: Any, specs: dict, mesh: jax.sharding.Mesh) -> Any:
        """A stage's parameters split over its mesh (their gradients come back whole)."""
        return {
            k: jax.tree.map(
                lambda leaf, spec: jax.device_put(leaf, NamedSharding(mesh, spec)),
                params["params"][k],
                spec_tree,
            )
            for k, spec_tree in specs.items()
        }

    def init(self) -> Any:
        """The workload's initial parameters and their optimizer state."""
        params = self.workload.params
        return self._state(params, self.workload.init_opt_state(params), {})

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        return self.workload.batches.batch(step, self.global_batch)

    def update(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, float]:
        """One step: every micro-batch through the stages, the accumulated gradient, the
        sharded update; the global batch's mean loss."""
        x, y = batch
        loss, grads = self._grads(state.params, np.asarray(x), np.asarray(y))
        params, opt_state = self.workload.apply(state.params, state.opt_state, grads)
        return self._state(params, opt_state, state.model_state), float(loss)

    def params(self, state: Any) -> Any:
        """The parameter tree of ``state``, gathered to the host."""
        return jax.tree.map(lambda a: np.asarray(jax.device_get(a)), state.params)
