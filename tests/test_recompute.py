"""Recomputation for every strategy (``strategy.recompute: none | selective | full``): its
extra forward time on the clock, exactly, and the memory check that reads it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simdist.cli import app
from simdist.layers import LayerProfile, ModelProfile, write_layers_csv
from simdist.runtime.costs import measure_costs, recompute_seconds
from simdist.runtime.engine import run
from simdist.scenario import resolve_scenario, scenario_from_dict

BATCH = 8
runner = CliRunner()


def hand_profile(folder: Path) -> Path:
    layers = tuple(
        LayerProfile(name, 1e9 * (i + 1), 2e9 * (i + 1), 1e3, 2e3, 512, 800)
        for i, name in enumerate(("fc1", "fc2", "fc3"))
    )
    return write_layers_csv(ModelProfile("hand", BATCH, (4,), layers, "test"), folder / "l.csv")


def scenario(folder: Path, kind: str, recompute: str, **strategy: object):
    data = {
        "name": "recompute",
        "numerics": False,
        "cluster": {"devices_per_host": 2, "device": {"profile": "a100", "variability": 0}},
        "strategy": {"kind": kind, "recompute": recompute, **strategy},
        "workload": {
            "profile": str(hand_profile(folder)),
            "batch_size": BATCH,
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "steps": 1,
        },
    }
    return resolve_scenario(data)


@pytest.mark.parametrize(
    ("kind", "strategy"),
    [
        ("one_device", {}),
        ("mirrored", {}),
        ("zero", {"stage": 3}),
        ("fsdp", {}),
        ("pipeline", {"stages": 2}),
    ],
)
def test_full_recomputation_pays_each_layers_forward_again(
    tmp_path: Path, kind: str, strategy: dict
) -> None:
    """Each layer's backward grows by its own forward (Megatron recomputes a checkpoint's
    layers right before their backward); the step by the sum of the forwards."""
    none = measure_costs(scenario(tmp_path, kind, "none", **strategy), None)
    full = measure_costs(scenario(tmp_path, kind, "full", **strategy), None)
    for plain, again in zip(none.layers, full.layers, strict=True):
        assert again.forward_s == plain.forward_s
        assert again.backward_s == plain.backward_s + plain.forward_s
        # its forward's collectives run again too (a tensor group's)
        assert (plain.reruns_forward, again.reruns_forward) == (False, True)
    forwards = sum(x.forward_s for x in none.layers)
    assert full.compute_s == pytest.approx(none.compute_s + forwards, rel=1e-15)


def test_one_device_step_grows_by_the_forward(tmp_path: Path) -> None:
    none = run(scenario(tmp_path, "one_device", "none"))
    full = run(scenario(tmp_path, "one_device", "full"))
    forwards = sum(
        x.forward_s for x in measure_costs(scenario(tmp_path, "one_device", "none"), None).layers
    )
    extra = full.summary["simulated_time_s"] - none.summary["simulated_time_s"]
    assert extra == pytest.approx(forwards, rel=1e-12)


def test_selective_recomputation_pays_the_attention_core() -> None:
    """A gpt of s = 128, h = 64: the attention core is 4·s²·h FLOPs an example; the
    attention layer's backward grows by its forward time × core / forward FLOPs, the MLP's
    and the others' by nothing."""
    s, h = 128, 64
    core = 4 * s * s * h * BATCH
    names = ("embeddings", "h.0.attention", "h.0.mlp", "lm_head")
    layers = tuple(LayerProfile(name, 4.0 * core, 1.0, 1.0, 1.0, 0, 0) for name in names)
    profile = ModelProfile("gpt", BATCH, (s,), layers, "test")
    data = {
        "name": "gpt",
        "numerics": False,
        "cluster": {"device": {"profile": "a100"}},
        "strategy": {"kind": "one_device", "recompute": "selective"},
        "workload": {
            "model": {"name": "gpt", "layers": 1, "hidden": h, "heads": 2, "seq_len": s},
            "batch_size": BATCH,
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "steps": 1,
        },
    }
    times = [(0.4, 0.8)] * 4
    assert recompute_seconds(scenario_from_dict(data), profile, times) == [0.0, 0.1, 0.0, 0.0]
    data["strategy"]["recompute"] = "full"
    assert recompute_seconds(scenario_from_dict(data), profile, times) == [0.0, 0.4, 0.4, 0.0]
    data["strategy"]["recompute"] = "none"
    assert recompute_seconds(scenario_from_dict(data), profile, times) == [0.0] * 4


