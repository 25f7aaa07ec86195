"""The roofline: how long each layer of a model takes on a device, and calibration to a measure.

Pure arithmetic on a :class:`~simdist.layers.ModelProfile` (per-layer FLOPs and bytes of the
whole per-replica batch) and a :class:`~simdist.profiles.DeviceProfile`: no SimPy, no JAX.

A layer's forward (and, separately, its backward) takes

    max(FLOPs / (peak FLOP/s × efficiency), bytes / (memory bandwidth × memory efficiency))
    + launch overhead

at the selected precision: a layer is either compute-bound or memory-bound (Williams,
Waterman and Patterson 2009, "Roofline"), and every layer pass pays the fixed cost of
launching its kernels. Profiles count bytes of float32 elements; at fp16 / bf16 the same
elements take half the bytes.

Which bytes. The roofline's memory term is a layer's *compulsory* DRAM traffic (Williams et
al. 2009 count arithmetic intensity against it): forward reads its input activation and its
parameters and writes its output; backward reads the input activation, the output gradient
and the parameters and writes the input gradient and the parameter gradient — a layer run
as fused kernels, as a compiled program runs it. XLA's "bytes accessed" of the *lowered*
(unfused) layer, which profiles also carry, counts every elementwise op's operands and is
an upper bound: for ResNet-50's stem at batch 64 it is 602 MB lowered against 165 MB
compiled, and it would make half of ResNet-50's layers memory-bound on a V100. The profile's
bytes are used only when activation sizes are unknown (a file without them).

Calibration (:func:`calibrate`) scales every layer's times by one factor so that one device's
step takes a measured time exactly: the profile then only says how the step is shared
between the layers, which is how a user who has measured one GPU predicts many.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from simdist.errors import SimdistError
from simdist.profiles import ELEMENT_NBYTES, DeviceProfile

if TYPE_CHECKING:
    from simdist.layers import ModelProfile

__all__ = ["calibrate", "compulsory_traffic", "layer_times", "step_time"]

#: Element size the profiles' byte counts assume.
PROFILE_ELEMENT_NBYTES = 4


def layer_times(
    profile: ModelProfile, device: DeviceProfile, precision: str
) -> list[tuple[float, float]]:
    """(forward_s, backward_s) of every layer of ``profile``, in its forward order.

    ``precision`` selects the device's peak (its own ``peak_flops`` / ``efficiency`` when it
    is the device's precision, so scenario overrides count). A layer whose source gave its
    times (``forward_s`` and ``backward_s``, e.g. an ASTRA-sim file) keeps them as they are.
    """
    try:
        peak = device.peak(precision)
    except KeyError as exc:
        raise SimdistError(str(exc.args[0])) from None
    flops_per_s = peak.flops * peak.efficiency
    bytes_per_s = device.achieved_bandwidth_Bps
    if flops_per_s <= 0 or bytes_per_s <= 0:
        raise SimdistError(
            f"device profile {device.name!r} reaches {flops_per_s:g} FLOP/s and "
            f"{bytes_per_s:g} bytes/s at {precision}; both must be positive"
        )
    byte_scale = ELEMENT_NBYTES[precision] / PROFILE_ELEMENT_NBYTES
    launch = device.launch_s

    def seconds(flops: float, nbytes: float) -> float:
        return max(flops / flops_per_s, nbytes * byte_scale / bytes_per_s) + launch

    times = []
    for layer, (forward_nbytes, backward_nbytes) in zip(
        profile.layers, compulsory_traffic(profile), strict=True
    ):
        if layer.forward_s is not None and layer.backward_s is not None:
            times.append((float(layer.forward_s), float(layer.backward_s)))
        else:
            times.append(
                (
                    seconds(layer.forward_flops, forward_nbytes),
                    seconds(layer.backward_flops, backward_nbytes),
                )
            )
    return times


def compulsory_traffic(profile: ModelProfile) -> list[tuple[float, float]]:
    """(forward, backward) DRAM bytes of every layer run as fused kernels (module docstring).

    A layer's input is the previous layer's output (the first layer's: the batch of
    inputs, 4 bytes per element). Without activation sizes (``output_nbytes`` 0, or no
    batch size) the profile's own byte counts are used.
    """
    batch, shape = profile.batch_size, profile.input_shape
    previous = float(batch * math.prod(shape) * PROFILE_ELEMENT_NBYTES) if batch and shape else 0.0
    traffic = []
    for layer in profile.layers:
        out, params = float(layer.output_nbytes), float(layer.param_nbytes)
        if out > 0 and previous > 0:
            # forward: read input + params, write output; backward: read input, output
            # gradient and params, write input gradient and parameter gradient.
            traffic.append((previous + params + out, 2 * previous + out + 2 * params))
        else:
            traffic.append((float(layer.forward_bytes), float(layer.backward_bytes)))
        previous = out
    return traffic


def step_time(times: Sequence[tuple[float, float]]) -> float:
    """One replica's step: every layer's forward and backward, summed exactly (``math.fsum``)."""
    return math.fsum(t for pair in times for t in pair)


def calibrate(times: Sequence[tuple[float, float]], step_s: float) -> list[tuple[float, float]]:
    """``times`` scaled by one factor so that :func:`step_time` of the result is ``step_s``.

    The product of each time with the factor is rounded; the rounding left over is added to
    the longest time, so the exact sum equals ``step_s`` to the last bit.
    """
    if step_s <= 0:
        raise SimdistError(f"a calibrated step time must be positive, got {step_s!r} s")
    total = step_time(times)
    if not total > 0:
        raise SimdistError(
            "the model profile has no FLOPs, bytes or launch cost to scale: cannot calibrate "
            "it to a measured step time"
        )
    factor = step_s / total
    flat = [t * factor for pair in times for t in pair]
    longest = max(range(len(flat)), key=flat.__getitem__)
    for _ in range(4):
        residual = math.fsum([step_s, *(-t for t in flat)])
        if residual == 0:
            break
        flat[longest] += residual
    return [(flat[2 * i], flat[2 * i + 1]) for i in range(len(times))]
