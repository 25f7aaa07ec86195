"""VGG-16 as a sequence of layers: configuration D of Simonyan & Zisserman 2015, as
torchvision's ``vgg16``."""

from __future__ import annotations

import flax.linen as nn
import jax

from simdist.numerics.fullsize.blocks import DenseLayer
from simdist.numerics.fullsize.layered import Layer

__all__ = ["VGGConv", "vgg16_layers"]

# The convolution widths of each block; a 2×2/2 max pooling ends every block.
_VGG16 = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


class VGGConv(nn.Module):
    """3×3 convolution (with bias, padding 1) + ReLU, optionally followed by 2×2/2 max pooling."""

    features: int
    pool: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Conv(self.features, (3, 3), padding=((1, 1), (1, 1)))(x))
        return nn.max_pool(x, (2, 2), strides=(2, 2)) if self.pool else x


def vgg16_layers(n_outputs: int) -> list[Layer]:
    """VGG-16's 13 convolutions and 3 dense layers, the last with ``n_outputs`` classes."""
    layers = []
    for block, widths in enumerate(_VGG16, start=1):
        for i, width in enumerate(widths, start=1):
            pool = i == len(widths)
            layers.append(Layer(f"conv{block}_{i}", VGGConv(width, pool)))
    return [
        *layers,
        Layer("fc6", DenseLayer(4096)),
        Layer("fc7", DenseLayer(4096)),
        Layer("fc8", DenseLayer(n_outputs, relu=False)),
    ]
