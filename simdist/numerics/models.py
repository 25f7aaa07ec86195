"""The Flax linen model zoo: small models that train in seconds on a laptop CPU.

Three sizes of the same classification/regression head, so that the compute
cost (and thus the simulated step time) spans a range while the numerics stay
cheap: a linear model, a multi-layer perceptron, and a small CNN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.catalog import MODELS
from simdist.errors import SimdistError


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


def make_model(spec: Any, n_outputs: int, input_shape: tuple[int, ...] | None = None) -> nn.Module:
    """The Flax module named by ``spec.name`` with ``n_outputs`` outputs.

    ``input_shape`` (one example, no batch axis) is optional and only used to
    reject a CNN on non-image data with a clear message instead of an XLA error.
    """
    name = spec.name
    if name == "softmax":
        return SoftmaxRegression(n_outputs)
    if name == "mlp":
        hidden = tuple(int(h) for h in (getattr(spec, "hidden", None) or (128,)))
        return MLP(n_outputs, hidden)
    if name == "cnn":
        if input_shape is not None and len(input_shape) != 3:
            raise SimdistError(
                f"model cnn needs image inputs of shape (height, width, channels); "
                f"this dataset has examples of shape {tuple(input_shape)}: use mlp or softmax"
            )
        return CNN(n_outputs)
    raise SimdistError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


def output_shape(model: nn.Module, params: Any, input_shape: tuple[int, ...], batch: int) -> tuple:
    """Shape of ``model`` outputs for ``batch`` examples, computed abstractly (no FLOPs)."""
    x = jax.ShapeDtypeStruct((batch, *input_shape), jnp.float32)
    return jax.eval_shape(model.apply, params, x).shape
