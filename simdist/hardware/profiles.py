"""Device profiles as data: roofline figures of each device kind, every one with its source.

Pure data (no SimPy, no JAX), so that loading a scenario can check a profile name and a
precision, and ``simdist list`` can print the table without building a cluster.

A profile holds what the roofline of :mod:`simdist.hardware.roofline` needs: the memory bandwidth,
and per arithmetic precision a datasheet peak and the *efficiency*, the share of that peak a
compute-bound layer reaches, taken from a published measurement. The memory efficiency is the
share of the datasheet bandwidth a streaming kernel reaches, also measured. Where no
measurement of that device and precision was found, the entry says ``assumed`` and whose
measured figure it borrows; nothing is tuned to make one scenario come out right.

How the efficiencies were derived from throughput measurements (``img/s``): one ResNet-50
training image costs forward + backward = 3 × the forward pass, and a forward pass costs
2 × its multiply-adds, so 6 × 4.09e9 = 24.5 GFLOP for ResNet-50 v1.5 (torchvision's count,
the model of NVIDIA's DeepLearningExamples) and 6 × 3.8e9 = 22.8 GFLOP for ResNet-50 v1
(He et al. 2016, Table 1; the model of tf_cnn_benchmarks). Efficiency = img/s × GFLOP/img /
peak. Transformer measurements are quoted as the paper's own share of peak (model FLOPs
utilisation).

The FP32 GPU efficiencies (K80, P100, V100) are instead *fitted through the roofline*: each is
the efficiency at which :func:`simdist.hardware.roofline.fit_efficiency` runs the zoo's ResNet-50 v1
(``profile_model("resnet50_v1", batch)``, the model tf_cnn_benchmarks measures) at one
published single-GPU rate, with cuDNN's Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions
and batch norm / bias / ReLU as kernels of their own (``cudnn=True``; see
:mod:`simdist.hardware.roofline`), then frozen to three digits. Counting every
FLOP as a direct one gave 0.27 / 0.47 / 0.595, which made VGG-16 (99 % 3x3 stride-1
convolutions) 54-62 % slow; benchmarks/validation/single_gpu.py predicts the other models
from these three numbers.

Sources, cited by key in the entries below:

* ``[DLE-RN50]`` NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/
  README.md, "Training performance results" (1 GPU): DGX-1 V100 16GB FP32 380.44 img/s
  (pytorch-19.10); DGX A100 80GB TF32 938 img/s, mixed precision 2470 img/s (pytorch-21.03).
  The same README's later V100 figure (367 img/s, 21.03) gives 0.57 and the TensorFlow README
  (FP32 + XLA, 412 img/s) gives 0.64: "about 60 %".
* ``[TF-BENCH]`` TensorFlow performance benchmarks, tensorflow/docs_src/performance/
  benchmarks.md (May 2017), ResNet-50, synthetic data, 1 GPU, batch 64: DGX-1 P100 219 img/s;
  Google Compute Engine K80 51.9 img/s.
* ``[LAMBDA-TF]`` Lambda Labs, lambda-tensorflow-benchmark (github.com/lambdal/
  lambda-tensorflow-benchmark, commit 6595db3e, logs_named/V100.logs/
  syn-replicated-fp32-1gpus/resnet50-192/throughput/1): tf_cnn_benchmarks, TensorFlow 2.2,
  Tesla V100-SXM3-32GB, FP32, synthetic data, batch 192: 432.16 img/s. An SXM3 part (boost
  1597 MHz against the SXM2's 1530): the fitted share absorbs those 4 %.
* ``[MEGATRON]`` Shoeybi et al. 2019, "Megatron-LM", arXiv:1909.08053, Sec. 1 and 5.1: a
  1.2B GPT on one V100 SXM3 32GB sustains 39 TFLOP/s in mixed precision, "30% of the
  theoretical peak FLOPS for a single GPU as configured in a DGX-2H server" (Sec. 5: 32
  DGX-2H servers). That peak is 130 TFLOP/s (39 / 0.30; NV-ADLR's "MegatronLM's
  Supercharged V1.0" post: 62.4 TFLOP/s "is 48%" of it), not the V100 SXM2's 125: the share
  0.30, not the rate, is what carries to another V100's peak (on 125, 37.5 TFLOP/s). The
  paper states no FLOP count; that run on this profile (40 layers, h = 1536, 8 sequences of
  1,024 tokens, every layer checkpointed as its Sec. 4.2 says) gives 36.7 TFLOP/s counted
  with Narayanan et al. 2021's recomputation formula.
* ``[MEGATRON-2]`` Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
  GPU Clusters", SC21, arXiv:2104.04473: 163 TFLOP/s per A100, 52 % of the 312 TFLOP/s peak.
* ``[LLAMA3]`` Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 4:
  38-43 % BF16 model FLOPs utilisation on 8K-16K H100s (43 % is the best configuration).
* ``[PALM]`` Chowdhery et al. 2022, "PaLM", arXiv:2204.02311, Table 3: 46.2 % model FLOPs
  utilisation on TPU v4.
* ``[MEMCOPY]`` Sandip et al., FastIceFlo (github.com/AnjaliSandip/FastIceFlo,
  output/EffectiveMemoryThroughput.md): a memory-copy kernel reaches 785 GB/s on a V100 SXM2
  16GB (of 900) and 1536 GB/s on an A100 SXM4 80GB (of 2039).
* ``[CUDA-GRAPHS]`` NVIDIA Technical Blog, "Getting Started with CUDA Graphs" (A. Gray, 2019):
  back-to-back launches of short kernels on a V100 cost a few microseconds each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "DEVICE_PROFILES",
    "PRECISIONS",
    "DeviceProfile",
    "Precision",
    "PrecisionPeak",
]

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
#: Every precision a scenario may name (``cluster.device.precision``).
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
#: Bytes of one element as tensors are held and moved at each precision (tf32 is stored as
#: float32). ``fp8`` is TransformerEngine's recipe (:mod:`simdist.hardware.fp8`): only the
#: linear layers' GEMMs run in FP8; activations, gradients, weights and collectives stay
#: BF16, so its tensors are 2 bytes.
ELEMENT_NBYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2}
#: What the work outside the FP8 GEMMs runs in, per precision that has such GEMMs.
FP8_REST_PRECISION = "bf16"


@dataclass(frozen=True)
class PrecisionPeak:
    """One precision of one device: its datasheet peak and the measured share of it."""

    precision: str
    flops: float  # FLOP/s, dense (no structured sparsity)
    efficiency: float  # share of ``flops`` a compute-bound layer reaches
    source: str  # where ``efficiency`` comes from
    # layers run as cuDNN kernels op by op, as TensorFlow without XLA runs them: 3x3 stride-1
    # convolutions as Winograd F(4x4, 3x3), batch norm / bias / ReLU apart
    # (simdist.hardware.roofline)
    cudnn: bool = False


@dataclass(frozen=True)
class DeviceProfile:
    """A device's roofline: peak FLOP/s at the selected precision, memory bandwidth, launch cost.

    ``peak_flops`` and ``efficiency`` are those of ``precision`` (the device's default unless a
    scenario selects another with :meth:`at_precision`); ``peaks`` lists every precision the
    device supports.
    """

    name: str
    kind: str  # "cpu" | "gpu" | "tpu"
    peak_flops: float  # FLOP/s at ``precision``
    efficiency: float  # share of ``peak_flops`` a compute-bound layer reaches
    source: str  # the datasheet of the figures below
    precision: str = "fp32"
    memory_bandwidth_Bps: float = 0.0  # datasheet bandwidth of the device memory
    memory_efficiency: float = 1.0  # share of it a streaming kernel reaches
    memory_nbytes: float = 0.0  # device memory capacity
    launch_s: float = 0.0  # fixed cost of every layer's forward and of its backward
    peaks: tuple[PrecisionPeak, ...] = ()
    memory_source: str = ""
    launch_source: str = ""

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions this device has a peak for."""
        return tuple(p.precision for p in self.peaks)

    def peak(self, precision: str) -> PrecisionPeak:
        """The datasheet peak and measured efficiency of ``precision``.

        For the profile's own ``precision`` this is ``peak_flops`` / ``efficiency``, so a
        scenario's overrides of those two (see :func:`simdist.hardware.cluster.effective_profile`)
        count.
        """
        if precision == self.precision:
            own = next((p for p in self.peaks if p.precision == precision), None)
            source, cudnn = (own.source, own.cudnn) if own else ("", False)
            return PrecisionPeak(precision, self.peak_flops, self.efficiency, source, cudnn)
        for p in self.peaks:
            if p.precision == precision:
                return p
        raise KeyError(
            f"device profile {self.name!r} has no {precision} peak; "
            f"expected one of {', '.join(self.precisions)}"
        )

    def at_precision(self, precision: str) -> DeviceProfile:
        """This device computing in ``precision``: its peak and efficiency selected."""
        if precision == self.precision:
            return self
        p = self.peak(precision)
        return replace(self, precision=precision, peak_flops=p.flops, efficiency=p.efficiency)

    @property
    def achieved_bandwidth_Bps(self) -> float:
        """Memory bandwidth a streaming kernel reaches: datasheet × memory efficiency."""
        return self.memory_bandwidth_Bps * self.memory_efficiency


