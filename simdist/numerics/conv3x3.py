"""The 3×3 stride-1 convolutions inside a Flax layer, counted on shapes alone.

Why: cuDNN (which TensorFlow's and PyTorch's GPU convolutions call, with autotuning on by
default) runs 3×3 stride-1 convolutions with Winograd's minimal filtering algorithm, which
executes a quarter of the direct convolution's multiplications (Lavin & Gray 2016,
"Fast Algorithms for Convolutional Neural Networks", CVPR, Sec. 4: F(4×4, 3×3)). The roofline
(:mod:`simdist.hardware.roofline`) prices those FLOPs apart, so a profile carries per layer the
forward FLOPs of such convolutions and the bytes of their inputs and outputs.

How: the layer is evaluated with :func:`jax.eval_shape` under :func:`flax.linen.intercept_methods`,
and every ``nn.Conv`` call with a 3×3 kernel, stride 1, no dilation and no feature groups is
counted. FLOPs are counted as XLA's cost analysis counts a convolution (two per
multiply-add, only the kernel taps that fall on the unpadded input), so that they are a part
of the layer's ``forward_flops`` and never more.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax

__all__ = ["Conv3x3", "count_conv3x3"]

_ELEMENT_NBYTES = 4  # profiles count float32 elements


@dataclass(frozen=True)
class Conv3x3:
    """Forward FLOPs of a program's 3×3 stride-1 convolutions and the bytes of their inputs
    and outputs (float32)."""

    flops: float = 0.0
    nbytes: float = 0.0

    def __add__(self, other: Conv3x3) -> Conv3x3:
        return Conv3x3(self.flops + other.flops, self.nbytes + other.nbytes)


def _pair(value: Any) -> tuple[int, ...]:
    if value is None:
        return (1, 1)
    return (int(value), int(value)) if isinstance(value, int) else tuple(int(v) for v in value)


def _low_padding(padding: Any, size: int) -> int:
    """Padding before the first element of one spatial dimension (stride 1, 3 taps)."""
    if isinstance(padding, str):
        return {"SAME": 1, "VALID": 0}.get(padding.upper(), 1)
    if isinstance(padding, int):
        return padding
    first = padding[0]
    return int(first if isinstance(first, int) else first[0])


def _valid_taps(size: int, out: int, low: int) -> int:
    """Kernel taps of one spatial dimension that fall on the input, summed over the outputs."""
    return sum(1 for o in range(out) for k in range(3) if 0 <= o - low + k < size)


def _is_conv3x3(module: nn.Module) -> bool:
    return (
        isinstance(module, nn.Conv)
        and tuple(module.kernel_size) == (3, 3)
        and _pair(module.strides) == (1, 1)
        and _pair(module.kernel_dilation) == (1, 1)
        and _pair(module.input_dilation) == (1, 1)
        and module.feature_group_count == 1
    )


def _cost(module: nn.Conv, x: Any, y: Any) -> Conv3x3:
    batch, height, width, channels = x.shape
    taps = 1
    for size, out in zip((height, width), y.shape[1:3], strict=True):
        taps *= _valid_taps(size, out, _low_padding(module.padding, size))
    flops = 2.0 * batch * taps * channels * y.shape[-1]
    nbytes = float((math.prod(x.shape) + math.prod(y.shape)) * _ELEMENT_NBYTES)
    return Conv3x3(flops, nbytes)


def count_conv3x3(apply: Callable[..., Any], *args: Any, top_level: bool = False) -> list[Conv3x3]:
    """The 3×3 stride-1 convolutions that ``apply(*args)`` calls, traced on shapes.

    Returns one total; with ``top_level``, one per top-level submodule call of a model in call
    order (as :mod:`simdist.numerics.profile` cuts a zoo model into layers), a convolution
    outside any submodule counting with the call before it.
    """
    totals: list[Conv3x3] = [Conv3x3()]
    calls = [0]

    def record(next_fun: Callable, call_args: Any, kwargs: Any, context: Any) -> Any:
        module = context.module
        if top_level and len(module.scope.path) == 1 and context.method_name == "__call__":
            calls[0] += 1
            if calls[0] > 1:
                totals.append(Conv3x3())
        y = next_fun(*call_args, **kwargs)
        if context.method_name == "__call__" and _is_conv3x3(module):
            x = call_args[0]
            if len(x.shape) == 4:
                totals[-1] = totals[-1] + _cost(module, x, y)
        return y

    def traced(*a: Any) -> Any:
        with nn.intercept_methods(record):
            return apply(*a)

    jax.eval_shape(traced, *args)
    return totals
