"""What cuDNN executes for 3×3 convolutions, priced by the roofline: hand-checked.

One VGG-16 layer, conv3_2 (56×56×256 → 56×56×256, 3×3, stride 1, padding 1, bias, ReLU), at
batch 64 on a P100 in fp32. cuDNN runs it as non-fused Winograd F(4×4, 3×3): a quarter of the
direct multiplications (Lavin & Gray 2016, Sec. 4), plus input/output transforms that move
(1 + 36/16) × the convolution's input and output bytes through DRAM (simdist/hardware/roofline.py).
"""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import pytest

from simdist.errors import SimdistError
from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.hardware.roofline import executed, fit_efficiency, layer_times, step_time
from simdist.layers import LayerProfile, ModelProfile, read_profile, write_layers_csv
from simdist.numerics.conv3x3 import Conv3x3, count_conv3x3
from simdist.numerics.elementwise import Elementwise, count_elementwise
from simdist.numerics.fullsize import apply_layer
from simdist.numerics.fullsize.vgg import VGGConv
from simdist.numerics.profile import profile_model
from simdist.runtime.costs import scale_profile

BATCH, SIDE, CHANNELS = 64, 56, 256
ELEMENTS = BATCH * SIDE * SIDE * CHANNELS  # 51,380,224 per activation
# Direct FLOPs as XLA counts them: 2 per multiply-add, only the taps on the unpadded input:
# per spatial dimension 3 × 56 − 2 = 166 taps over the 56 outputs.
CONV_FLOPS = 2 * BATCH * 166 * 166 * CHANNELS * CHANNELS  # 231,156,482,048
IO_NBYTES = 4 * 2 * ELEMENTS  # input + output, float32: 411,041,792
PARAM_NBYTES = 4 * (9 * CHANNELS * CHANNELS + CHANNELS)  # 2,360,320
FORWARD_FLOPS = CONV_FLOPS + 2 * ELEMENTS  # + bias add and ReLU: 231,259,242,496
# Bias add and ReLU as kernels of their own (simdist/numerics/elementwise.py), in output
# tensors T of 205,520,896 bytes: forward BiasAdd 2 T + Relu 2 T; backward BiasAddGrad 1 T +
# ReluGrad 3 T.
ELEMENTWISE_NBYTES = 4 * 4 * ELEMENTS  # 822,083,584 each way


def test_the_3x3_convolution_of_a_vgg16_layer_is_counted_on_shapes():
    module = VGGConv(CHANNELS)
    x = jax.ShapeDtypeStruct((BATCH, SIDE, SIDE, CHANNELS), jnp.float32)
    variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), x)
    counts = count_conv3x3(lambda v, a: apply_layer(module, v, a), variables, x)
    assert counts == [Conv3x3(CONV_FLOPS, IO_NBYTES)]
    assert CONV_FLOPS == 231_156_482_048 and IO_NBYTES == 411_041_792
    unfused = count_elementwise(lambda v, a: apply_layer(module, v, a), variables, x)
    assert unfused == Elementwise(ELEMENTWISE_NBYTES, ELEMENTWISE_NBYTES)


def test_a_resnet_block_counts_its_batch_norms_and_relus():
    """ResNet-50 v1's layer1.1 at batch 1: three conv + batch norm, ReLU after the first two
    and after the residual addition; 56×56 with 64, 64, 256 channels."""
    block = profile_model("resnet50_v1", 1).layers[2]
    small, wide = 4 * 56 * 56 * 64, 4 * 56 * 56 * 256
    batch_norm = (small + small + wide) * 3, (small + small + wide) * 5
    relu = (small + small + wide) * 2, (small + small + wide) * 3
    assert block.name == "layer1.1"
    assert block.elementwise_forward_nbytes == batch_norm[0] + relu[0]
    assert block.elementwise_backward_nbytes == batch_norm[1] + relu[1]


def test_profiles_carry_the_3x3_convolutions_of_the_full_size_models():
    vgg = profile_model("vgg16", 1)
    # Every convolution of VGG-16 is 3×3 stride 1; its dense layers are not.
    assert all(layer.conv3x3_flops > 0 for layer in vgg.layers[:13])
    assert all(layer.conv3x3_flops == 0 for layer in vgg.layers[13:])
    assert 0.98 < sum(layer.conv3x3_flops for layer in vgg.layers) / vgg.forward_flops < 1
    # ResNet-50's stem (7×7/2) has none; its bottlenecks' 3×3 convolutions are a third.
    resnet = profile_model("resnet50", 1)
    assert resnet.layers[0].conv3x3_flops == 0
    assert 0.3 < sum(layer.conv3x3_flops for layer in resnet.layers) / resnet.forward_flops < 0.4


