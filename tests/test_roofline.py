"""The roofline: per-layer times from FLOPs and bytes, precisions, calibration to a measure."""

from __future__ import annotations

import math

import pytest
from helpers import tiny

from simdist.errors import ScenarioError, SimdistError
from simdist.hardware.cluster import effective_profile
from simdist.hardware.profiles import DEVICE_PROFILES, PRECISIONS, DeviceProfile, PrecisionPeak
from simdist.hardware.roofline import calibrate, compulsory_traffic, layer_times, step_time
from simdist.layers import LayerProfile, ModelProfile
from simdist.runtime.costs import clock_profile, measure_costs
from simdist.runtime.engine import run
from simdist.scenario import DeviceSpec, scenario_from_dict

# A device reaching 10 TFLOP/s × 0.5 = 5e12 FLOP/s at fp32 (40 × 0.25 = 1e13 at fp16) and
# 1 TB/s × 0.8 = 8e11 bytes/s, paying 5 us per layer pass.
HAND = DeviceProfile(
    name="hand",
    kind="gpu",
    peak_flops=10e12,
    efficiency=0.5,
    source="test",
    precision="fp32",
    memory_bandwidth_Bps=1e12,
    memory_efficiency=0.8,
    memory_nbytes=16e9,
    launch_s=5e-6,
    peaks=(PrecisionPeak("fp32", 10e12, 0.5, "test"), PrecisionPeak("fp16", 40e12, 0.25, "test")),
)


def _layer(name: str, flops: float, nbytes: float, **more: float) -> LayerProfile:
    """A layer whose backward costs twice its forward, in FLOPs and in bytes."""
    return LayerProfile(name, flops, 2 * flops, nbytes, 2 * nbytes, 0, 1024, (), **more)


def _profile(*layers: LayerProfile) -> ModelProfile:
    return ModelProfile("hand", 32, (8,), layers, "test")


COMPUTE_BOUND = _layer("conv", 1e10, 4e8)  # 2 ms of FLOPs, 0.5 ms of bytes
MEMORY_BOUND = _layer("bn", 1e8, 1.6e9)  # 20 us of FLOPs, 2 ms of bytes


def test_compute_bound_and_memory_bound_layers_take_the_larger_time_plus_launch():
    times = layer_times(_profile(COMPUTE_BOUND, MEMORY_BOUND), HAND, "fp32")
    assert times == [
        (1e10 / 5e12 + 5e-6, 2e10 / 5e12 + 5e-6),  # FLOPs / achieved FLOP/s
        (1.6e9 / 8e11 + 5e-6, 3.2e9 / 8e11 + 5e-6),  # bytes / achieved bandwidth
    ]
    assert times == [(2e-3 + 5e-6, 4e-3 + 5e-6), (2e-3 + 5e-6, 4e-3 + 5e-6)]
    assert step_time(times) == pytest.approx(12.02e-3, rel=1e-15)


def test_memory_term_is_the_compulsory_traffic_of_fused_layers():
    # batch 2 of 4 floats: the first layer reads 32 input bytes
    first = LayerProfile("a", 1.0, 2.0, 9e9, 9e9, output_nbytes=32, param_nbytes=64)
    second = LayerProfile("b", 1.0, 2.0, 9e9, 9e9, output_nbytes=16, param_nbytes=8)
    unsized = LayerProfile("c", 1.0, 2.0, 100.0, 300.0, output_nbytes=0, param_nbytes=8)
    profile = ModelProfile("m", 2, (4,), (first, second, unsized), "test")
    # forward: input + params + output; backward: 2 x input + output + 2 x params.
    # XLA's unfused byte counts (9e9 here) are not used while activation sizes are known.
    assert compulsory_traffic(profile) == [
        (32 + 64 + 32, 2 * 32 + 32 + 2 * 64),
        (32 + 8 + 16, 2 * 32 + 16 + 2 * 8),
        (100.0, 300.0),
    ]
    # on HAND (8e11 achieved bytes/s) the second layer's 56 bytes are the memory term
    (_, _), (forward_s, _), _ = layer_times(profile, HAND, "fp32")
    assert forward_s == max(1.0 / 5e12, 56 / 8e11) + 5e-6