@pytest.mark.parametrize(("mode", "reruns"), [("full", [0, 1, 1, 0]), ("selective", [0] * 4)])
def test_only_full_recomputation_reruns_a_blocks_forward_collectives(
    mode: str, reruns: list[int]
) -> None:
    """Full recomputation reruns the blocks' forwards, collectives included; selective only
    the attention core, which has none (Korthikanti et al. 2022, Sec. 5): no layer reruns
    its forward's collectives. The embedding and the head are not recomputed."""
    data = {
        "name": "gpt",
        "numerics": False,
        "cluster": {"device": {"profile": "a100"}},
        "strategy": {"kind": "one_device", "recompute": mode},
        "workload": {
            "model": {"name": "gpt", "layers": 1, "hidden": 64, "heads": 2, "seq_len": 128},
            "batch_size": BATCH,
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "steps": 1,
        },
    }
    costs = measure_costs(scenario_from_dict(data), None)
    assert [x.name for x in costs.layers] == ["embeddings", "h.0.attention", "h.0.mlp", "lm_head"]
    assert [int(x.reruns_forward) for x in costs.layers] == reruns


GPT_ON_V100S = {
    "name": "oom",
    "numerics": False,
    "cluster": {"devices_per_host": 8, "device": {"profile": "v100", "precision": "fp16"}},
    "strategy": {"kind": "zero", "stage": 3},
    "workload": {
        "model": {"name": "gpt", "layers": 4, "hidden": 4096, "heads": 32, "seq_len": 2048},
        "batch_size": 4,
        "optimizer": {"name": "adam", "learning_rate": 1e-4},
        "steps": 1,
    },
}


def _validate(path: Path) -> tuple[int, list[str]]:
    result = runner.invoke(app, shlex.split(f"validate {path}"))
    return result.exit_code, [x for x in result.output.splitlines() if x.startswith("error:")]


def test_a_layout_refused_for_its_activations_fits_with_full_recomputation(tmp_path: Path) -> None:
    """ZeRO-3 over 8 V100s holds 2 GB of model state a device, but 4 sequences of 2048
    tokens store 17.1 GB of activations (Korthikanti's 34·sbh + 5·as²b a layer, the fp32
    logits): refused, with recompute: full among the advice; with it, each layer keeps its
    input and the layout fits."""
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump(GPT_ON_V100S))
    code, errors = _validate(path)
    assert code == 2 and len(errors) == 1
    assert "does not fit: worker0/gpu0 needs 19.2 GB and a v100 has 16 GB" in errors[0]
    assert "activations 17.1 for 4 examples" in errors[0]
    assert "recompute: full or use a smaller batch, e.g. batch_size: 3" in errors[0]
    data = dict(GPT_ON_V100S, strategy={"kind": "zero", "stage": 3, "recompute": "full"})
    path.write_text(yaml.safe_dump(data))
    assert _validate(path) == (0, [])


def test_a_pipeline_stage_keeps_its_checkpoints_with_one_micro_batch(tmp_path: Path) -> None:
    """Three layers on two stages, one micro-batch: stage 1 keeps the inputs of fc2 and fc3
    and fc3's output (512 B each). Known only by their outputs, layers keep no more than
    their inputs, so recompute: full frees fc3's output and brings it back while fc3 is
    recomputed: the same peak, and the clock pays the forward."""
    none = run(scenario(tmp_path, "pipeline", "none", stages=2, partition=[1, 2]))
    full = run(scenario(tmp_path, "pipeline", "full", stages=2, partition=[1, 2]))
    plain = none.summary["memory_per_device"]["worker0/gpu1"]
    kept = full.summary["memory_per_device"]["worker0/gpu1"]
    assert plain["activations"] == kept["activations"] == 512 + 512 + 512
    by_kind = kept["activations_by_kind"]
    assert by_kind["stored_inputs"] == 512 + 512
    assert by_kind["recompute_working_set"] == by_kind["freed_by_recompute"] == 512
    assert full.summary["simulated_time_s"] > none.summary["simulated_time_s"]
