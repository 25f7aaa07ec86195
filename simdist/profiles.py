"""Device profiles as data: the peak arithmetic rate of each device kind, with its source.

Pure data (no SimPy, no JAX), so that loading a scenario can check a profile name and
``simdist list`` can print the table without building a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProfile:
    """Peak arithmetic rate of one device and the share of it a training step reaches."""

    name: str
    kind: str  # "cpu" | "gpu" | "tpu"
    peak_flops: float  # FLOP/s
    efficiency: float  # fraction of peak reached by a training step
    source: str


DEVICE_PROFILES: dict[str, DeviceProfile] = {
    # 4 cores x 3 GHz x 32 FP32 FLOP/cycle (two AVX2 FMA units x 8 lanes x 2),
    # Intel 64 and IA-32 Architectures Optimization Reference Manual, ch. 2.
    "cpu": DeviceProfile("cpu", "cpu", 384e9, 0.3, "4 cores x 3 GHz x 32 FLOP/cycle (AVX2 FMA)"),
    # NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s single precision.
    "v100": DeviceProfile("v100", "gpu", 15.7e12, 0.4, "NVIDIA V100 SXM2 datasheet, FP32"),
    # NVIDIA A100 datasheet: 19.5 TFLOP/s FP32 (non-tensor-core).
    "a100": DeviceProfile("a100", "gpu", 19.5e12, 0.4, "NVIDIA A100 datasheet, FP32"),
    # NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32.
    "h100": DeviceProfile("h100", "gpu", 67e12, 0.4, "NVIDIA H100 SXM datasheet, FP32"),
    # Google Cloud TPU v4 documentation: 275 TFLOP/s peak (bf16) per chip.
    "tpu-v4": DeviceProfile("tpu-v4", "tpu", 275e12, 0.5, "Cloud TPU v4 docs, bf16 per chip"),
}
