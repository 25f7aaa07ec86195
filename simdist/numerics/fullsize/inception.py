"""Inception-V3 as a sequence of layers: torchvision's ``Inception3`` without the auxiliary
classifier (it is off at inference and adds a side branch; Szegedy et al. 2016)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.numerics.fullsize.blocks import ConvBN, PoolDense, max_pool_3x3_s2
from simdist.numerics.fullsize.layered import Layer

__all__ = [
    "InceptionA",
    "InceptionB",
    "InceptionC",
    "InceptionD",
    "InceptionE",
    "InceptionStem",
    "inception_v3_layers",
]


# torchvision's BasicConv2d is conv + BN(eps 0.001) + ReLU.
def _bc(features: int, kernel: tuple[int, int], strides: int = 1, same: bool = True) -> ConvBN:
    return ConvBN(features, kernel, strides, same=same, epsilon=1e-3)


def _avg_pool_3x3_s1(x: jax.Array) -> jax.Array:
    # count_include_pad=True, as torch's F.avg_pool2d(x, 3, stride=1, padding=1)
    return nn.avg_pool(x, (3, 3), strides=(1, 1), padding=((1, 1), (1, 1)))


class InceptionStem(nn.Module):
    """One stem convolution of Inception-V3, optionally followed by 3×3/2 max pooling."""

    features: int
    kernel: tuple[int, int]
    strides: int = 1
    same: bool = False
    pool: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _bc(self.features, self.kernel, self.strides, self.same)(x)
        return max_pool_3x3_s2(x) if self.pool else x


class InceptionA(nn.Module):
    """Mixed_5b/5c/5d: 1×1, 5×5, double 3×3 and pooled branches at 35×35."""

    pool_features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = _bc(64, (1, 1))(x)
        b5 = _bc(64, (5, 5))(_bc(48, (1, 1))(x))
        b3 = _bc(96, (3, 3))(_bc(96, (3, 3))(_bc(64, (1, 1))(x)))
        bp = _bc(self.pool_features, (1, 1))(_avg_pool_3x3_s1(x))
        return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class InceptionB(nn.Module):
    """Mixed_6a: grid reduction 35×35 → 17×17."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = _bc(384, (3, 3), 2, same=False)(x)
        bd = _bc(96, (3, 3), 2, same=False)(_bc(96, (3, 3))(_bc(64, (1, 1))(x)))
        return jnp.concatenate([b3, bd, max_pool_3x3_s2(x)], axis=-1)


class InceptionC(nn.Module):
    """Mixed_6b..6e: factorised 7×7 branches at 17×17."""

    channels_7x7: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.channels_7x7
        b1 = _bc(192, (1, 1))(x)
        b7 = _bc(192, (7, 1))(_bc(c, (1, 7))(_bc(c, (1, 1))(x)))
        bd = _bc(c, (1, 1))(x)
        for features, kernel in ((c, (7, 1)), (c, (1, 7)), (c, (7, 1)), (192, (1, 7))):
            bd = _bc(features, kernel)(bd)
        bp = _bc(192, (1, 1))(_avg_pool_3x3_s1(x))
        return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class InceptionD(nn.Module):
    """Mixed_7a: grid reduction 17×17 → 8×8."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = _bc(320, (3, 3), 2, same=False)(_bc(192, (1, 1))(x))
        b7 = _bc(192, (7, 1))(_bc(192, (1, 7))(_bc(192, (1, 1))(x)))
        b7 = _bc(192, (3, 3), 2, same=False)(b7)
        return jnp.concatenate([b3, b7, max_pool_3x3_s2(x)], axis=-1)


class InceptionE(nn.Module):
    """Mixed_7b/7c: expanded filter banks at 8×8."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = _bc(320, (1, 1))(x)
        b3 = _bc(384, (1, 1))(x)
        b3 = jnp.concatenate([_bc(384, (1, 3))(b3), _bc(384, (3, 1))(b3)], axis=-1)
        bd = _bc(384, (3, 3))(_bc(448, (1, 1))(x))
        bd = jnp.concatenate([_bc(384, (1, 3))(bd), _bc(384, (3, 1))(bd)], axis=-1)
        bp = _bc(192, (1, 1))(_avg_pool_3x3_s1(x))
        return jnp.concatenate([b1, b3, bd, bp], axis=-1)


def inception_v3_layers(n_outputs: int) -> list[Layer]:
    """Inception-V3's stem, its eleven mixed blocks and a classifier of ``n_outputs``."""
    return [
        Layer("Conv2d_1a_3x3", InceptionStem(32, (3, 3), 2)),
        Layer("Conv2d_2a_3x3", InceptionStem(32, (3, 3))),
        Layer("Conv2d_2b_3x3", InceptionStem(64, (3, 3), same=True, pool=True)),
        Layer("Conv2d_3b_1x1", InceptionStem(80, (1, 1))),
        Layer("Conv2d_4a_3x3", InceptionStem(192, (3, 3), pool=True)),
        Layer("Mixed_5b", InceptionA(32)),
        Layer("Mixed_5c", InceptionA(64)),
        Layer("Mixed_5d", InceptionA(64)),
        Layer("Mixed_6a", InceptionB()),
        Layer("Mixed_6b", InceptionC(128)),
        Layer("Mixed_6c", InceptionC(160)),
        Layer("Mixed_6d", InceptionC(160)),
        Layer("Mixed_6e", InceptionC(192)),
        Layer("Mixed_7a", InceptionD()),
        Layer("Mixed_7b", InceptionE()),
        Layer("Mixed_7c", InceptionE()),
        Layer("fc", PoolDense(n_outputs)),
    ]
