"""Megatron tensor parallelism for real: sharded matmuls on emulated JAX devices.

Shoeybi et al. 2019 (arXiv:1909.08053, Sec. 3, Fig. 3). A column-parallel linear ``Y =
X A`` keeps a slice of ``A``'s columns (and of the bias) on each of the T devices of the
``tensor`` axis and needs no communication; the row-parallel linear after it keeps the
matching slice of ``B``'s rows, so each device computes a partial ``Y_i B_i`` that a
``psum`` over ``tensor`` completes before the bias (replicated) is added: Megatron's
``g``. Megatron's ``f`` — the all-reduce of the input's gradient in backward — is what
JAX's autodiff of ``shard_map`` inserts by itself: the input is the same on every device
of the group (invariant), the matmul's result differs (varying), and the transpose of that
broadcast is a ``psum`` of the cotangents.

Everything runs under one ``shard_map`` over a ``data`` × ``tensor`` mesh of D × T
devices: the global batch is split over ``data`` (contiguous shards, as the synchronous
strategies split it), the loss is the per-example sum over the global batch divided by
its size (``tf.nn.compute_average_loss``) summed over ``data``, and ``jax.value_and_grad``
of the whole map gives each device the gradient of its shard — parameters replicated over
a group (LayerNorms, row-parallel biases, unsplit layers) summed over the devices that
used them, split ones summed over ``data`` only. The parameters and the optimizer state
stay sharded (``NamedSharding``) between steps: each device updates its slices.

The zoo's mlp pairs its dense layers (1st column-, 2nd row-parallel, 3rd column-, ...; a
last unpaired one whole). :func:`attention_block` and :func:`feed_forward_block` split a
transformer's :class:`~simdist.numerics.fullsize.transformer.SelfAttention` (heads over
``tensor``: query, key and value by columns, the output projection by rows) and
:class:`~simdist.numerics.fullsize.transformer.FeedForward` on their own parameters.

Sequence parallelism (the mlp's examples split over ``tensor`` between its pairs:
:func:`mlp_model`) replaces each all-reduce by a reduce-scatter and an all-gather; the
transformer blocks here run without it (the clock models it for them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.numerics.device_allreduce import device_shortfall, replica_backend, replica_devices

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload

TENSOR = "tensor"
DATA = "data"


class ShardedModel(NamedTuple):
    """A model split over the ``tensor`` axis: its parameters' ``PartitionSpec`` tree and
    ``apply(params, x)`` run on one device's slices inside ``shard_map``; ``split_rows``:
    its output is split by rows (examples) over ``tensor`` (sequence parallelism)."""

    specs: Any
    apply: Callable[[Any, jax.Array], jax.Array]
    split_rows: bool = False


def tensor_mesh(data: int, tensor: int) -> jax.sharding.Mesh:
    """The first D × T JAX devices as a ``data`` × ``tensor`` mesh (tensor innermost)."""
    devices = replica_devices()
    shortfall = device_shortfall(replica_backend(), len(devices), data * tensor)
    if shortfall is not None:
        raise SimdistError(f"strategy tensor_parallel: {shortfall}")
    return Mesh(devices[: data * tensor], [(DATA, data), (TENSOR, tensor)]).to_jax()


def mlp_roles(n_dense: int) -> list[str]:
    """The mlp's dense layers in pairs (column, row); a last unpaired one whole."""
    pairs = n_dense // 2
    return [("column", "row")[i % 2] if i < 2 * pairs else "whole" for i in range(n_dense)]


def dense_specs(role: str) -> dict[str, P]:
    """A dense layer's ``PartitionSpec`` s: kernel by columns / rows, the bias with it
    (column) or whole (row: added once, after the all-reduce)."""
    if role == "column":
        return {"kernel": P(None, TENSOR), "bias": P(TENSOR)}
    if role == "row":
        return {"kernel": P(TENSOR, None), "bias": P()}
    return {"kernel": P(), "bias": P()}


def dense(p: Any, x: jax.Array, role: str) -> jax.Array:
    """One device's part of a dense layer of ``role``; a row-parallel one all-reduced."""
    y = jnp.dot(x, p["kernel"])
    if role == "row":
        y = jax.lax.psum(y, TENSOR)
    bias = p["bias"]
    return y + bias.reshape((1,) * (y.ndim - 1) + bias.shape)


