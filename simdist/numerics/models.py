"""The Flax linen model zoo: small models that train in seconds on a laptop CPU.

Four sizes of the same classification/regression head, so that the compute
cost (and thus the simulated step time) spans a range while the numerics stay
cheap: a linear model, a multi-layer perceptron, a small CNN, and a residual
network with BatchNormalization whose depth and width are options.

The residual network is the only model with *state*: BatchNormalization's
moving statistics (collection :data:`STATE`), which are not trained by
gradients. In training mode it normalises with the batch's own statistics and
writes them to the collection :data:`MOMENTS`, in the structure of the state;
:func:`update_moving_stats` folds them into the moving averages. Keeping the
two apart is what lets a parameter server apply the moving-average update
where the statistics live, as TensorFlow does (see ``executor.Workload``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.catalog import (
    MLP_HIDDEN_DEFAULT,
    MODELS,
    MOE_DEFAULTS,
    MOE_HIDDEN_DEFAULT,
    RESNET_DEFAULTS,
)
from simdist.compile_cache import configure as _configure_compile_cache
from simdist.errors import SimdistError

if TYPE_CHECKING:
    from simdist.scenario.workload import ModelSpec

# JAX's persistent compilation cache, before anything compiles (simdist.compile_cache).
_configure_compile_cache(jax)


def _flatten(x: jax.Array) -> jax.Array:
    return x.reshape((x.shape[0], -1))


class SoftmaxRegression(nn.Module):
    """One dense layer on the flattened input (multinomial logistic / linear regression)."""

    n_outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.n_outputs)(_flatten(x))


class MLP(nn.Module):
    """Dense + ReLU per hidden width, then a dense output layer."""

    n_outputs: int
    hidden: Sequence[int] = (128,)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _flatten(x)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.n_outputs)(x)


class CNN(nn.Module):
    """The CNN of the TensorFlow "Convolutional Neural Network" tutorial, SAME padding.

    Conv32(3x3)-ReLU-MaxPool2-Conv64(3x3)-ReLU-MaxPool2-Flatten-Dense64-ReLU-Dense.
    Source: https://www.tensorflow.org/tutorials/images/cnn (its third conv layer is
    dropped: on 8x8 digits two 2x2 poolings already leave a 2x2 map).
    """

    n_outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Conv(32, (3, 3), padding="SAME")(x))
        x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = nn.relu(nn.Conv(64, (3, 3), padding="SAME")(x))
        x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = nn.relu(nn.Dense(64)(_flatten(x)))
        return nn.Dense(self.n_outputs)(x)


# -- BatchNormalization and the residual network -----------------------------------

#: The collection holding BatchNormalization's moving statistics (the model state).
STATE = "batch_stats"
#: The collection a training-mode forward pass writes each BatchNormalization's batch mean
#: and variance to, under the names of the moving statistics they update.
MOMENTS = "batch_moments"
#: tf.keras.layers.BatchNormalization's defaults (momentum=0.99, epsilon=1e-3).
#: https://www.tensorflow.org/api_docs/python/tf/keras/layers/BatchNormalization
BN_MOMENTUM = 0.99
BN_EPSILON = 1e-3


class BatchNorm(nn.Module):
    """Keras' ``BatchNormalization`` over the last axis, with its variable names.

    Training (``train=True``): normalise with this batch's mean and (biased)
    variance, ``E[x²] − E[x]²`` as Keras 3 computes them
    (``keras.ops.moments``), and write both to :data:`MOMENTS` as
    ``moving_mean`` / ``moving_variance``; the moving statistics are neither
    read nor written. With ``axis_name`` the two moments are averaged over that
    named axis of replicas first (``lax.pmean``): TF's ``SyncBatchNormalization``
    (Keras 3: ``BatchNormalization(synchronized=True)``), which all-reduces the
    local sums so that every replica normalises with the global batch's moments.
    Replicas' batches are equal in size, so the mean of their means is the
    global mean. Inference: normalise with the moving statistics (:data:`STATE`).

    ``y = gamma · (x − mean) / sqrt(var + epsilon) + beta``.
    """

    epsilon: float = BN_EPSILON
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        features = x.shape[-1]
        gamma = self.param("gamma", nn.initializers.ones, (features,), jnp.float32)
        beta = self.param("beta", nn.initializers.zeros, (features,), jnp.float32)
        if train and not self.is_initializing():
            axes = tuple(range(x.ndim - 1))
            mean, mean_sq = jnp.mean(x, axes), jnp.mean(x * x, axes)
            if self.axis_name is not None:
                mean, mean_sq = jax.lax.pmean((mean, mean_sq), self.axis_name)
            var = jnp.maximum(mean_sq - mean * mean, 0.0)
            self.put_variable(MOMENTS, "moving_mean", mean)
            self.put_variable(MOMENTS, "moving_variance", var)
        else:
            zeros = partial(jnp.zeros, (features,), jnp.float32)
            ones = partial(jnp.ones, (features,), jnp.float32)
            mean = self.variable(STATE, "moving_mean", zeros).value
            var = self.variable(STATE, "moving_variance", ones).value
        shape = (1,) * (x.ndim - 1) + (features,)
        scale = (gamma * jax.lax.rsqrt(var + self.epsilon)).reshape(shape)
        return (x - mean.reshape(shape)) * scale + beta.reshape(shape)


def update_moving_stats(state: Any, moments: Any, momentum: float) -> Any:
    """Fold a step's batch ``moments`` into the moving statistics ``state`` (same structure).

    TensorFlow's ``assign_moving_average`` with ``decay = 1 − momentum``:
    ``moving ← moving − (moving − batch) · (1 − momentum)``. It reads the
    variable where it lives, so a parameter server applies it to the value it
    holds at that moment, not to the one the worker pulled.
    """
    decay = 1.0 - momentum
    return jax.tree.map(lambda moving, batch: moving - (moving - batch) * decay, state, moments)


class ResidualBlock(nn.Module):
    """He et al. 2016's basic block: conv3x3-BN-ReLU, conv3x3-BN, + shortcut, ReLU.

    The shortcut is the identity when the block keeps the shape, else a
    projection (1x1 conv with the block's stride, then BN: the paper's option B).
    Convolutions carry no bias: the BatchNormalization after each makes it redundant.
    """

    width: int
    stride: int = 1
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        bn = partial(BatchNorm, axis_name=self.axis_name)
        strides = (self.stride, self.stride)
        y = nn.Conv(self.width, (3, 3), strides, padding="SAME", use_bias=False, name="conv1")(x)
        y = nn.relu(bn(name="bn1")(y, train))
        y = nn.Conv(self.width, (3, 3), padding="SAME", use_bias=False, name="conv2")(y)
        y = bn(name="bn2")(y, train)
        if self.stride != 1 or x.shape[-1] != self.width:
            x = nn.Conv(self.width, (1, 1), strides, use_bias=False, name="shortcut_conv")(x)
            x = bn(name="shortcut_bn")(x, train)
        return nn.relu(y + x)


#: Inputs at least this many pixels high and wide get the paper's stem max pool.
STEM_POOL_MIN_SIDE = 32


class ResNet(nn.Module):
    """A residual network: Conv7x7/2-BN-ReLU stem, stages of residual blocks, GAP, Dense.

    He, Zhang, Ren & Sun 2016, "Deep residual learning for image recognition",
    with basic blocks (two 3x3 convolutions). Stage ``i`` has ``blocks[i]``
    blocks of ``width · 2**i`` channels; every stage after the first starts with
    a stride-2 block (projection shortcut), the others keep the shape (identity
    shortcut). ``blocks=(2, 2, 2, 2), width=64`` is ResNet-18's layout.

    The stem's 3x3/2 max pool (``stem_pool``) is the paper's for ImageNet-sized
    inputs (224 → 112 → 56); :func:`make_model` keeps it only for inputs of at
    least :data:`STEM_POOL_MIN_SIDE` pixels a side. On 8x8 digits the 7x7/2 stem
    alone gives 4x4, stage 2 works on 2x2 and stage 3 on 1x1; with the pool too,
    stage 1 would already be down to 2x2 and stage 2 to 1x1, where its 3x3
    kernels see only padding.

    ``train=True`` normalises with batch statistics (written to :data:`MOMENTS`;
    apply with ``mutable=[MOMENTS]``); ``train=False``, the default, with the
    moving statistics. ``axis_name`` synchronises BatchNormalization over a named
    axis of replicas (see :class:`BatchNorm`).
    """

    n_outputs: int
    blocks: Sequence[int] = (1, 1)
    width: int = 16
    stem_pool: bool = True
    batch_norm_momentum: float = BN_MOMENTUM
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = nn.Conv(self.width, (7, 7), (2, 2), padding="SAME", use_bias=False, name="stem_conv")(x)
        x = nn.relu(BatchNorm(axis_name=self.axis_name, name="stem_bn")(x, train))
        if self.stem_pool:
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for stage, n_blocks in enumerate(self.blocks):
            for block in range(n_blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                x = ResidualBlock(
                    self.width * 2**stage,
                    stride,
                    self.axis_name,
                    name=f"stage{stage + 1}_block{block + 1}",
                )(x, train)
        x = jnp.mean(x, axis=(1, 2))  # global average pooling
        return nn.Dense(self.n_outputs, name="head")(x)


def make_model(
    spec: ModelSpec | str, n_outputs: int, input_shape: tuple[int, ...] | None = None
) -> nn.Module:
    """The Flax module named by ``spec.name`` with ``n_outputs`` outputs (``spec`` a bare
    name: the zoo model with the catalog's default options).

    ``input_shape`` (one example, no batch axis) is optional: it rejects a CNN or
    a ResNet on non-image data with a clear message instead of an XLA error, and
    decides the ResNet's stem pool (:class:`ResNet`). A ResNet's options (``blocks``,
    ``width``, ``batch_norm_momentum``) are the spec's, which validation fills with
    ``RESNET_DEFAULTS`` where not given; ``sync_batch_norm`` is applied by the executor,
    which names the replica axis (``ResNet.axis_name``).
    """
    spec = _with_defaults(spec) if isinstance(spec, str) else spec
    name = spec.name
    if name == "softmax":
        return SoftmaxRegression(n_outputs)
    if name == "mlp":
        hidden = tuple(int(h) for h in spec.hidden)
        return MLP(n_outputs, hidden)
    if name in ("cnn", "resnet") and input_shape is not None and len(input_shape) != 3:
        raise SimdistError(
            f"model {name} needs image inputs of shape (height, width, channels); "
            f"this dataset has examples of shape {tuple(input_shape)}: use mlp or softmax"
        )
    if name == "cnn":
        return CNN(n_outputs)
    if name == "moe":
        from simdist.numerics.moe import make_moe

        return make_moe(spec, n_outputs)
    if name == "resnet":
        side = min(input_shape[:2]) if input_shape is not None else STEM_POOL_MIN_SIDE
        return ResNet(
            n_outputs,
            blocks=tuple(int(b) for b in spec.blocks),
            width=int(spec.width),
            stem_pool=side >= STEM_POOL_MIN_SIDE,
            batch_norm_momentum=float(spec.batch_norm_momentum),
        )
    raise SimdistError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


def _with_defaults(name: str) -> SimpleNamespace:
    """Zoo model ``name`` with the options validation fills in when a scenario leaves them
    out (the catalog's defaults), for a model named alone (``simdist list``, a profile)."""
    hidden = MOE_HIDDEN_DEFAULT if name == "moe" else MLP_HIDDEN_DEFAULT
    return SimpleNamespace(name=name, hidden=list(hidden), **RESNET_DEFAULTS, **MOE_DEFAULTS)


def output_shape(model: nn.Module, params: Any, input_shape: tuple[int, ...], batch: int) -> tuple:
    """Shape of ``model`` outputs for ``batch`` examples, computed abstractly (no FLOPs)."""
    x = jax.ShapeDtypeStruct((batch, *input_shape), jnp.float32)
    return jax.eval_shape(model.apply, params, x).shape