def _profile(
    name: str,
    kind: str,
    default: str,
    peaks: tuple[PrecisionPeak, ...],
    *,
    source: str,
    bandwidth_Bps: float,
    memory_efficiency: float,
    memory_nbytes: float,
    launch_s: float,
    memory_source: str,
    launch_source: str,
) -> DeviceProfile:
    first = next(p for p in peaks if p.precision == default)
    return DeviceProfile(
        name=name,
        kind=kind,
        peak_flops=first.flops,
        efficiency=first.efficiency,
        source=source,
        precision=default,
        memory_bandwidth_Bps=bandwidth_Bps,
        memory_efficiency=memory_efficiency,
        memory_nbytes=memory_nbytes,
        launch_s=launch_s,
        peaks=peaks,
        memory_source=memory_source,
        launch_source=launch_source,
    )


# ResNet-50 training FLOPs per image (see the module docstring).
_RN50_V15_FLOP = 6 * 4.09e9
_RN50_V1_FLOP = 6 * 3.8e9
# FP32 efficiencies fitted through the roofline on ResNet-50 (module docstring).
_K80_FP32 = 0.205  # [TF-BENCH] 51.9 img/s, batch 64
_P100_FP32 = 0.384  # [TF-BENCH] 219 img/s, batch 64
_V100_FP32 = 0.613  # [LAMBDA-TF] 432.16 img/s, batch 192
# V100 memory copy: 785 of 900 GB/s [MEMCOPY].
_V100_MEMORY = 785e9 / 900e9
_GPU_LAUNCH_S = 5e-6
_GPU_LAUNCH = "[CUDA-GRAPHS]: a few us per kernel launch; 5 us per layer pass"
_ASSUMED_MEMORY = f"assumed: V100's measured {_V100_MEMORY:.3f} [MEMCOPY]"

# NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s FP32, 125 TFLOP/s tensor (FP16),
# 900 GB/s, 16 GB (also sold with 32 GB).
_V100 = _profile(
    "v100",
    "gpu",
    "fp32",
    (
        PrecisionPeak(
            "fp32",
            15.7e12,
            _V100_FP32,
            "[LAMBDA-TF] ResNet-50 432.16 img/s on one V100, fitted through the roofline",
            cudnn=True,
        ),
        PrecisionPeak(
            "fp16", 125e12, 0.30, "[MEGATRON] 39 TFLOP/s, 30 % of a DGX-2H V100's peak -> 0.30"
        ),
    ),
    source="NVIDIA V100 SXM2 datasheet",
    bandwidth_Bps=900e9,
    memory_efficiency=_V100_MEMORY,
    memory_nbytes=16e9,
    launch_s=_GPU_LAUNCH_S,
    memory_source="[MEMCOPY] 785 of 900 GB/s",
    launch_source=_GPU_LAUNCH,
)


DEVICE_PROFILES: dict[str, DeviceProfile] = {
    # Intel 64 and IA-32 Architectures Optimization Reference Manual, ch. 2: 4 cores x 3 GHz x
    # 32 FP32 FLOP/cycle (two AVX2 FMA units x 8 lanes x 2); JEDEC DDR4-3200, 2 channels x
    # 8 bytes x 3.2 GT/s = 51.2 GB/s; 32 GB of memory (a typical desktop).
    "cpu": _profile(
        "cpu",
        "cpu",
        "fp32",
        (
            PrecisionPeak(
                "fp32", 384e9, 0.3, "assumed: no published training measurement of this CPU"
            ),
        ),
        source="4 cores x 3 GHz x 32 FLOP/cycle (AVX2 FMA); 2 x DDR4-3200",
        bandwidth_Bps=51.2e9,
        memory_efficiency=_V100_MEMORY,
        memory_nbytes=32e9,
        launch_s=0.0,
        memory_source=_ASSUMED_MEMORY,
        launch_source="none: XLA runs the step as one compiled program",
    ),
    # NVIDIA Tesla K80 datasheet: per board 8.73 TFLOP/s FP32 (boost), 480 GB/s, 24 GB GDDR5
    # on two GK210 GPUs; a "k80" here is one GPU (what a cloud instance calls a K80): half.
    "k80": _profile(
        "k80",
        "gpu",
        "fp32",
        (
            PrecisionPeak(
                "fp32",
                4.365e12,
                _K80_FP32,
                "[TF-BENCH] ResNet-50 51.9 img/s on one GCE K80, fitted through the roofline",
                cudnn=True,
            ),
        ),
        source="NVIDIA Tesla K80 datasheet, one of the board's two GK210 GPUs",
        bandwidth_Bps=240e9,
        memory_efficiency=_V100_MEMORY,
        memory_nbytes=12e9,
        launch_s=_GPU_LAUNCH_S,
        memory_source=_ASSUMED_MEMORY,
        launch_source=_GPU_LAUNCH,
    ),
    # NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOP/s FP32, 21.2 TFLOP/s FP16, 732 GB/s, 16 GB.
    "p100": _profile(
        "p100",
        "gpu",
        "fp32",
        (
            PrecisionPeak(
                "fp32",
                10.6e12,
                _P100_FP32,
                "[TF-BENCH] ResNet-50 219 img/s on one DGX-1 P100, fitted through the roofline",
                cudnn=True,
            ),
            PrecisionPeak(
                "fp16",
                21.2e12,
                219 * _RN50_V1_FLOP / 10.6e12,
                "assumed: the FP32 measurement's share, FLOPs counted direct [TF-BENCH] -> 0.47",
            ),
        ),
        source="NVIDIA Tesla P100 SXM2 datasheet",
        bandwidth_Bps=732e9,
        memory_efficiency=_V100_MEMORY,
        memory_nbytes=16e9,
        launch_s=_GPU_LAUNCH_S,
        memory_source=_ASSUMED_MEMORY,
        launch_source=_GPU_LAUNCH,
    ),
    "v100": _V100,
    # The same V100 SXM2 with 32 GB of HBM2 (datasheet), as in DGX-2 nodes (the ZeRO
    # paper's 400 GPUs, Rajbhandari et al. 2020 Sec. 10.1): the v100's figures.
    "v100-32gb": replace(
        _V100,
        name="v100-32gb",
        source="NVIDIA V100 SXM2 datasheet (32 GB)",
        memory_nbytes=32e9,
    ),
    # NVIDIA A100 datasheet (SXM4 80GB): 19.5 TFLOP/s FP32, 156 TFLOP/s TF32 and 312 TFLOP/s
    # FP16/BF16 tensor (dense), 2039 GB/s HBM2e, 80 GB.
    "a100": _profile(
        "a100",
        "gpu",
        "fp32",
        (
            PrecisionPeak(
                "fp32",
                19.5e12,
                _V100_FP32,
                "assumed: V100's FP32 share 0.613 [LAMBDA-TF]",
                cudnn=True,
            ),
            PrecisionPeak(
                "tf32",
                156e12,
                938 * _RN50_V15_FLOP / 156e12,
                "[DLE-RN50] ResNet-50 TF32 938 img/s on one DGX A100 GPU -> 0.147",
            ),
            PrecisionPeak("fp16", 312e12, 0.52, "[MEGATRON-2] 163 TFLOP/s per A100 -> 0.52"),
            PrecisionPeak("bf16", 312e12, 0.52, "[MEGATRON-2] 163 TFLOP/s per A100 -> 0.52"),
        ),
        source="NVIDIA A100 SXM4 80GB datasheet",
        bandwidth_Bps=2039e9,
        memory_efficiency=1536e9 / 2039e9,
        memory_nbytes=80e9,
        launch_s=_GPU_LAUNCH_S,
        memory_source="[MEMCOPY] 1536 of 2039 GB/s",
        launch_source=_GPU_LAUNCH,
    ),
    # NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32; dense tensor 494.7 TFLOP/s TF32,
    # 989.4 TFLOP/s FP16/BF16 and 1,979 TFLOP/s FP8 (the datasheet's 989 / 1,979 / 3,958 are
    # with sparsity); 3.35 TB/s HBM3, 80 GB.
    "h100": _profile(
        "h100",
        "gpu",
        "fp32",
        (
            PrecisionPeak(
                "fp32",
                67e12,
                _V100_FP32,
                "assumed: V100's FP32 share 0.613 [LAMBDA-TF]",
                cudnn=True,
            ),
            PrecisionPeak(
                "tf32",
                494.7e12,
                938 * _RN50_V15_FLOP / 156e12,
                "assumed: A100's TF32 share 0.147 [DLE-RN50]",
            ),
            PrecisionPeak("fp16", 989.4e12, 0.43, "[LLAMA3] 43 % BF16 MFU on H100"),
            PrecisionPeak("bf16", 989.4e12, 0.43, "[LLAMA3] 43 % BF16 MFU on H100"),
            # Not fitted: no FP8 measurement calibrates it (docs/VALIDATION.md's FP8 rows
            # test it).
            PrecisionPeak("fp8", 1979e12, 0.43, "assumed: the bf16 share [LLAMA3] 0.43"),
        ),
        source="NVIDIA H100 SXM5 datasheet (dense peaks)",
        bandwidth_Bps=3.35e12,
        memory_efficiency=1536e9 / 2039e9,
        memory_nbytes=80e9,
        launch_s=_GPU_LAUNCH_S,
        memory_source="assumed: A100's measured 0.753 [MEMCOPY]",
        launch_source=_GPU_LAUNCH,
    ),
    # Google Cloud TPU v4 documentation (system architecture): 275 TFLOP/s bf16 per chip,
    # 32 GiB HBM2 at 1200 GB/s. Matrix units compute in bf16 (float32 matmuls are emulated
    # with several bf16 passes), so bf16 is the only precision given.
    "tpu-v4": _profile(
        "tpu-v4",
        "tpu",
        "bf16",
        (PrecisionPeak("bf16", 275e12, 0.462, "[PALM] 46.2 % MFU on TPU v4"),),
        source="Cloud TPU v4 docs, bf16 per chip",
        bandwidth_Bps=1200e9,
        memory_efficiency=_V100_MEMORY,
        memory_nbytes=32 * 2**30,
        launch_s=0.0,
        memory_source=_ASSUMED_MEMORY,
        launch_source="none: XLA runs the step as one compiled program",
    ),
}
