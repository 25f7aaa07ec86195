"""Validation cases: single gpu (see validation/__init__.py for the rules).

One GPU training a full-size model in fp32 on synthetic data, as tf_cnn_benchmarks measures
it: simdist's uncalibrated roofline (simdist/hardware/roofline.py) on the device profile, with the
per-device efficiency fitted on that device's ResNet-50 row (simdist/hardware/profiles.py) and
frozen.
"""

from __future__ import annotations

from functools import partial

from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.hardware.roofline import layer_times, step_time
from simdist.numerics.profile import profile_model
from validation import Case

TITLE = "single gpu"

TEXT = """
One GPU, fp32, synthetic data: images per second of the uncalibrated roofline against
tf_cnn_benchmarks. One efficiency per device is fitted on that device's ResNet-50 row and
frozen (simdist/hardware/profiles.py); the other three models on each device are predicted.

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

**What else runs apart.** Without XLA, TensorFlow launches every batch norm, bias addition and
ReLU as a kernel of its own, streaming its tensors through DRAM in series with the
convolutions; the roofline's fused "compulsory traffic" ignored them. Priced now, they are 18
% of ResNet-50's P100 step against 9 % of VGG-16's and 10 % of Inception V3's, so the
efficiency fitted on ResNet-50 had absorbed them as slowness of its arithmetic.

**What was wrong.** The roofline priced every FLOP as a direct one and every layer as fused,
with one efficiency per device fitted on ResNet-50. That efficiency hid both ResNet-50's
Winograd saving (a third to a half of its FLOPs are 3×3 stride-1) and its batch-norm traffic,
and VGG-16 came out 54–62 % slow (P100 56 img/s against 154). And the zoo's ResNet-50 is
torchvision's v1.5 (stride on the 3×3) where tf_cnn_benchmarks builds v1 (stride on the first
1×1, every 3×3 stride 1): `resnet50_v1` and `resnet152_v1` are now in the zoo for these rows.
Each layer profile now carries the FLOPs of its 3×3 stride-1 convolutions with the bytes of
their inputs and outputs (simdist/numerics/conv3x3.py) and the DRAM bytes of its batch norm,
bias and ReLU kernels (simdist/numerics/elementwise.py), all counted on shapes; on the
precisions that run as cuDNN kernels op by op (fp32 on the GPUs) the roofline prices the first
at a quarter plus the transforms' traffic, and adds the second, in series. The refitted
efficiencies: K80 0.27 → 0.205, P100 0.47 → 0.384, V100 0.595 → 0.613 (now fitted on the same
source as the V100's other rows; it was NVIDIA's PyTorch ResNet-50 v1.5).

**Sources and stand-ins.** K80 and P100: tensorflow/tensorflow r1.x
`tensorflow/docs_src/performance/benchmarks.md` (May 2017, cuDNN 5.1): the DGX-1 P100 and
Google Compute Engine K80 "Training synthetic data" tables, at their published batch sizes
(K80: VGG16 and ResNet-152 at 32). V100: Lambda Labs' tf_cnn_benchmarks logs
(github.com/lambdal/lambda-tensorflow-benchmark, commit 6595db3e,
`logs_named/V100.logs/syn-replicated-fp32-1gpus/<model>-<batch>/throughput/1`, TensorFlow 2.2
without XLA, V100-SXM3-32GB, batch 192, ResNet-152 96). No published single-GPU ResNet-101
rate of these runs was found, so each device's ResNet-101 cell is the same source's
ResNet-152.

**Cross-check.** The zoo's ResNet-50 v1.5 on the V100 at fp32 (batch 192) comes out at 380
img/s; NVIDIA's DeepLearningExamples publish 380.44 img/s for it in PyTorch, which also runs
cuDNN op by op (PyTorch/Classification/ConvNets/resnet50v1.5/README.md, 1-GPU FP32 training,
the source of the V100's former efficiency).

**What is left.** VGG-16 comes out 1–15 % slow and Inception V3 1–9 % fast: the efficiency is
one number for every kind of convolution, where VGG-16's large 3×3 layers run closer to peak
and Inception V3's small and asymmetric (1×7, 7×1, 1×3, 3×1) ones further from it; the 5×5 and
asymmetric ones are priced as direct. Residual additions, concatenations and pooling are not
counted among the unfused kernels.
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
    "vgg16": (
        "VGG-16's large 3×3 convolutions run closer to peak than the efficiency fitted on "
        "ResNet-50 says (see the text)"
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
        expect_within_pct=20.0 if model == "vgg16" else 15.0,
        note=_NOTES.get(model, ""),
    )


CASES: list[Case] = [_case(*key) for key in PUBLISHED]