def test_precision_selects_the_peak_and_halves_the_bytes():
    times = layer_times(_profile(COMPUTE_BOUND, MEMORY_BOUND), HAND, "fp16")
    # fp16: 40e12 × 0.25 = 1e13 FLOP/s; 2-byte elements: half of the float32 bytes.
    assert times == [
        (1e10 / 1e13 + 5e-6, 2e10 / 1e13 + 5e-6),
        (0.8e9 / 8e11 + 5e-6, 1.6e9 / 8e11 + 5e-6),
    ]
    with pytest.raises(SimdistError, match="no bf16 peak"):
        layer_times(_profile(COMPUTE_BOUND), HAND, "bf16")


def test_times_given_by_the_source_are_kept():
    given = _layer("measured", 1e10, 4e8, forward_s=1e-3, backward_s=3e-3)
    assert layer_times(_profile(given, MEMORY_BOUND), HAND, "fp32") == [
        (1e-3, 3e-3),
        (2e-3 + 5e-6, 4e-3 + 5e-6),
    ]


def test_scenario_overrides_replace_the_selected_precisions_peak():
    spec = DeviceSpec(profile="v100", precision="fp16", efficiency=0.5)
    device = effective_profile(spec)
    assert (device.precision, device.peak_flops, device.efficiency) == ("fp16", 125e12, 0.5)
    times = layer_times(_profile(COMPUTE_BOUND), device, "fp16")
    flops_bound = 1e10 / (125e12 * 0.5)
    bytes_bound = 4e8 * 0.5 / (900e9 * device.memory_efficiency)
    assert times[0][0] == max(flops_bound, bytes_bound) + 5e-6
    default = effective_profile(DeviceSpec(profile="v100"))
    assert default is DEVICE_PROFILES["v100"] and default.precision == "fp32"


def test_calibration_reproduces_the_measured_step_exactly_and_keeps_the_shares():
    times = layer_times(_profile(COMPUTE_BOUND, MEMORY_BOUND, _layer("fc", 3e7, 1e5)), HAND, "fp32")
    for measured in (0.1234, 1e-3, 7.3, 1 / 3):
        scaled = calibrate(times, measured)
        assert step_time(scaled) == measured
        ratio = measured / step_time(times)
        flat, scaled_flat = [t for p in times for t in p], [t for p in scaled for t in p]
        assert scaled_flat == pytest.approx([t * ratio for t in flat], rel=1e-12)
    with pytest.raises(SimdistError, match="positive"):
        calibrate(times, 0.0)


def test_every_profile_has_sources_and_its_default_precision():
    for name, device in DEVICE_PROFILES.items():
        assert device.name == name
        assert device.precision in device.precisions
        assert set(device.precisions) <= set(PRECISIONS)
        assert device.memory_bandwidth_Bps > 0 and device.memory_nbytes > 0
        assert 0 < device.memory_efficiency <= 1 and device.launch_s >= 0
        assert device.source and device.memory_source and device.launch_source
        for peak in device.peaks:
            assert peak.flops > 0 and 0 < peak.efficiency <= 1 and peak.source
    # V100 FP32: fitted through the roofline on ResNet-50 v1 at 432.16 img/s (Lambda Labs),
    # with Winograd for 3x3 stride-1 convolutions (benchmarks/validation/single_gpu.py).
    assert DEVICE_PROFILES["v100"].efficiency == 0.613
    assert DEVICE_PROFILES["v100"].peak("fp32").cudnn
    assert not DEVICE_PROFILES["v100"].peak("fp16").cudnn
    assert DEVICE_PROFILES["tpu-v4"].precision == "bf16"


# ---------------------------------------------------------------- through the engine