def _conv3_2(**overrides) -> LayerProfile:
    """conv3_2 at batch 64 as a profile row; compulsory traffic given as its bytes."""
    fields = {
        "name": "conv3_2",
        "forward_flops": float(FORWARD_FLOPS),
        "backward_flops": float(2 * FORWARD_FLOPS),
        # forward reads input and parameters and writes output; backward reads input,
        # output gradient and parameters and writes both gradients
        "forward_bytes": float(IO_NBYTES + PARAM_NBYTES),
        "backward_bytes": float(3 * IO_NBYTES // 2 + 2 * PARAM_NBYTES),
        "output_nbytes": 0,
        "param_nbytes": PARAM_NBYTES,
        "conv3x3_flops": float(CONV_FLOPS),
        "conv3x3_nbytes": float(IO_NBYTES),
        "elementwise_forward_nbytes": float(ELEMENTWISE_NBYTES),
        "elementwise_backward_nbytes": float(ELEMENTWISE_NBYTES),
        **overrides,
    }
    return LayerProfile(**fields)


def _alone(layer: LayerProfile) -> ModelProfile:
    return ModelProfile("vgg16-conv3_2", 0, (), (layer,), "hand")


def test_winograd_on_a_p100_prices_a_quarter_of_the_flops_and_the_transforms():
    p100 = DEVICE_PROFILES["p100"]
    flops_per_s = 10.6e12 * 0.384  # 4.0704e12
    bytes_per_s = 732e9 * (785e9 / 900e9)  # 638.47e9
    assert p100.peak_flops * p100.efficiency == flops_per_s
    assert p100.achieved_bandwidth_Bps == bytes_per_s
    layer = _conv3_2()
    # What the GPU executes: 57.89 GFLOP forward (of 231.26 direct); in series 1.336 GB of
    # transforms and 0.822 GB of bias and ReLU kernels.
    forward_flops = FORWARD_FLOPS - CONV_FLOPS + CONV_FLOPS / 4
    backward_flops = 2 * FORWARD_FLOPS - 2 * CONV_FLOPS + 2 * CONV_FLOPS / 4
    transform = 3.25 * IO_NBYTES
    forward_serial = transform + ELEMENTWISE_NBYTES
    backward_serial = 2 * transform + ELEMENTWISE_NBYTES
    assert executed(layer, True) == (
        (forward_flops, forward_serial),
        (backward_flops, backward_serial),
    )
    assert forward_flops == 57_891_880_960.0 and transform == 1_335_885_824.0
    forward_s = (
        max(forward_flops / flops_per_s, (IO_NBYTES + PARAM_NBYTES) / bytes_per_s)
        + forward_serial / bytes_per_s
        + 5e-6
    )
    backward_s = (
        max(backward_flops / flops_per_s, (3 * IO_NBYTES // 2 + 2 * PARAM_NBYTES) / bytes_per_s)
        + backward_serial / bytes_per_s
        + 5e-6
    )
    # compute-bound: 14.22 ms + 2.09 ms of transforms + 1.29 ms of bias and ReLU forward,
    # 28.45 + 4.18 + 1.29 ms backward
    assert layer_times(_alone(layer), p100, "fp32") == [(forward_s, backward_s)]
    assert forward_s == pytest.approx(17.61e-3, abs=1e-5)
    assert backward_s == pytest.approx(33.92e-3, abs=1e-5)
    # Counted as direct FLOPs (before) it took 46.32 ms + 92.63 ms at the old efficiency 0.471.
    direct = replace(p100, efficiency=219 * 6 * 3.8e9 / 10.6e12)
    plain = _conv3_2(
        conv3x3_flops=0.0,
        conv3x3_nbytes=0.0,
        elementwise_forward_nbytes=0.0,
        elementwise_backward_nbytes=0.0,
    )
    old = layer_times(_alone(plain), direct, "fp32")
    assert old[0][0] == pytest.approx(FORWARD_FLOPS / (10.6e12 * 0.4711) + 5e-6, rel=1e-3)


def test_without_cudnn_or_without_the_columns_the_pricing_is_the_direct_fused_one():
    layer = _conv3_2()
    plain = _conv3_2(
        conv3x3_flops=0.0,
        conv3x3_nbytes=0.0,
        elementwise_forward_nbytes=0.0,
        elementwise_backward_nbytes=0.0,
    )
    assert executed(layer, False) == ((FORWARD_FLOPS, 0.0), (2 * FORWARD_FLOPS, 0.0))
    assert executed(plain, True) == executed(layer, False)
    # batch norm / bias / ReLU kernels without any 3×3 convolution are still in series
    dense = _conv3_2(conv3x3_flops=0.0, conv3x3_nbytes=0.0)
    assert executed(dense, True) == (
        (FORWARD_FLOPS, ELEMENTWISE_NBYTES),
        (2 * FORWARD_FLOPS, ELEMENTWISE_NBYTES),
    )
    v100 = DEVICE_PROFILES["v100"]
    # fp16 runs on tensor cores as implicit GEMM: no Winograd, the 3×3 columns change nothing
    assert layer_times(_alone(layer), v100, "fp16") == layer_times(_alone(plain), v100, "fp16")
    assert layer_times(_alone(layer), v100, "fp32") != layer_times(_alone(plain), v100, "fp32")
    # A first layer's backward is its weight gradient alone: one Winograd pass, not two.
    first = _conv3_2(backward_flops=float(CONV_FLOPS))
    assert executed(first, True)[1] == (CONV_FLOPS / 4, 3.25 * IO_NBYTES + ELEMENTWISE_NBYTES)


def test_layers_csv_round_trips_the_3x3_columns_and_old_files_read_as_direct(tmp_path):
    profile = ModelProfile("hand", 64, (56, 56, 256), (_conv3_2(),), "hand")
    path = write_layers_csv(profile, tmp_path / "layers.csv")
    back = read_profile(path)
    assert back.layers[0].conv3x3_flops == CONV_FLOPS
    assert back.layers[0].conv3x3_nbytes == IO_NBYTES
    assert back.layers[0].elementwise_backward_nbytes == ELEMENTWISE_NBYTES
    old = tmp_path / "old.csv"
    old.write_text("name,forward_flops,backward_flops,param_nbytes\nconv,1e9,2e9,4\n")
    layer = read_profile(old).layers[0]
    assert (layer.conv3x3_flops, layer.conv3x3_nbytes) == (0.0, 0.0)
    assert (layer.elementwise_forward_nbytes, layer.elementwise_backward_nbytes) == (0.0, 0.0)


def test_bad_3x3_columns_are_refused_with_the_field_named(tmp_path):
    with pytest.raises(SimdistError, match=r"conv3x3_flops = 2.31156e\+11 is more than"):
        _conv3_2(forward_flops=1e9)
    with pytest.raises(SimdistError, match="conv3x3_nbytes = -1"):
        _conv3_2(conv3x3_nbytes=-1.0)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,forward_flops,backward_flops,param_nbytes,conv3x3_flops\nc,1,2,4,x\n")
    with pytest.raises(SimdistError, match="row 2, column conv3x3_flops: 'x' is not a number"):
        read_profile(bad)


def test_a_profile_run_at_another_batch_scales_its_3x3_columns_with_the_flops():
    profile = ModelProfile("hand", 64, (56, 56, 256), (_conv3_2(),), "hand")
    half = scale_profile(profile, 32).layers[0]
    assert (half.conv3x3_flops, half.conv3x3_nbytes) == (CONV_FLOPS / 2, IO_NBYTES / 2)
    assert half.forward_flops == FORWARD_FLOPS / 2


@pytest.mark.parametrize(
    ("device", "batch", "published"),
    # tf_cnn_benchmarks' page (K80, P100) and Lambda Labs' V100 log: simdist/hardware/profiles.py
    [("k80", 64, 51.9), ("p100", 64, 219.0), ("v100", 192, 432.16)],
)
def test_the_fp32_efficiencies_are_resnet50_fitted_through_the_roofline(device, batch, published):
    profile = profile_model("resnet50_v1", batch)  # the ResNet-50 tf_cnn_benchmarks builds
    gpu = DEVICE_PROFILES[device]
    fitted = fit_efficiency(profile, gpu, "fp32", published)
    assert round(fitted, 3) == gpu.efficiency
    rate = batch / step_time(layer_times(profile, replace(gpu, efficiency=fitted), "fp32"))
    assert rate == pytest.approx(published, rel=1e-9)
    with pytest.raises(SimdistError, match="even at the full peak"):
        fit_efficiency(profile, gpu, "fp32", 1e9)
