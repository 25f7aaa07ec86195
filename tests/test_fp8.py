"""precision: fp8 (simdist.hardware.fp8): the linear GEMMs at the fp8 peak, the rest at bf16,
the casts in series; BF16 state and wire bytes; the refusals."""

from __future__ import annotations

import pytest
from helpers import tiny

from simdist.activation_memory import LinearGemms, gpt_layer_tensors
from simdist.errors import ScenarioError
from simdist.gpt_shape import GptShape
from simdist.hardware.fp8 import Fp8Gemms, fp8_gemms
from simdist.hardware.profiles import DEVICE_PROFILES, DeviceProfile, PrecisionPeak
from simdist.hardware.roofline import layer_times
from simdist.layers import LayerProfile, ModelProfile
from simdist.memory.accounting import optimizer_step_nbytes, state_nbytes_per_param
from simdist.runtime.costs import fp8_layers, wire_element_nbytes
from simdist.scenario import scenario_from_dict

# bf16: 100 TFLOP/s × 0.5 = 5e13 FLOP/s; fp8: 200 × 0.5 = 1e14; 1 TB/s × 0.8 = 8e11 B/s;
# 5 us a layer pass.
HAND = DeviceProfile(
    name="hand",
    kind="gpu",
    peak_flops=200e12,
    efficiency=0.5,
    source="test",
    precision="fp8",
    memory_bandwidth_Bps=1e12,
    memory_efficiency=0.8,
    memory_nbytes=80e9,
    launch_s=5e-6,
    peaks=(PrecisionPeak("bf16", 100e12, 0.5, "test"), PrecisionPeak("fp8", 200e12, 0.5, "test")),
)
# 1e11 FLOPs forward, 2e11 backward; 4e8 float32 bytes each way (2e8 at 2-byte elements)
LAYER = LayerProfile("h.0.attention", 1e11, 2e11, 4e8, 4e8, 0, 0)
PROFILE = ModelProfile("hand", 4, (8,), (LAYER,), "test")


def test_linear_gemms_run_at_the_fp8_peak_the_rest_at_bf16_and_the_casts_in_series():
    gemms = Fp8Gemms(6e10, 1.2e11, 8e7, 4e7)
    [(forward, backward)] = layer_times(PROFILE, HAND, "fp8", [gemms])
    # forward: 6e10 at 1e14 + 4e10 at 5e13 (1.4 ms, above 2e8 B / 8e11 = 0.25 ms of traffic),
    # then 8e7 cast bytes at 8e11 B/s (0.1 ms), then the launch
    assert forward == 6e10 / 1e14 + 4e10 / 5e13 + 8e7 / 8e11 + 5e-6
    assert backward == 1.2e11 / 1e14 + 0.8e11 / 5e13 + 4e7 / 8e11 + 5e-6
    assert (forward, backward) == pytest.approx((1.505e-3, 2.855e-3), rel=1e-12)


def test_at_fp8_a_layer_without_linear_gemms_runs_wholly_at_bf16():
    [(forward, backward)] = layer_times(PROFILE, HAND, "fp8", [None])
    assert (forward, backward) == (1e11 / 5e13 + 5e-6, 2e11 / 5e13 + 5e-6)
    assert layer_times(PROFILE, HAND, "fp8") == [(forward, backward)]


def test_a_layers_fp8_work_from_its_linear_gemms():
    # per example: 1e6 FLOPs, 100 input and 30 output elements cast; 1,000 weight elements
    assert fp8_gemms(1e6, 100, 30, 1000, examples=4) == Fp8Gemms(
        forward_flops=4e6,
        backward_flops=8e6,  # input and weight gradients
        forward_cast_nbytes=3 * (4 * 100 + 1000),  # read 2 bytes, write 1
        backward_cast_nbytes=3 * 4 * 30,
    )
    assert fp8_gemms(0.0, 0, 0, 0, examples=4) is None


def test_a_gpt_layers_linear_gemms_from_its_shapes():
    # s = 8, h = 16, 4 heads of 4, 2 kv heads (kv width 8), SwiGLU of f = 24
    layers = gpt_layer_tensors(
        GptShape(1, 16, 4, 8, 100, kv_heads=2, ffn_hidden=24, mlp="swiglu", norm="rmsnorm")
    )
    by_name = {t.name: t.linear for t in layers}
    qkv = 16 + 2 * 8  # QKV's output width
    assert by_name["h.0.attention"] == LinearGemms(
        flops=2 * 8 * 16 * qkv + 2 * 8 * 16 * 16,  # QKV, then the projection
        inputs=2 * 8 * 16,
        outputs=8 * qkv + 8 * 16,
        weights=16 * qkv + 16 * 16,
    )
    assert by_name["h.0.mlp"] == LinearGemms(
        flops=2 * 8 * 16 * 48 + 2 * 8 * 24 * 16,  # fused gate and up (2f), then down
        inputs=8 * 16 + 8 * 24,
        outputs=8 * 48 + 8 * 16,
        weights=16 * 48 + 24 * 16,
    )
    assert by_name["embeddings"] is None and by_name["lm_head"] is None
    moe = gpt_layer_tensors(GptShape(1, 16, 4, 8, 100, experts=4, top_k=2, capacity_factor=1.5))
    dense = gpt_layer_tensors(GptShape(1, 16, 4, 8, 100))[2].linear
    assert {t.name: t.linear for t in moe}["h.0.moe"] == LinearGemms(
        dense.flops * 3, dense.inputs * 3, dense.outputs * 3, dense.weights * 4
    )