def _measured(**device) -> dict:
    """TINY on a V100 (with ``device`` options) at batch 16, its compute time not fixed;
    variability off (this replaces TINY's device section): exact, hand-checkable times."""
    device = {"profile": "v100", "variability": 0, **device}
    return tiny(**{"cluster.device": device, "workload.batch_size": 16})


@pytest.mark.parametrize(
    ("device", "step_s"),
    [({"compute_time": "2.5ms"}, 2.5e-3), ({"examples_per_s": 5000}, 16 / 5000)],
)
def test_a_measured_step_calibrates_every_layer(device, step_s):
    scenario = scenario_from_dict(_measured(**device))
    costs = measure_costs(scenario, None)
    assert costs.compute_s == step_s
    assert math.fsum(t for layer in costs.layers for t in (layer.forward_s, layer.backward_s)) == (
        step_s
    )
    roofline = layer_times(clock_profile(scenario), DEVICE_PROFILES["v100"], "fp32")
    ratio = step_s / step_time(roofline)
    for layer, (f, b) in zip(costs.layers, roofline, strict=True):
        assert (layer.forward_s, layer.backward_s) == pytest.approx((f * ratio, b * ratio))
    result = run(scenario_from_dict({**_measured(**device), "numerics": False}))
    assert result.summary["simulated_time_s"] == pytest.approx(12 * step_s, rel=1e-12)


def test_without_a_measure_the_step_is_the_roofline_sum():
    scenario = scenario_from_dict({**_measured(precision="fp16"), "numerics": False})
    profile = clock_profile(scenario)
    costs = measure_costs(scenario, None)
    device = DEVICE_PROFILES["v100"].at_precision("fp16")
    assert costs.compute_s == step_time(layer_times(profile, device, "fp16"))
    assert [layer.name for layer in costs.layers] == [layer.name for layer in profile.layers]
    assert costs.flops_per_replica_step == profile.flops
    assert sum(layer.grad_nbytes for layer in costs.layers) == costs.grad_nbytes


def test_timing_only_resnet50_on_64_devices_without_a_dataset():
    data = {
        "name": "resnet50_64",
        "numerics": False,
        "cluster": {
            "hosts": 8,
            "devices_per_host": 8,
            "device": {"profile": "v100"},
            "links": {"network": {"bandwidth": "25Gbit/s", "latency": "10us"}},
        },
        "workload": {
            "model": "resnet50",
            "batch_size": 64,
            "optimizer": {"name": "momentum", "learning_rate": 0.1},
            "steps": 4,
        },
        "strategy": {"kind": "multi_worker_mirrored", "communication": "nccl"},
    }
    result = run(scenario_from_dict(data))
    s = result.summary
    assert s["replicas"] == 64 and s["steps"] == 4
    assert s["final_test_accuracy"] is None and result.params is None
    # ResNet-50's 25.6M float32 parameters (torchvision: 25,557,032).
    assert s["param_bytes"] == pytest.approx(25_557_032 * 4, rel=0.01)
    profile = clock_profile(scenario_from_dict(data))
    assert profile.input_shape == (224, 224, 3) and profile.batch_size == 64
    v100 = layer_times(profile, DEVICE_PROFILES["v100"], "fp32")
    assert s["compute_s_per_replica_step"] == step_time(v100)
    computing = result.events[result.events["kind"] == "compute"]
    assert computing["device"].nunique() == 64


# ---------------------------------------------------------------- other clocks


