"""Flax building blocks shared by several full-size model families.

``ConvBN`` and :func:`max_pool_3x3_s2` serve ResNet and Inception-V3, ``PoolDense`` their
classifiers, ``DenseLayer`` VGG-16's fully connected layers and BERT's classifier.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["ConvBN", "DenseLayer", "PoolDense", "max_pool_3x3_s2"]


def _pads(kernel: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Symmetric padding of k//2 per side, as torchvision's padding=k//2."""
    return tuple((k // 2, k // 2) for k in kernel)


class ConvBN(nn.Module):
    """Convolution without bias, BatchNorm (batch statistics), optional ReLU."""

    features: int
    kernel: tuple[int, int]
    strides: int = 1
    same: bool = True  # pad k//2 per side; False: no padding ("VALID")
    relu: bool = True
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        padding = _pads(self.kernel) if self.same else "VALID"
        x = nn.Conv(
            self.features, self.kernel, (self.strides, self.strides), padding, use_bias=False
        )(x)
        x = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=self.epsilon)(x)
        return nn.relu(x) if self.relu else x


def max_pool_3x3_s2(x: jax.Array, pad: int = 0) -> jax.Array:
    """3×3 max pooling with stride 2 and ``pad`` on each side (ResNet's stem, Inception)."""
    return nn.max_pool(x, (3, 3), strides=(2, 2), padding=((pad, pad), (pad, pad)))


class PoolDense(nn.Module):
    """Global average pooling over height and width, then a dense classifier."""

    n_outputs: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.n_outputs)(jnp.mean(x, axis=(1, 2)))


class DenseLayer(nn.Module):
    """Dense (flattening an image input first), optionally followed by ReLU."""

    features: int
    relu: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(self.features)(x.reshape((x.shape[0], -1)))
        return nn.relu(x) if self.relu else x