def _gpt(precision: str, **more: object) -> object:
    return scenario_from_dict(
        {
            "name": "fp8",
            "numerics": False,
            "cluster": {
                "hosts": 1,
                "devices_per_host": 2,
                "device": {"profile": "h100", "precision": precision, "variability": 0},
            },
            "workload": {
                "model": {"name": "gpt", "layers": 2, "hidden": 64, "heads": 4, "seq_len": 32},
                "batch_size": 2,
                "optimizer": {"name": "adam", "learning_rate": 1e-3},
                "steps": 1,
            },
            "strategy": {"kind": "mirrored"},
            **more,
        }
    )


def test_a_gpt_scenario_prices_its_blocks_linear_gemms_and_nothing_else_in_fp8():
    from simdist.runtime.costs import clock_profile

    scenario = _gpt("fp8")
    profile = clock_profile(scenario)
    gemms = fp8_layers(scenario, profile, DEVICE_PROFILES["h100"].at_precision("fp8"))
    names = [layer.name for layer in profile.layers]
    assert names == [
        "embeddings",
        "h.0.attention",
        "h.0.mlp",
        "h.1.attention",
        "h.1.mlp",
        "lm_head",
    ]
    s, h = 32, 64
    assert gemms[0] is None and gemms[-1] is None
    assert gemms[1] == fp8_gemms(2 * s * h * 4 * h, 2 * s * h, 4 * s * h, 4 * h * h, 2)
    assert gemms[2] == fp8_gemms(2 * s * h * 8 * h, 5 * s * h, 5 * s * h, 8 * h * h, 2)
    assert fp8_layers(scenario, profile, DEVICE_PROFILES["h100"].at_precision("bf16")) is None


def test_fp8_holds_and_moves_bf16_bytes():
    assert state_nbytes_per_param("fp8", "adam") == (2, 2, 12)
    assert optimizer_step_nbytes(10, precision="fp8", optimizer="adam") == (
        optimizer_step_nbytes(10, precision="bf16", optimizer="adam")
    )
    assert wire_element_nbytes(_gpt("fp8"), "fp8") == (2, 2)


def test_the_h100_fp8_peak_is_the_datasheets_dense_figure_at_the_bf16_share():
    fp8, bf16 = DEVICE_PROFILES["h100"].peak("fp8"), DEVICE_PROFILES["h100"].peak("bf16")
    assert (fp8.flops, fp8.efficiency) == (1979e12, bf16.efficiency)
    assert fp8.source.startswith("assumed: the bf16 share")


def test_a_device_without_fp8_refuses_it_naming_its_precisions():
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(
            tiny(**{"cluster.device": {"profile": "a100", "precision": "fp8"}, "numerics": False})
        )
    assert str(err.value).endswith(
        "cluster.device.precision: got 'fp8'; profile a100 has peaks for fp32, tf32, fp16, "
        "bf16, e.g. precision: fp32"
    )


def test_fp8_numerics_are_refused_in_one_line():
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(tiny(**{"cluster.device": {"profile": "h100", "precision": "fp8"}}))
    assert str(err.value).endswith(
        "cluster.device.precision: fp8 is timing-only (simdist prices its FP8 GEMMs but does "
        "not compute in FP8): run it with numerics: false, or train at bf16"
    )


def test_fp8_keeps_each_linear_gemms_stored_input_in_one_byte():
    from simdist.activation_memory import ActivationTable
    from simdist.memory.accounting import ReplicaLayers, device_memory
    from simdist.sharding import Sharding

    # s = 8, h = 16, MLP 4h: per block the QKV, projection and fc1 inputs (s·h each) and the
    # fc2 input (4·s·h) are GEMM inputs, 7·s·h elements an example
    layers = gpt_layer_tensors(GptShape(2, 16, 4, 8, 100))
    common = {"act_nbytes": 2, "sharding": Sharding(), "flash": True}
    bf16 = ActivationTable(layers, **common).span(examples=3)
    fp8 = ActivationTable(layers, gemm_input_nbytes=1, **common).span(examples=3)
    assert bf16.stored_inputs - fp8.stored_inputs == 2 * 7 * 8 * 16 * 3
    assert (bf16.masks, bf16.attention_scores) == (fp8.masks, fp8.attention_scores)
    replica = ReplicaLayers(1000, (1000,) * len(layers), tuple(layers), 3)
    held = {
        p: device_memory(replica, precision=p, optimizer="adam", sharding=Sharding(), flash=True)
        for p in ("bf16", "fp8")
    }
    assert held["bf16"].activations - held["fp8"].activations == 2 * 7 * 8 * 16 * 3
    assert held["fp8"].params == held["bf16"].params == 2000


def test_selective_recomputation_at_fp8_pays_the_attention_cores_share_of_the_time():
    from simdist.runtime.costs import clock_profile, recompute_seconds

    scenario = _gpt("fp8", strategy={"kind": "mirrored", "recompute": "selective"})
    profile = clock_profile(scenario)
    device = DEVICE_PROFILES["h100"].at_precision("fp8")
    times = [(1.0, 2.0)] * len(profile.layers)
    extra = recompute_seconds(scenario, profile, times, device)
    attention = profile.layers[1]
    s, h = 32, 64
    core, linear = 4 * s * s * h * 2, 2 * s * h * 4 * h * 2  # two examples
    fast, rest = 1979e12 * 0.43, 989.4e12 * 0.43
    rest_flops = attention.forward_flops - linear
    assert extra[1] == (core / rest) / (linear / fast + rest_flops / rest)
    assert extra[1] > core / attention.forward_flops  # the core is slower than the GEMMs
    assert extra == [0.0, extra[1], 0.0, extra[1], 0.0, 0.0]  # the attention layers only
    assert recompute_seconds(scenario, profile, times)[1] == core / attention.forward_flops
