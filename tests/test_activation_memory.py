"""Activation memory from each layer's stored tensors (simdist/activation_memory.py) against
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198), Table 2, by hand, exactly.

A GPT layer (attention and MLP, one simdist layer each) at 16-bit activations, s positions,
b examples, h hidden, a heads, tensor group t:

* no parallelism: sbh(34 + 5as/h)
* tensor parallel: sbh(10 + 24/t + 5as/(ht))
* tensor + sequence parallel: sbh(34/t + 5as/(ht))
* selective recomputation (with sequence parallelism): sbh·34/t
* full recomputation: 2sbh kept (the layer's input), /t with sequence parallelism.
"""

from __future__ import annotations

import pytest

from simdist.activation_memory import (
    ActivationTable,
    activations,
    gpt_layer_tensors,
    layer_tensors_of_outputs,
)
from simdist.gpt_shape import GptShape
from simdist.memory.accounting import ReplicaLayers, device_memory, scenario_memory
from simdist.numerics.memory import gpt_footprint
from simdist.scenario import scenario_from_dict
from simdist.sharding import Sharding

# The 22B model of Korthikanti et al. Table 3: a = 64, h = 6144, s = 2048, t = 8.
A, H, S, T, V = 64, 6144, 2048, 8, 51200
SBH = S * H  # b = 1
SCORES = 5 * A * S * S  # 5·as²b bytes at 16 bits (2 + 1 + 2 per score)
BLOCK = gpt_layer_tensors(GptShape(2, H, A, S, V))[1:3]  # h.0.attention, h.0.mlp


def layer_bytes(sharding: Sharding, **settings: object) -> int:
    """The bytes one device keeps of one GPT layer for one sequence, at 2 bytes."""
    held = activations(BLOCK, examples=1, act_nbytes=2, sharding=sharding, **settings)
    return held.total - held.recompute_working_set


def test_no_parallelism_is_34_sbh_plus_5_as2b() -> None:
    assert layer_bytes(Sharding()) == 34 * SBH + SCORES
    assert (34 * SBH + SCORES) / SBH == pytest.approx(140.67, abs=0.01)


def test_tensor_parallel_splits_24_sbh_and_the_scores() -> None:
    assert layer_bytes(Sharding(tensor=T)) == 10 * SBH + 24 * SBH // T + SCORES // T


def test_sequence_parallel_splits_everything() -> None:
    sp = Sharding(activations=T, tensor=T)
    assert layer_bytes(sp) == 34 * SBH // T + SCORES // T


def test_selective_recomputation_keeps_34_sbh_over_t() -> None:
    sp = Sharding(activations=T, tensor=T)
    held = activations(BLOCK, examples=1, act_nbytes=2, sharding=sp, recompute="selective")
    assert held.total - held.recompute_working_set == 34 * SBH // T
    assert held.freed_by_recompute == SCORES // T
    assert held.recompute_working_set == SCORES // T  # one layer's core, recomputed


def test_full_recomputation_keeps_the_layer_input() -> None:
    assert layer_bytes(Sharding(), recompute="full") == 2 * SBH
    assert layer_bytes(Sharding(activations=T, tensor=T), recompute="full") == 2 * SBH // T
    held = activations(BLOCK, examples=1, act_nbytes=2, sharding=Sharding(), recompute="full")
    assert held.recompute_working_set == 32 * SBH + SCORES  # all but the kept input
    assert held.freed_by_recompute == 32 * SBH + SCORES


def test_flash_attention_stores_no_scores() -> None:
    assert layer_bytes(Sharding(), flash=True) == 34 * SBH
    assert layer_bytes(Sharding(tensor=T), flash=True) == 10 * SBH + 24 * SBH // T


