"""Validation cases: single gpu (see validation/__init__.py for the rules).

One GPU training a full-size model in fp32 on synthetic data, as tf_cnn_benchmarks measures
it: simdist's uncalibrated roofline (simdist/roofline.py) on the device profile, with the
per-device efficiency fitted on that device's ResNet-50 row (simdist/profiles.py) and frozen.
"""

from __future__ import annotations

from functools import partial

from simdist.numerics.profile import profile_model
from simdist.profiles import DEVICE_PROFILES
from simdist.roofline import layer_times, step_time
from validation import Case

TITLE = "single gpu"

TEXT = """
One GPU, fp32, synthetic data: images per second of the uncalibrated roofline against
tf_cnn_benchmarks. One efficiency per device is fitted on that device's ResNet-50 row and
frozen (simdist/profiles.py); the other three models on each device are predicted.

**What cuDNN runs.** TensorFlow autotunes every convolution (`TF_CUDNN_USE_AUTOTUNE` is on by
default) among cuDNN's algorithms: implicit GEMM, FFT and, since cuDNN 5.1, non-fused Winograd
for 3×3 (and 5×5) stride-1 convolutions in the forward, backward-data and backward-filter
passes — offered when `TF_ENABLE_WINOGRAD_NONFUSED` is set, which tf_cnn_benchmarks does by
default (`--winograd_nonfused=True`, tensorflow/benchmarks commit 9165a70, the benchmark hash
of the published tables). Winograd F(4×4, 3×3) computes a 4×4 output tile from a 6×6 input
tile with 36 multiplications where direct convolution needs 144 (Lavin & Gray 2016, "Fast
Algorithms for Convolutional Neural Networks", Sec. 4), so it executes a quarter of the FLOPs
the model "has"; non-fused, its input and output transforms are separate memory-bound kernels
that move the tensors through DRAM expanded by 36/16. The published VGG-16 rates (99 % of its
FLOPs in 3×3 stride-1 convolutions) imply about 14 TFLOP/s of direct arithmetic on a 10.6
TFLOP/s P100 (154 img/s × 90 GFLOP): impossible unless the GPU executes fewer FLOPs.

**What was wrong.** The roofline priced every FLOP as a direct one, with one efficiency per
device fitted on ResNet-50 (a third of its FLOPs in 3×3 stride-1 convolutions). That
efficiency absorbed ResNet-50's Winograd saving, and VGG-16, which has three times the share,
came out 54–62 % slow (P100 56 img/s against 154). Now each layer profile carries the FLOPs of
its 3×3 stride-1 convolutions and the bytes of their inputs and outputs (counted on shapes,
simdist/numerics/conv3x3.py); the roofline prices those FLOPs at a quarter and adds the
transforms' traffic in series, on the precisions where cuDNN runs Winograd (fp32 on the GPUs).
The refitted efficiencies are lower (K80 0.27 → 0.213, P100 0.47 → 0.373) because they no
longer hide the saving; the V100's (0.595 → 0.507) is now fitted on the same source as its
other rows (it was NVIDIA's PyTorch ResNet-50 v1.5).

**Sources and stand-ins.** K80 and P100: tensorflow/tensorflow r1.x
`tensorflow/docs_src/performance/benchmarks.md` (May 2017, cuDNN 5.1): the DGX-1 P100 and
Google Compute Engine K80 "Training synthetic data" tables, at their published batch sizes
(K80: VGG16 and ResNet-152 at 32). V100: Lambda Labs' tf_cnn_benchmarks logs
(github.com/lambdal/lambda-tensorflow-benchmark, commit 6595db3e,
`logs_named/V100.logs/syn-replicated-fp32-1gpus/<model>-<batch>/throughput/1`, TensorFlow 2.2,
V100-SXM3-32GB, batch 192, ResNet-152 96). No published single-GPU ResNet-101 rate of these
runs was found, so each device's ResNet-101 cell is the same source's ResNet-152 (added to the
zoo for it). ResNet-50 there is v1 (stride in the first 1×1); the zoo's is v1.5, which the
fitted efficiency absorbs.

**What is left.** Inception V3 comes out 9–22 % fast on all three GPUs, the K80 row (+22 %)
outside ±20 %: the roofline prices its many small and asymmetric (1×7, 7×1, 1×3, 3×1)
convolutions at the efficiency of ResNet-50's, and the 5×5 and asymmetric ones as direct. The
other suspect, TensorFlow 1.x running every batch norm, ReLU and addition as its own
memory-bound kernel (which the fused "compulsory traffic" ignores), does not explain it:
estimated from the activation sizes it is about a quarter of ResNet-50's P100 step and an
eighth of Inception V3's, so pricing it raises the fitted efficiency and makes Inception V3
faster still (with XLA's unfused byte counts as the traffic: +28 % on the K80, and VGG-16 +25
% on the V100).
"""