def mlp_model(n_dense: int, sequence_parallel: bool = False) -> ShardedModel:
    """The zoo mlp (:class:`~simdist.numerics.models.MLP`) with its dense layers paired.

    ``sequence_parallel``: the examples are the mlp's tokens (every layer works example by
    example). Each row-parallel sum is a reduce-scatter (``psum_scatter``) leaving each
    device 1/T of the rows, the element-wise ReLU and any whole layer work on those rows
    only, and the next column-parallel layer all-gathers them first; autodiff turns each
    into the other in backward (Korthikanti et al. 2022, Sec. 4.2.2).
    """
    roles = mlp_roles(n_dense)
    specs = {"params": {f"Dense_{i}": dense_specs(role) for i, role in enumerate(roles)}}
    sp = sequence_parallel and "row" in roles

    def apply(params: Any, x: jax.Array) -> jax.Array:
        x = x.reshape((x.shape[0], -1))
        split = False
        for i, role in enumerate(roles):
            p = params["params"][f"Dense_{i}"]
            if role == "column" and split:
                x = jax.lax.all_gather(x, TENSOR, axis=0, tiled=True)
            if role == "row" and sp:
                x = jax.lax.psum_scatter(jnp.dot(x, p["kernel"]), TENSOR, tiled=True)
                x = x + p["bias"].reshape((1, -1))
                split = True
            else:
                x = dense(p, x, role)
            if i < n_dense - 1:
                x = nn.relu(x)
        return x

    return ShardedModel(specs, apply, split_rows=sp)


# -- transformer blocks --------------------------------------------------------------


def attention_specs(pre_layer_norm: bool) -> dict[str, Any]:
    """SelfAttention's parameters: query, key, value by columns (heads), output by rows."""
    del pre_layer_norm  # its LayerNorm, either side, is whole
    column = dense_specs("column")
    return {"query": column, "key": column, "value": column, "output": dense_specs("row")}


def _layer_norm(module: Any, p: Any, x: jax.Array) -> jax.Array:
    return nn.LayerNorm(epsilon=module.epsilon).apply({"params": p}, x)


def attention_block(module: Any, p: Any, x: jax.Array, tensor: int) -> jax.Array:
    """:class:`SelfAttention` ``module`` on one device's heads (``heads / tensor`` of them);
    the output projection's partial sums all-reduced."""
    batch, seq, hidden = x.shape
    heads, head_dim = module.heads // tensor, hidden // module.heads
    h = _layer_norm(module, p["LayerNorm_0"], x) if module.pre_layer_norm else x

    def split(name: str) -> jax.Array:
        return dense(p[name], h, "column").reshape((batch, seq, heads, head_dim))

    q, k, v = split("query"), split("key"), split("value")
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
    if module.causal:
        mask = jnp.tril(jnp.ones((seq, seq), bool))[None, None]
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape((batch, seq, heads * head_dim))
    y = x + dense(p["output"], out, "row")
    return y if module.pre_layer_norm else _layer_norm(module, p["LayerNorm_0"], y)


def feed_forward_specs() -> dict[str, Any]:
    """FeedForward's parameters: the first dense by columns, the second by rows."""
    return {"intermediate": dense_specs("column"), "output": dense_specs("row")}


def feed_forward_block(module: Any, p: Any, x: jax.Array) -> jax.Array:
    """:class:`FeedForward` ``module`` on one device's slice of its width."""
    h = _layer_norm(module, p["LayerNorm_0"], x) if module.pre_layer_norm else x
    h = nn.gelu(dense(p["intermediate"], h, "column"), module.approximate_gelu)
    y = x + dense(p["output"], h, "row")
    return y if module.pre_layer_norm else _layer_norm(module, p["LayerNorm_0"], y)


