"""ResNet-50/101/152 as sequences of layers: torchvision's ResNet v1.5 (stride on the 3×3
convolution), He et al. 2016,
https://github.com/pytorch/vision/blob/main/torchvision/models/resnet.py

``resnet50_v1`` and ``resnet152_v1`` are the paper's v1, with the stride on the first 1×1
convolution, as tf_cnn_benchmarks builds ``resnet50`` / ``resnet152`` (tensorflow/benchmarks,
scripts/tf_cnn_benchmarks/models/resnet_model.py, ``bottleneck_block_v1``): every 3×3
convolution is then stride 1, which matters to what cuDNN runs (simdist/hardware/roofline.py).
"""

from __future__ import annotations

import flax.linen as nn
import jax

from simdist.numerics.fullsize.blocks import ConvBN, PoolDense, max_pool_3x3_s2
from simdist.numerics.fullsize.layered import Layer

__all__ = ["RESNET_DEPTHS", "Bottleneck", "ResNetStem", "resnet_layers"]

#: Bottleneck blocks per stage.
RESNET_DEPTHS = {
    "resnet50": (3, 4, 6, 3),
    "resnet101": (3, 4, 23, 3),
    "resnet152": (3, 8, 36, 3),
    "resnet50_v1": (3, 4, 6, 3),
    "resnet152_v1": (3, 8, 36, 3),
}


class ResNetStem(nn.Module):
    """conv1 7×7/2 (64) + BN + ReLU, then 3×3/2 max pooling."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return max_pool_3x3_s2(ConvBN(64, (7, 7), 2)(x), pad=1)


class Bottleneck(nn.Module):
    """1×1 → 3×3 (stride here: v1.5) → 1×1 (4× wider), plus the (projected) shortcut.

    ``v1``: the stride on the first 1×1 instead (He et al. 2016's original)."""

    planes: int
    strides: int = 1
    project: bool = False
    v1: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        first, second = (self.strides, 1) if self.v1 else (1, self.strides)
        y = ConvBN(self.planes, (1, 1), first)(x)
        y = ConvBN(self.planes, (3, 3), second)(y)
        y = ConvBN(4 * self.planes, (1, 1), relu=False)(y)
        if self.project:
            x = ConvBN(4 * self.planes, (1, 1), self.strides, relu=False)(x)
        return nn.relu(x + y)


def resnet_layers(name: str, n_outputs: int) -> list[Layer]:
    """The layers of ``name`` (a key of :data:`RESNET_DEPTHS`) with ``n_outputs`` classes."""
    layers = [Layer("conv1", ResNetStem())]
    for stage, (blocks, planes) in enumerate(
        zip(RESNET_DEPTHS[name], (64, 128, 256, 512), strict=True)
    ):
        for b in range(blocks):
            strides = 2 if stage > 0 and b == 0 else 1
            block = Bottleneck(planes, strides, b == 0, v1=name.endswith("_v1"))
            layers.append(Layer(f"layer{stage + 1}.{b}", block))
    return [*layers, Layer("fc", PoolDense(n_outputs))]
