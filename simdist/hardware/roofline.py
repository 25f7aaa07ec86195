"""The roofline: how long each layer of a model takes on a device, and calibration to a measure.

Pure arithmetic on a :class:`~simdist.layers.ModelProfile` (per-layer FLOPs and bytes of the
whole per-replica batch) and a :class:`~simdist.hardware.profiles.DeviceProfile`: no SimPy, no JAX.

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

What the GPU executes for 3×3 convolutions. cuDNN, which TensorFlow's and PyTorch's GPU
convolutions call with autotuning on (TensorFlow: ``TF_CUDNN_USE_AUTOTUNE`` defaults to true,
tensorflow/core/util/use_cudnn.cc), runs 3×3 stride-1 convolutions with Winograd's minimal
filtering algorithm, non-fused, in all three passes (forward, backward data, backward filter:
cuDNN 5.1 release notes, ``*_ALGO_WINOGRAD_NONFUSED`` for 3×3 and 5×5 filters; TensorFlow
offers them to the autotuner when ``TF_ENABLE_WINOGRAD_NONFUSED`` is set, which
tf_cnn_benchmarks does by default: tensorflow/benchmarks commit 9165a70, the one its published
tables ran, scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py, flag ``winograd_nonfused``,
default True). F(4×4, 3×3)
computes each 4×4 output tile from a 6×6 input tile with 36 multiplications where the direct
convolution needs 144: a quarter of the arithmetic (Lavin & Gray 2016, "Fast Algorithms for
Convolutional Neural Networks", CVPR, Sec. 4). Non-fused, the transforms are separate,
memory-bound kernels: the input transform reads the input and writes it expanded by 36/16,
the output transform reads the expanded product and writes the output. So on a precision
whose peak says ``cudnn`` (fp32 on the GPUs), a layer's ``conv3x3_flops`` are priced at a
quarter, and (1 + 36/16) × the bytes of those convolutions' inputs and outputs are added, in
series, per pass. The backward pass runs two such convolutions per forward one (input and
weight gradient; one for a first layer, whose backward is the weight gradient alone).

What else runs apart. The same frameworks, without XLA, launch a layer's batch norm, bias
addition and ReLU as kernels of their own, which stream their tensors through DRAM in series
with the convolutions; the fused compulsory traffic leaves them out. A profile's
``elementwise_forward_nbytes`` / ``elementwise_backward_nbytes``
(:mod:`simdist.numerics.elementwise`) are added in series too. Both apply on a precision
whose peak says ``cudnn`` (fp32 on the GPUs); tensor-core precisions, the CPU and the TPU
(XLA, fused) keep the direct, fused pricing.
Without this, VGG-16 (99 % of its FLOPs in 3×3 stride-1 convolutions) would need more than
the P100's peak to reach its published 154 img/s; an efficiency fitted on ResNet-50 (35 %)
came out 62 % slow on VGG-16.

FP8 (:mod:`simdist.hardware.fp8`). At ``fp8`` a layer's linear GEMMs (its
:class:`~simdist.hardware.fp8.Fp8Gemms`) run at the device's ``fp8`` peak and the rest of
its FLOPs at ``bf16``, one after the other; the casts to FP8 that feed the GEMMs are added in
series at the memory bandwidth. A layer without FP8 GEMMs runs wholly at ``bf16``.

Calibration (:func:`calibrate`) scales every layer's times by one factor so that one device's
step takes a measured time exactly: the profile then only says how the step is shared
between the layers, which is how a user who has measured one GPU predicts many.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from simdist.errors import SimdistError
from simdist.hardware.profiles import ELEMENT_NBYTES, FP8_REST_PRECISION, DeviceProfile

if TYPE_CHECKING:
    from simdist.hardware.fp8 import Fp8Gemms
    from simdist.layers import LayerProfile, ModelProfile

__all__ = [
    "WINOGRAD_REDUCTION",
    "WINOGRAD_TRANSFORM_TRAFFIC",
    "achieved_flops_per_s",
    "calibrate",
    "compulsory_traffic",
    "fit_efficiency",
    "layer_times",
    "step_time",
]

#: Element size the profiles' byte counts assume.
PROFILE_ELEMENT_NBYTES = 4
#: Direct multiplications per Winograd one for F(4×4, 3×3): 144 / 36 (Lavin & Gray 2016, Sec. 4).
WINOGRAD_REDUCTION = 4.0
#: DRAM bytes of the non-fused transforms per byte of a convolution's input and output: each
#: is read (written) once and written (read) expanded to 6×6 per 4×4 tile, 36/16.
WINOGRAD_TRANSFORM_TRAFFIC = 1.0 + 36.0 / 16.0


def achieved_flops_per_s(device: DeviceProfile, precision: str) -> float:
    """The FLOP/s ``device`` reaches at ``precision``: its peak × efficiency, positive."""
    try:
        peak = device.peak(precision)
    except KeyError as exc:
        raise SimdistError(str(exc.args[0])) from None
    flops_per_s = peak.flops * peak.efficiency
    if flops_per_s <= 0 or device.achieved_bandwidth_Bps <= 0:
        raise SimdistError(
            f"device profile {device.name!r} reaches {flops_per_s:g} FLOP/s and "
            f"{device.achieved_bandwidth_Bps:g} bytes/s at {precision}; both must be positive"
        )
    return flops_per_s


def layer_times(
    profile: ModelProfile,
    device: DeviceProfile,
    precision: str,
    fp8: Sequence[Fp8Gemms | None] | None = None,
) -> list[tuple[float, float]]:
    """(forward_s, backward_s) of every layer of ``profile``, in its forward order.

    ``precision`` selects the device's peak (its own ``peak_flops`` / ``efficiency`` when it
    is the device's precision, so scenario overrides count). A layer whose source gave its
    times (``forward_s`` and ``backward_s``, e.g. an ASTRA-sim file) keeps them as they are.
    At ``fp8``, ``fp8`` gives each layer's FP8 GEMMs (None: none; module docstring); every
    other FLOP runs at ``bf16``.
    """
    flops_per_s = achieved_flops_per_s(device, precision)
    peak = device.peak(precision)
    rest_per_s = flops_per_s
    gemms: Sequence[Fp8Gemms | None] = [None] * len(profile.layers)
    if precision == "fp8":
        rest_per_s = achieved_flops_per_s(device, FP8_REST_PRECISION)
        gemms = fp8 if fp8 is not None else gemms
    bytes_per_s = device.achieved_bandwidth_Bps
    byte_scale = ELEMENT_NBYTES[precision] / PROFILE_ELEMENT_NBYTES
    launch = device.launch_s

    def seconds(
        flops: float, nbytes: float, serial_nbytes: float, fast_flops: float, cast_nbytes: float
    ) -> float:
        fast = min(fast_flops, flops)
        compute = fast / flops_per_s + (flops - fast) / rest_per_s
        memory = nbytes * byte_scale / bytes_per_s
        serial = serial_nbytes * byte_scale / bytes_per_s  # kernels of their own, in series
        return max(compute, memory) + serial + cast_nbytes / bytes_per_s + launch

    times = []
    for layer, (forward_nbytes, backward_nbytes), g in zip(
        profile.layers, compulsory_traffic(profile), gemms, strict=True
    ):
        if layer.forward_s is not None and layer.backward_s is not None:
            times.append((float(layer.forward_s), float(layer.backward_s)))
            continue
        forward, backward = executed(layer, peak.cudnn)
        if g is None:  # at fp8 all of it at bf16; else all of it at the precision's peak
            fast = (forward[0], backward[0]) if precision != "fp8" else (0.0, 0.0)
            casts = (0.0, 0.0)
        else:
            fast = (g.forward_flops, g.backward_flops)
            casts = (g.forward_cast_nbytes, g.backward_cast_nbytes)
        times.append(
            (
                seconds(forward[0], forward_nbytes, forward[1], fast[0], casts[0]),
                seconds(backward[0], backward_nbytes, backward[1], fast[1], casts[1]),
            )
        )
    return times


def executed(layer: LayerProfile, cudnn: bool) -> tuple[tuple[float, float], tuple[float, float]]:
    """((FLOPs, bytes in series) of the forward, of the backward) that the device executes.

    Without ``cudnn`` the profile's FLOPs and nothing in series. With it (module docstring),
    the layer's 3×3 stride-1 convolutions run as F(4×4, 3×3) — the backward holds two such
    convolutions per forward one, at most its FLOPs — and the bytes in series are their
    transforms' and those of the layer's batch norm, bias and ReLU kernels.
    """
    if not cudnn:
        return (layer.forward_flops, 0.0), (layer.backward_flops, 0.0)
    forward_serial = layer.elementwise_forward_nbytes
    backward_serial = layer.elementwise_backward_nbytes
    direct = layer.conv3x3_flops
    if direct <= 0:
        return (layer.forward_flops, forward_serial), (layer.backward_flops, backward_serial)
    backward = min(2 * direct, layer.backward_flops)
    transform = WINOGRAD_TRANSFORM_TRAFFIC * layer.conv3x3_nbytes
    return (
        (layer.forward_flops - direct + direct / WINOGRAD_REDUCTION, transform + forward_serial),
        (
            layer.backward_flops - backward + backward / WINOGRAD_REDUCTION,
            transform * backward / direct + backward_serial,
        ),
    )


def fit_efficiency(
    profile: ModelProfile, device: DeviceProfile, precision: str, examples_per_s: float
) -> float:
    """The efficiency at which ``device``'s roofline runs ``profile`` at ``examples_per_s``.

    How a device constant is derived from one published rate (simdist/hardware/profiles.py): the
    step time falls as the efficiency rises, so bisection finds it (to 1e-12 of the bracket).
    """
    if not profile.batch_size or examples_per_s <= 0:
        raise SimdistError("fitting an efficiency needs a profile with a batch size and a rate")
    target_s = profile.batch_size / examples_per_s

    def step_s(efficiency: float) -> float:
        fitted = replace(device.at_precision(precision), efficiency=efficiency)
        return step_time(layer_times(profile, fitted, precision))

    low, high = 1e-6, 1.0
    if step_s(high) > target_s:
        raise SimdistError(
            f"{profile.model} cannot reach {examples_per_s:g} examples/s on {device.name} at "
            f"{precision} even at the full peak"
        )
    while high - low > 1e-12:
        middle = (low + high) / 2
        low, high = (middle, high) if step_s(middle) > target_s else (low, middle)
    return high


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
