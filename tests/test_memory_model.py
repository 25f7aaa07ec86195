"""The memory model of every strategy (simdist/memory/accounting.py): ZeRO's accounting by hand,
summary.json's ``memory_per_device`` equal to what the pre-run check compares, and layouts
refused before running.

ZeRO's figures (Rajbhandari et al. 2020, Sec. 3.1 and Fig. 1), mixed-precision Adam (K = 12)
for Ψ parameters on N devices: data parallel 2Ψ + 2Ψ + KΨ; stage 1 4Ψ + KΨ/N; stage 2
2Ψ + (2 + K)Ψ/N; stage 3 (4 + K)Ψ/N. The zero and tensor_parallel strategies are written
elsewhere; here their ``Spec.sharding`` is stood in for by patching multi_worker_mirrored's.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simdist.activation_memory import layer_tensors_of_outputs
from simdist.cli import app
from simdist.layers import LayerProfile, ModelProfile, read_profile, write_layers_csv
from simdist.memory.accounting import (
    DeviceMemory,
    ReplicaLayers,
    device_memory,
    model_state_nbytes,
    scenario_memory,
)
from simdist.numerics.memory import Footprint
from simdist.runtime.engine import run
from simdist.scenario import resolve_scenario
from simdist.sharding import Sharding
from simdist.strategies.multi_worker_mirrored import Spec as MirroredSpec

PSI = 400  # parameters of the hand model: two layers of 200 float32 parameters (800 B)
N = 4  # data-parallel devices (hosts of one device)
BATCH = 8  # per replica
#: Bytes one example leaves for the backward pass: its 4 float32 inputs (16 B) and the two
#: layers' outputs (64 B and 32 B).
EXAMPLE_NBYTES = 16 + 64 + 32

runner = CliRunner()


def hand_profile(folder: Path, param_nbytes: int = 800) -> Path:
    """Two layers of ``param_nbytes`` each; outputs 512 B and 256 B for 8 examples of 4."""
    layers = (
        LayerProfile("fc1", 1e3, 2e3, 1e3, 2e3, output_nbytes=512, param_nbytes=param_nbytes),
        LayerProfile("fc2", 1e3, 2e3, 1e3, 2e3, output_nbytes=256, param_nbytes=param_nbytes),
    )
    return write_layers_csv(ModelProfile("hand", BATCH, (4,), layers, "test"), folder / "l.csv")


def scenario_dict(profile: Path, *, precision: str = "fp16", optimizer: str = "adam") -> dict:
    return {
        "name": "memory",
        "numerics": False,
        "cluster": {"hosts": N, "device": {"profile": "v100", "precision": precision}},
        "strategy": {"kind": "multi_worker_mirrored"},
        "workload": {
            "profile": str(profile),
            "batch_size": BATCH,
            "optimizer": {"name": optimizer, "learning_rate": 0.1},
            "steps": 1,
        },
    }


def shard(monkeypatch: pytest.MonkeyPatch, sharding: Sharding) -> None:
    """Make multi_worker_mirrored declare ``sharding``, as zero / tensor_parallel will."""
    monkeypatch.setattr(MirroredSpec, "sharding", lambda self, cluster: sharding)


# ZeRO stage → its Sharding over N devices.
STAGES = {
    0: Sharding(),
    1: Sharding(optimizer=N),
    2: Sharding(gradients=N, optimizer=N),
    3: Sharding(params=N, gradients=N, optimizer=N),
}
K = 12
# (params, gradients, optimizer) bytes per device, ZeRO's Fig. 1 row by row.
ZERO_FP16_ADAM = {
    0: (2 * PSI, 2 * PSI, K * PSI),
    1: (2 * PSI, 2 * PSI, K * PSI // N),
    2: (2 * PSI, 2 * PSI // N, K * PSI // N),
    3: (2 * PSI // N, 2 * PSI // N, K * PSI // N),
}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_model_state_follows_zero_figure_1(stage: int) -> None:
    state = model_state_nbytes(PSI, precision="fp16", optimizer="adam", sharding=STAGES[stage])
    assert state == ZERO_FP16_ADAM[stage]
    total = sum(state)
    assert (
        total
        == {
            0: (2 + 2 + K) * PSI,
            1: 4 * PSI + K * PSI // N,
            2: 2 * PSI + (2 + K) * PSI // N,
            3: (4 + K) * PSI // N,
        }[stage]
    )


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [
        # fp32: parameters and gradients 4Ψ each, optax's state 4Ψ a copy
        ("fp32", "sgd", (4 * PSI, 4 * PSI, 0)),
        ("fp32", "momentum", (4 * PSI, 4 * PSI, 4 * PSI)),
        ("fp32", "adam", (4 * PSI, 4 * PSI, 8 * PSI)),
        ("tf32", "adam", (4 * PSI, 4 * PSI, 8 * PSI)),  # stored as float32
        # mixed precision: the fp32 master copy sits in the optimizer part (K = 4 + 4/copy)
        ("bf16", "sgd", (2 * PSI, 2 * PSI, 4 * PSI)),
        ("bf16", "momentum", (2 * PSI, 2 * PSI, 8 * PSI)),
        ("fp16", "adam", (2 * PSI, 2 * PSI, 12 * PSI)),
    ],
)
def test_model_state_per_precision_and_optimizer(
    precision: str, optimizer: str, expected: tuple[int, int, int]
) -> None:
    state = model_state_nbytes(PSI, precision=precision, optimizer=optimizer, sharding=Sharding())
    assert state == expected


def test_a_shard_is_padded_to_whole_elements_and_the_optimizer_may_live_elsewhere() -> None:
    # 10 parameters over 4 devices: DeepSpeed pads to 12, each device holds 3
    assert model_state_nbytes(
        10, precision="fp32", optimizer="adam", sharding=Sharding(3, 4, 4)
    ) == (4 * 4, 4 * 3, 8 * 3)
    assert model_state_nbytes(
        10, precision="fp32", optimizer="adam", sharding=Sharding(), optimizer_on_device=False
    ) == (40, 40, 0)


def test_tensor_parallel_splits_state_and_activations() -> None:
    """Megatron's T-way split (Sharding of T on every part): 1/T of everything per device."""
    T = 4
    # per example: 4 input elements, outputs of 16 and 8 elements (float32: 112 B)
    tensors = tuple(layer_tensors_of_outputs([16.0, 8.0], 4.0))
    layers = ReplicaLayers(PSI, (PSI // 2, PSI // 2), tensors, BATCH)
    held = device_memory(
        layers, precision="fp32", optimizer="momentum", sharding=Sharding(T, T, T, T)
    )
    assert held == DeviceMemory(4 * PSI // T, 4 * PSI // T, 4 * PSI // T, 896 // T)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_memory_per_device_in_summary_follows_zero(
    stage: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard(monkeypatch, STAGES[stage])
    result = run(resolve_scenario(scenario_dict(hand_profile(tmp_path))))
    per_device = result.summary["memory_per_device"]
    assert list(per_device) == [f"worker{i}/gpu0" for i in range(N)]
    params, grads, opt = ZERO_FP16_ADAM[stage]
    acts = EXAMPLE_NBYTES * BATCH // 2  # fp16 activations: half of float32's bytes
    for whole in per_device.values():
        held = dict(whole)
        assert held.pop("activations_by_kind")["stored_inputs"] == acts
        assert held == {
            "params": params,
            "gradients": grads,
            "optimizer": opt,
            "activations": acts,
            "total": params + grads + opt + acts,
        }
    if stage == 3:  # the N devices hold the model state once between them
        state = sum(
            held[k] for k in ("params", "gradients", "optimizer") for held in per_device.values()
        )
        assert state == (2 + 2 + K) * PSI


def test_tensor_parallel_in_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """T = 4 with sequence parallelism, mixed-precision Adam: 16Ψ/4 of model state and a
    quarter of the fp16 activations per device."""
    shard(monkeypatch, Sharding(params=N, gradients=N, optimizer=N, activations=N))
    per_device = run(resolve_scenario(scenario_dict(hand_profile(tmp_path)))).summary[
        "memory_per_device"
    ]
    acts = EXAMPLE_NBYTES * BATCH // 2 // N
    for held in per_device.values():
        assert held["activations_by_kind"]["stored_inputs"] == acts
    per_device = {
        name: {k: v for k, v in held.items() if k != "activations_by_kind"}
        for name, held in per_device.items()
    }
    expected = {
        "params": 2 * PSI // N,
        "gradients": 2 * PSI // N,
        "optimizer": K * PSI // N,
        "activations": acts,
        "total": (4 + K) * PSI // N + acts,
    }
    assert per_device == {f"worker{i}/gpu0": expected for i in range(N)}


def test_summary_says_what_the_pre_run_check_compares(tmp_path: Path) -> None:
    """mirrored on 4 devices in float32 with momentum: the run's figures (from its costs)
    equal the check's (from the profile's footprint)."""
    profile = hand_profile(tmp_path)
    data = scenario_dict(profile, precision="fp32", optimizer="momentum")
    data["cluster"] = {"devices_per_host": 4, "device": {"profile": "v100"}}
    data["strategy"] = {"kind": "mirrored"}
    scenario = resolve_scenario(data)
    summary = run(scenario).summary
    checked = scenario_memory(
        scenario, ReplicaLayers.of_footprint(Footprint.of(read_profile(profile)), BATCH), "fp32"
    )
    expected = {
        "params": 4 * PSI,
        "gradients": 4 * PSI,
        "optimizer": 4 * PSI,
        "activations": EXAMPLE_NBYTES * BATCH,
        "total": 12 * PSI + EXAMPLE_NBYTES * BATCH,
    }
    assert checked.parts() == {k: v for k, v in expected.items() if k != "total"}
    assert checked.total == expected["total"]
    by_kind = {"stored_inputs": EXAMPLE_NBYTES * BATCH, "attention_scores": 0, "masks": 0}
    by_kind |= {"recompute_working_set": 0, "freed_by_recompute": 0}
    expected["activations_by_kind"] = by_kind
    assert summary["memory_per_device"] == {f"worker0/gpu{i}": expected for i in range(4)}
    assert "memory_off_device" not in summary


def test_pipeline_summary_keeps_its_stages(tmp_path: Path) -> None:
    """Two stages of one layer, one micro-batch, sgd in float32: each layer stores its
    input, the last its output too. Stage 0 holds fc1 (800 B and its gradient) and the
    batch's input (128 B); stage 1 fc2, its input (fc1's output, 512 B) and its own output
    (256 B)."""
    data = scenario_dict(hand_profile(tmp_path), precision="fp32", optimizer="sgd")
    data["cluster"] = {"devices_per_host": 2, "device": {"profile": "v100"}}
    data["strategy"] = {"kind": "pipeline", "stages": 2}
    summary = run(resolve_scenario(data)).summary

    def stage(activations: int) -> dict[str, object]:
        return {
            "params": 800,
            "gradients": 800,
            "optimizer": 0,
            "activations": activations,
            "total": 1600 + activations,
            "activations_by_kind": {
                "stored_inputs": activations,
                "attention_scores": 0,
                "masks": 0,
                "recompute_working_set": 0,
                "freed_by_recompute": 0,
            },
        }

    assert summary["memory_per_device"] == {
        "worker0/gpu0": stage(128),
        "worker0/gpu1": stage(512 + 256),
    }


def test_parameter_servers_hold_the_optimizer_state(tmp_path: Path) -> None:
    """Two PS tasks, round-robin: each holds one layer (200 parameters), its gradient buffer
    and Adam's two moments, in float32; the workers' devices hold no optimizer state."""
    data = scenario_dict(hand_profile(tmp_path), precision="fp32")
    data["cluster"] = {"hosts": 2, "ps": 2, "device": {"profile": "v100"}}
    data["strategy"] = {"kind": "parameter_server"}
    summary = run(resolve_scenario(data)).summary
    layer = 800
    assert summary["memory_off_device"] == {
        f"ps{i}": {
            "params": layer,
            "gradients": layer,
            "optimizer": 2 * layer,
            "activations": 0,
            "total": 4 * layer,
        }
        for i in range(2)
    }
    assert {held["optimizer"] for held in summary["memory_per_device"].values()} == {0}


def big_scenario(folder: Path, layer_nbytes: int = 2_500_000_000) -> Path:
    """Two layers of ``layer_nbytes`` with Adam in float32 on 4 V100s of 16 GB (default:
    1.25e9 parameters, 20 GB of model state per replica under data parallelism)."""
    data = scenario_dict(hand_profile(folder, param_nbytes=layer_nbytes), precision="fp32")
    path = folder / "big.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _errors(args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, shlex.split(args))
    return result.exit_code, [x for x in result.output.splitlines() if x.startswith("error:")]


def test_a_data_parallel_layout_that_does_not_fit_exits_2_before_running(tmp_path: Path) -> None:
    path, out = big_scenario(tmp_path), tmp_path / "out"
    expected = (
        f"error: {path}: workload.profile: does not fit: worker0/gpu0 needs 20 GB and a v100 "
        "has 16 GB (params 5, grads 5, optimizer 10, activations 8.96e-07 for 8 examples of "
        "112 B); split the replica over devices (strategy kind "
    )
    for command in ("validate", "run -q"):
        code, errors = _errors(f"{command} {path} --out {out}")
        assert code == 2 and len(errors) == 1, errors
        assert errors[0].startswith(expected), errors[0]
        assert errors[0].endswith(" or use a smaller model")
    assert not out.exists()


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_holds_what_data_parallelism_cannot(
    stage: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two layers of 4e9 bytes (Ψ = 2e9) with Adam in float32 over 4 devices: 32 GB a replica;
    stage 1 holds 8 + 8 + 16/4 = 20 GB (refused), stage 2 8 + 24/4 = 14 GB, stage 3
    32/4 = 8 GB (both fit a 16 GB V100)."""
    shard(monkeypatch, STAGES[stage])
    path = big_scenario(tmp_path, 4_000_000_000)
    code, errors = _errors(f"validate {path}")
    if stage == 1:
        assert _errors(f"run -q {path} --out {tmp_path / 'out'}") == (code, errors)
        assert code == 2 and len(errors) == 1 and not (tmp_path / "out").exists()
        need = "worker0/gpu0 needs 20 GB and a v100 has 16 GB (params 8, grads 8, optimizer 4,"
        assert f"does not fit: {need}" in errors[0]
    else:
        assert (code, errors) == (0, [])


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_zero_strategy_is_refused_or_admitted_by_its_own_stage(
    stage: int, tmp_path: Path
) -> None:
    """The same 32 GB replica as above under ``strategy: {kind: zero}`` itself: its stage's
    sharding decides, stage 1 is refused before running (exit 2), stages 2 and 3 fit."""
    path = big_scenario(tmp_path, 4_000_000_000)
    data = yaml.safe_load(path.read_text())
    data["strategy"] = {"kind": "zero", "stage": stage}
    path.write_text(yaml.safe_dump(data))
    code, errors = _errors(f"validate {path}")
    if stage == 1:
        assert _errors(f"run -q {path} --out {tmp_path / 'out'}") == (code, errors)
        assert code == 2 and len(errors) == 1 and not (tmp_path / "out").exists()
        assert "does not fit: worker0/gpu0 needs 20 GB and a v100 has 16 GB" in errors[0]
    else:
        assert (code, errors) == (0, [])


def test_a_tensor_parallel_layout_that_does_not_fit_exits_2_before_running(
    tmp_path: Path,
) -> None:
    """A 48-layer GPT of hidden 8192 (about 39e9 parameters) with Adam in float32 split over
    T = 4 V100s still needs ~16 bytes × 39e9 / 4 ≈ 155 GB a device: refused by validate and
    run alike, with nothing written."""
    data = {
        "name": "tp_too_big",
        "numerics": False,
        "cluster": {"devices_per_host": 4, "device": {"profile": "v100"}},
        "strategy": {"kind": "tensor_parallel", "tensor": 4},
        "workload": {
            "model": {"name": "gpt", "layers": 48, "hidden": 8192, "heads": 64},
            "batch_size": 1,
            "optimizer": {"name": "adam", "learning_rate": 0.001},
            "steps": 1,
        },
    }
    path, out = tmp_path / "tp.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(data))
    for command in ("validate", "run -q"):
        code, errors = _errors(f"{command} {path} --out {out}")
        assert code == 2 and len(errors) == 1, errors
        assert "does not fit: worker0/gpu0 needs" in errors[0], errors[0]
        assert "and a v100 has 16 GB" in errors[0], errors[0]
        others = errors[0].partition("or with another strategy (kind ")[2]
        assert "split it further (more devices in the tensor_parallel layout)" in errors[0]
        assert (
            others.startswith("pipeline, zero (stage 1, 2 or 3), fsdp") and "tensor" not in others
        )
    assert not out.exists()