#: (device, model, batch) → published img/s. [TF] the tf_cnn_benchmarks page, [LAMBDA] the
#: Lambda Labs logs (TEXT says where each is).
PUBLISHED: dict[tuple[str, str, int], tuple[float, str]] = {
    ("k80", "resnet50_v1", 64): (51.9, "tf_cnn_benchmarks 2017, GCE K80"),
    ("k80", "vgg16", 32): (35.4, "tf_cnn_benchmarks 2017, GCE K80"),
    ("k80", "inception_v3", 64): (30.5, "tf_cnn_benchmarks 2017, GCE K80"),
    ("k80", "resnet152_v1", 32): (20.0, "tf_cnn_benchmarks 2017, GCE K80"),
    ("p100", "resnet50_v1", 64): (219.0, "tf_cnn_benchmarks 2017, DGX-1 P100"),
    ("p100", "vgg16", 64): (154.0, "tf_cnn_benchmarks 2017, DGX-1 P100"),
    ("p100", "inception_v3", 64): (142.0, "tf_cnn_benchmarks 2017, DGX-1 P100"),
    ("p100", "resnet152_v1", 64): (91.8, "tf_cnn_benchmarks 2017, DGX-1 P100"),
    ("v100", "resnet50_v1", 192): (432.16, "Lambda Labs tf_cnn_benchmarks, V100 SXM3"),
    ("v100", "vgg16", 192): (249.19, "Lambda Labs tf_cnn_benchmarks, V100 SXM3"),
    ("v100", "inception_v3", 192): (273.17, "Lambda Labs tf_cnn_benchmarks, V100 SXM3"),
    ("v100", "resnet152_v1", 96): (167.46, "Lambda Labs tf_cnn_benchmarks, V100 SXM3"),
}

_NAMES = {
    "resnet50_v1": "ResNet-50 v1",
    "vgg16": "VGG-16",
    "inception_v3": "Inception V3",
    "resnet152_v1": "ResNet-152 v1 (for ResNet-101)",
}
_QUICK = {("p100", "resnet50_v1", 64), ("p100", "vgg16", 64), ("k80", "vgg16", 32)}
_NOTES = {
    "inception_v3": (
        "Inception V3's small and asymmetric convolutions run below the efficiency fitted on "
        "ResNet-50, and its 5×5 / 1×3 / 3×1 ones are priced as direct (see the text)"
    ),
}


def images_per_s(device: str, model: str, batch: int) -> float:
    """The roofline's training throughput of ``model`` at ``batch`` on one ``device``, fp32."""
    profile = profile_model(model, batch)
    return batch / step_time(layer_times(profile, DEVICE_PROFILES[device], "fp32"))


def _case(device: str, model: str, batch: int) -> Case:
    published, source = PUBLISHED[(device, model, batch)]
    fitted = " (fits the efficiency)" if model == "resnet50_v1" else ""
    return Case(
        source=source,
        layout=f"1 × {device.upper()}, {_NAMES[model]}, batch {batch}, fp32{fitted}",
        quantity="img/s",
        published=published,
        predict=partial(images_per_s, device, model, batch),
        quick=(device, model, batch) in _QUICK,
        expect_within_pct=25.0 if model == "inception_v3" else 15.0,
        note=_NOTES.get(model, ""),
    )


CASES: list[Case] = [_case(*key) for key in PUBLISHED]