def layered_model(layers: Any, variables: Any, tensor: int) -> ShardedModel:
    """A sequence of fullsize layers (:class:`~simdist.numerics.fullsize.Layer`) whose
    SelfAttention and FeedForward layers are split; ``variables`` is ``{name: the layer's
    variables}``, the tree the specs follow."""
    from simdist.numerics.fullsize.layered import apply_layer
    from simdist.numerics.fullsize.transformer import FeedForward, SelfAttention

    specs = {}
    for layer in layers:
        params = variables[layer.name]["params"]
        own = jax.tree.map(lambda _: P(), params)
        if isinstance(layer.module, SelfAttention):
            own = {**own, **attention_specs(layer.module.pre_layer_norm)}
        elif isinstance(layer.module, FeedForward):
            own = {**own, **feed_forward_specs()}
        specs[layer.name] = {"params": own}

    def apply(params: Any, x: jax.Array) -> jax.Array:
        for layer in layers:
            p = params[layer.name]
            if isinstance(layer.module, SelfAttention):
                x = attention_block(layer.module, p["params"], x, tensor)
            elif isinstance(layer.module, FeedForward):
                x = feed_forward_block(layer.module, p["params"], x)
            else:
                x = apply_layer(layer.module, p, x)
        return x

    return ShardedModel(specs, apply)


# -- the loss, the gradients, the trainer --------------------------------------------


def loss_sum(out: jax.Array, y: jax.Array, task: str) -> jax.Array:
    """Sum over the examples of the per-example loss, as the Workload's (executor.py)."""
    if task == "classification":
        return optax.softmax_cross_entropy_with_integer_labels(out, y).sum()
    return 0.5 * jnp.sum((out - y) ** 2)


def sharded_value_and_grad(
    model: ShardedModel, mesh: jax.sharding.Mesh, task: str, global_batch: int
) -> Callable[[Any, Any, Any], tuple[jax.Array, Any]]:
    """Jitted ``(params, x, y) -> (loss, grads)`` of the global batch, every device on its
    parameter slices and its data shard (module docstring)."""

    def local(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        out = model.apply(params, x)
        if not model.split_rows:
            return jax.lax.psum(loss_sum(out, y, task) / global_batch, DATA)
        rows = out.shape[0]  # this device's rows of its data shard
        y = jax.lax.dynamic_slice_in_dim(y, jax.lax.axis_index(TENSOR) * rows, rows)
        return jax.lax.psum(loss_sum(out, y, task) / global_batch, (DATA, TENSOR))

    mapped = jax.shard_map(
        local, mesh=mesh, in_specs=(model.specs, P(DATA), P(DATA)), out_specs=P()
    )
    return jax.jit(jax.value_and_grad(mapped))


def place(params: Any, specs: Any, mesh: jax.sharding.Mesh) -> Any:
    """``params`` split over ``mesh`` as ``specs`` say."""
    return jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), params, specs)


class TensorParallelTrainer:
    """The synchronous trainer's interface (``init``, ``batch``, ``dispatch``) for D copies
    of a tensor group of T devices training the workload's mlp on the global batch."""

    def __init__(
        self,
        workload: Workload,
        data: int,
        tensor: int,
        per_replica_batch: int,
        make_state: Callable[[Any, Any, Any], Any],
        sequence_parallel: bool = False,
    ) -> None:
        """``make_state(params, opt_state, model_state)``: the strategy's state type."""
        self._state = make_state
        self.workload = workload
        self.global_batch = data * per_replica_batch
        self.mesh = tensor_mesh(data, tensor)
        n_dense = len(workload.params["params"])
        self.model = mlp_model(n_dense, sequence_parallel)
        # Shared by the Workloads differing only in seed (tests/test_compile_sharing.py).
        self._grads = workload.shared_program(
            ("tensor_parallel", data, tensor, bool(sequence_parallel), self.global_batch),
            lambda: sharded_value_and_grad(self.model, self.mesh, workload.task, self.global_batch),
        )

    def init(self) -> Any:
        """The workload's initial parameters, split over the mesh, and their optimizer state."""
        params = place(self.workload.params, self.model.specs, self.mesh)
        return self._state(params, self.workload.init_opt_state(params), {})

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        return self.workload.batches.batch(step, self.global_batch)

    def dispatch(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """One step, not waited for: the loss is a device scalar."""
        x, y = batch
        loss, grads = self._grads(state.params, x, y)
        params, opt_state = self.workload.apply(state.params, state.opt_state, grads)
        return self._state(params, opt_state, state.model_state), loss

    def update(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, float]:
        """:meth:`dispatch`, the loss as a float."""
        state, loss = self.dispatch(state, batch)
        return state, float(loss)