def test_breakdown_by_kind() -> None:
    """Stored inputs 30·sbh (the masks of the attention output and the MLP are sbh each, 1
    byte), the scores 5as²b, masks 2·sbh."""
    held = activations(BLOCK, examples=1, act_nbytes=2, sharding=Sharding())
    assert held.as_dict() == {
        "stored_inputs": 32 * SBH,
        "attention_scores": SCORES,
        "masks": 2 * SBH,
        "recompute_working_set": 0,
        "freed_by_recompute": 0,
    }


def test_layers_per_checkpoint_keep_one_input_per_group() -> None:
    """Four blocks, two per checkpoint: two inputs kept, one group of two recomputed."""
    blocks = gpt_layer_tensors(GptShape(4, H, A, S, V))[1:9]
    table = ActivationTable(
        blocks, act_nbytes=2, sharding=Sharding(), recompute="full", recompute_layers=2
    )
    held = table.span(examples=1)
    assert held.stored_inputs == 2 * 2 * SBH
    assert held.recompute_working_set == 2 * (34 * SBH + SCORES) - 2 * SBH


def test_layers_known_by_outputs_store_their_inputs() -> None:
    """Input 4 elements, outputs 16 and 8 in float32: 4·(4 + 16 + 8) bytes an example."""
    tensors = layer_tensors_of_outputs([16.0, 8.0], 4.0)
    held = activations(tensors, examples=3, act_nbytes=4, sharding=Sharding())
    assert held.total == 3 * 4 * (4 + 16 + 8)
    full = activations(tensors, examples=3, act_nbytes=4, sharding=Sharding(), recompute="full")
    assert full.stored_inputs == 3 * 4 * (4 + 16)  # each layer is its own checkpoint
    assert full.recompute_working_set == 3 * 4 * 8  # the last layer's output, recomputed


def gpt_scenario(strategy: dict, devices: int = 8) -> object:
    return scenario_from_dict(
        {
            "name": "gpt",
            "numerics": False,
            "cluster": {
                "devices_per_host": devices,
                "device": {"profile": "a100", "precision": "fp16"},
            },
            "strategy": strategy,
            "workload": {
                "model": {"name": "gpt", "layers": 4, "hidden": H, "heads": A, "seq_len": S},
                "batch_size": 1,
                "optimizer": {"name": "adam", "learning_rate": 1e-4},
                "steps": 1,
            },
        }
    )


def test_the_scenario_reads_the_model_tensors_and_the_strategy_split() -> None:
    """A gpt's footprint carries its tensors: 4 layers under TP8 + SP hold 4 × Table 2's
    row (the embedding's mask and ids and the head's tensors besides, split by t)."""
    sp = {"kind": "tensor_parallel", "tensor": T, "sequence_parallel": True}
    scenario = gpt_scenario(sp)
    footprint = gpt_footprint(scenario.workload.clock_model, None)
    layers = ReplicaLayers.of_footprint(footprint, 1)
    held = scenario_memory(scenario, layers, "fp16").activation_parts
    embeddings = S * 4 / T + SBH / T  # int32 ids, a 1-byte dropout mask
    head = 2 * 2 * SBH / T + 4 * S * 50257 / T  # LayerNorm and projection inputs, fp32 logits
    expected = 4 * (34 * SBH // T + SCORES // T) + embeddings + head
    assert held.total == pytest.approx(expected, abs=4)


def test_full_recompute_frees_what_it_recomputes() -> None:
    scenario = gpt_scenario({"kind": "zero", "stage": 3, "recompute": "full"})
    layers = ReplicaLayers.of_footprint(gpt_footprint(scenario.workload.clock_model, None), 1)
    none = device_memory(layers, precision="fp16", optimizer="adam", sharding=Sharding())
    full = scenario_memory(scenario, layers, "fp16")
    parts = full.activation_parts
    assert parts.stored_inputs < none.activation_parts.stored_inputs
    assert parts.attention_scores == 0
    blocks = 4 * (34 * SBH + SCORES)
    assert parts.freed_by_recompute == blocks - 4 * 2 * SBH
    assert none.activations - full.activations == parts.freed_by_recompute - (
        parts.recompute_working_set
    )