def test_a_surrogate_trains_the_small_model_while_the_clock_follows_the_big_one(tmp_path):
    from simdist.report import write_report

    data = tiny(
        **{
            "strategy.kind": "mirrored",
            "cluster.devices_per_host": 2,
            "cluster.device": {"profile": "a100", "precision": "bf16"},
            "workload.timing_model": "resnet50",
            "workload.input_shape": [64, 64, 3],
            "workload.steps": 3,
        }
    )
    scenario = scenario_from_dict(data)
    result = run(scenario)
    profile = clock_profile(scenario)
    assert profile.model == "resnet50" and profile.input_shape == (64, 64, 3)
    a100 = DEVICE_PROFILES["a100"].at_precision("bf16")
    s = result.summary
    assert s["compute_s_per_replica_step"] == step_time(layer_times(profile, a100, "bf16"))
    # the clock model's gradient moves, in bf16 (mixed precision)
    assert s["param_bytes"] == profile.param_nbytes // 2
    assert s["final_train_loss"] is not None and result.params is not None  # mlp trained
    assert "resnet50" in s["_surrogate"] and "mlp" in s["_surrogate"]
    out = write_report(result, tmp_path / "report")
    assert '"_surrogate"' in (out / "summary.json").read_text().splitlines()[1]
    head = (out / "report.md").read_text().splitlines()[:3]
    assert head[2].startswith("> **Surrogate timing**") and "resnet50" in head[2]
    # The parameter_server spec refuses it as the scenario loads, naming the clock's field.
    with pytest.raises(ScenarioError, match="parameter_server") as refused:
        scenario_from_dict({**data, "strategy": {"kind": "parameter_server"}})
    assert "workload.timing_model" in str(refused.value)
    assert "run it timing-only with numerics: false" in str(refused.value)
    timing_only = scenario_from_dict(
        {
            **data,
            "strategy": {"kind": "parameter_server"},
            "numerics": False,
            "cluster": {**data["cluster"], "ps": 1, "devices_per_host": 1},
        }
    )
    assert timing_only.workload.surrogate


def test_a_layers_csv_runs_a_model_that_is_not_in_the_zoo(tmp_path):
    from simdist.layers import write_layers_csv

    path = write_layers_csv(_profile(COMPUTE_BOUND, MEMORY_BOUND), tmp_path / "layers.csv")
    data = {
        "name": "from_csv",
        "numerics": False,
        "cluster": {"hosts": 2, "ps": 2, "device": {"profile": "v100"}},
        "workload": {
            "profile": str(path),
            "batch_size": 32,
            "optimizer": {"name": "adam", "learning_rate": 1e-3},
            "steps": 6,
        },
        "strategy": {"kind": "parameter_server", "staleness_bound": 0},
    }
    scenario = scenario_from_dict(data)
    costs = measure_costs(scenario, None)
    v100 = DEVICE_PROFILES["v100"]
    assert [(c.forward_s, c.backward_s) for c in costs.layers] == layer_times(
        _profile(COMPUTE_BOUND, MEMORY_BOUND), v100, "fp32"
    )
    assert costs.param_leaves == (("conv", (256,), 1024), ("bn", (256,), 1024))
    assert 2 * 2048 <= costs.opt_state_nbytes <= 2 * 2048 + 8  # Adam: two moments + a count
    result = run(scenario)
    assert result.summary["applied_updates"] == 6
    # At batch 64 the per-batch costs of the file (profiled at 32) double.
    doubled = measure_costs(
        scenario_from_dict({**data, "workload": {**data["workload"], "batch_size": 64}}), None
    )
    assert doubled.flops_per_replica_step == 2 * costs.flops_per_replica_step


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workload.model": "vgg16"}, "workload.model"),
        ({"workload.input_shape": [16, 16, 1]}, "workload.input_shape"),
        ({"workload.dataset": None}, "workload.dataset"),
        (
            {
                "workload.epochs": 1,
                "workload.steps": None,
                "workload.dataset": None,
                "numerics": False,
            },
            "workload.epochs",
        ),
        ({"cluster.device": {"profile": "k80", "precision": "fp16"}}, "cluster.device.precision"),
        (
            {"cluster.device": {"compute_time": "1ms", "examples_per_s": 10}},
            "cluster.device.examples_per_s",
        ),
    ],
)
def test_clock_settings_that_cannot_work_are_refused(changes, field):
    data = tiny()
    for path, value in changes.items():
        if path == "numerics":
            data["numerics"] = value
            continue
        node = data
        *parents, leaf = path.split(".")
        for key in parents:
            node = node[key]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    with pytest.raises(Exception, match=field.replace(".", r"\.")):
        scenario_from_dict(data)
