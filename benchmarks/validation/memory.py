"""Validation cases: activation and model-state bytes (rules: validation/__init__.py).

simdist's memory model (simdist/memory/accounting.py, simdist/activation_memory.py) counts each
layer's stored tensors and the model state per strategy; these cases compare it with three
published accountings, through the same scenario machinery a run's memory check uses
(``ReplicaLayers`` of the gpt's footprint, the strategy's sharding, recomputation and
attention):

* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  arXiv:2205.05198, Table 2: activation bytes per transformer layer, in units of s·b·h, for
  their 22B model (a = 64, h = 6144, s = 2048; Table 3);
* Megatron-LM's ``megatron/training/theoretical_memory_usage.py`` (NVIDIA/Megatron-LM,
  ``compute_activation_memory`` with sequence parallelism and selective recomputation,
  ``compute_activation_memory_without_sp``, ``compute_weight_and_optimizer_memory``):
  activations of the first pipeline stage and weights + optimizer state of the most loaded
  shard, re-derived here from its formulas (not its code);
* Rajbhandari et al. 2020 (ZeRO), arXiv:1910.02054, Fig. 1: model state per device for
  Ψ = 7.5B, N_d = 64, K = 12 under data parallelism and ZeRO stages 1-3.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from simdist.layers import stage_bounds as bounds
from simdist.memory.accounting import ReplicaLayers, StagedReplica, scenario_memory
from simdist.numerics.memory import gpt_footprint
from simdist.scenario import scenario_from_dict
from simdist.strategies.pipeline.fit import chunk_memories
from simdist.strategies.pipeline.plan import peak_in_flight, stage_ops
from validation import Case

TITLE = "Memory: activations and model state (Korthikanti, Megatron-LM, ZeRO)"

SEQ, VOCAB = 2048, 51200
# Korthikanti et al. 2022, Table 3: (heads, hidden, layers, t, p) of their models.
GPT_22B = (64, 6144, 48)
GPT_175B = (96, 12288, 96)
# Megatron-LM Table 1's 7.5B (Narayanan et al. 2021): Ψ = 7.47e9, ZeRO Fig. 1's 7.5B.
GPT_7B = (32, 4096, 36)
GB = 1e9


def scenario(
    shape: tuple[int, int, int],
    strategy: dict[str, Any],
    devices: int = 8,
    batch: int = 1,
    flash: bool = False,
) -> Any:
    """A timing-only gpt of ``shape`` (heads, hidden, layers) on A100s at fp16, Adam."""
    heads, hidden, layers = shape
    per_host = min(devices, 8)
    return scenario_from_dict(
        {
            "name": "validate_memory",
            "numerics": False,
            "cluster": {
                "hosts": devices // per_host,
                "devices_per_host": per_host,
                "device": {"profile": "a100", "precision": "fp16"},
            },
            "strategy": strategy,
            "workload": {
                "model": {
                    "name": "gpt",
                    "layers": layers,
                    "hidden": hidden,
                    "heads": heads,
                    "seq_len": SEQ,
                    "vocab": VOCAB,
                },
                "global_batch_size": batch,
                "optimizer": {"name": "adam", "learning_rate": 1e-4},
                "steps": 1,
                "attention": "flash" if flash else "standard",
            },
        }
    )


@cache
def _layers(shape: tuple[int, int, int], batch: int) -> ReplicaLayers:
    spec = scenario(shape, {"kind": "one_device"}).workload.clock_model
    return ReplicaLayers.of_footprint(gpt_footprint(spec, None), batch)


def layer_sbh(strategy: dict[str, Any], flash: bool = False) -> float:
    """Bytes one device stores for one transformer layer of the 22B model (its attention
    and MLP, simdist layers 1 and 2) for one sequence, in units of s·b·h: the recomputed
    working set (transient, in the backward) left out, as Table 2 leaves it."""
    s = scenario(GPT_22B, strategy, flash=flash)
    staged = StagedReplica(s, _layers(GPT_22B, 1), "fp16", 1)
    held = staged.stage(1, 3, 1, pipedream=False, rematerialization=False)
    parts = held.activation_parts
    return (held.activations - parts.recompute_working_set) / (SEQ * GPT_22B[1])


def korthikanti_sbh(t: int, sp: bool, recompute: str, flash: bool = False) -> float:
    """Korthikanti et al. 2022, Table 2 (s·b·h units), for the 22B model."""
    a, h = GPT_22B[0], GPT_22B[1]
    scores = 0.0 if flash or recompute == "selective" else 5 * a * SEQ / h / t
    if recompute == "full":
        return 2 / t if sp else 2.0
    return (34 / t if sp else 10 + 24 / t) + scores


# ---------------------------------------------------------------- Megatron-LM's formulas


def megatron_activations(
    shape: tuple[int, int, int],
    t: int,
    p: int,
    sp: bool,
    micro_batches: int,
    b: int = 1,
    virtual_stages: int | None = None,
) -> float:
    """theoretical_memory_usage.py's activation bytes (first pipeline stage), with sequence
    parallelism (``compute_activation_memory``: assumes selective recomputation) or
    without (``compute_activation_memory_without_sp``, which adds 5 %); ffn = 4h. With
    ``virtual_stages`` v (the interleaved schedule) × ``interleaved_schedule_memory_penalty``
    1 + (p − 1)/(p·v) (Korthikanti et al. 2022, Sec. 4.2.3) in place of the min(1, M/p)
    discount (NVIDIA/Megatron-LM at 00caa53)."""
    _, h, layers = shape
    sbh = SEQ * b * h
    per_layer = sbh * (18 + 4 * 4) if sp else sbh * (10 + 24 / t)
    total = per_layer * layers + 8 * SEQ * b * p + sbh * p
    if virtual_stages is not None:
        total *= 1 + (p - 1) / (p * virtual_stages)
    elif p > 1:
        total *= min(1, micro_batches / p)
    if sp:
        if p == 1:
            total += sbh * 4 * (1 + VOCAB / h)
        return total / t
    if p == 1:
        total += (SEQ * b * VOCAB / t + sbh) * 2
    return total * 1.05


def megatron_state(shape: tuple[int, int, int], t: int, d: int, distributed: bool) -> float:
    """theoretical_memory_usage.py's weight and optimizer bytes of the most loaded shard
    (p = 1, tied embeddings): 18 bytes a parameter, or 6 + 12/d with the distributed
    optimizer."""
    _, h, layers = shape
    block = layers * (2 * h * (4 * h + 2) + 2 * h * h * 2) + 2 * h
    shard = (block + h * VOCAB) / t
    return shard * (6 + 12 / d if distributed else 18)


def simdist_total_activations(strategy: dict[str, Any], devices: int) -> float:
    s = scenario(GPT_22B, strategy, devices=devices)
    return scenario_memory(s, _layers(GPT_22B, 1), "fp16").activations


def simdist_pipeline_activations(t: int, p: int, micro_batches: int) -> float:
    """Stage 0 of a hybrid 175B layout (t × p devices, 1F1B): the embeddings and L/p
    blocks, the micro-batches in flight at its peak (simdist's own schedule)."""
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": 1, "tensor": t, "pipeline": p},
        "micro_batches": micro_batches,
        "sequence_parallel": True,
        "recompute": "selective",
    }
    s = scenario(GPT_175B, strategy, devices=t * p, batch=micro_batches)
    layers = _layers(GPT_175B, micro_batches)
    peak = peak_in_flight(stage_ops("1f1b", p, micro_batches)[0])
    stop = 1 + 2 * GPT_175B[2] // p
    held = StagedReplica(s, layers, "fp16", micro_batches).stage(
        0, stop, peak, pipedream=False, rematerialization=False
    )
    return held.activations


def simdist_interleaved_activations(t: int, p: int, v: int, micro_batches: int) -> float:
    """Device 0 of a hybrid 175B layout (t × p devices, interleaved 1F1B, v chunks of L/(p·v)
    blocks each, the embeddings on chunk 0 and the head on the last): its chunks'
    micro-batches in flight at its peak (simdist's own schedule and count,
    :func:`simdist.strategies.pipeline.fit.chunk_memories`)."""
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": 1, "tensor": t, "pipeline": p},
        "micro_batches": micro_batches,
        "schedule": "interleaved",
        "virtual_stages": v,
        "sequence_parallel": True,
        "recompute": "selective",
    }
    s = scenario(GPT_175B, strategy, devices=t * p, batch=micro_batches)
    layers = _layers(GPT_175B, micro_batches)
    blocks = 2 * GPT_175B[2] // (p * v)  # profile layers of a chunk: attention + MLP each
    counts = [1 + blocks] + [blocks] * (p * v - 2) + [blocks + 1]
    staged = StagedReplica(s, layers, "fp16", micro_batches)
    return chunk_memories(staged, bounds(counts), p, v, micro_batches)[0].activations


def simdist_state(shape: tuple[int, int, int], strategy: dict[str, Any], devices: int) -> float:
    s = scenario(shape, strategy, devices=devices, batch=devices)  # one sequence a device
    held = scenario_memory(s, _layers(shape, 1), "fp16")
    return held.params + held.gradients + held.optimizer


# ---------------------------------------------------------------- the rows

K22 = "Korthikanti et al. 2022, Table 2"
MEG = "Megatron-LM theoretical_memory_usage.py"
ZERO = "Rajbhandari et al. 2020 (ZeRO), Fig. 1"
SP8 = {"kind": "tensor_parallel", "tensor": 8, "sequence_parallel": True}
TP8 = {"kind": "tensor_parallel", "tensor": 8}


def _row(source: str, layout: str, quantity: str, published: float, predict: Any) -> Case:
    return Case(source, layout, quantity, published, predict, quick=True, expect_within_pct=10.0)


CASES: list[Case] = [
    _row(
        K22,
        "22B layer, no parallelism",
        "bytes / sbh",
        korthikanti_sbh(1, False, "none"),
        lambda: layer_sbh({"kind": "one_device"}),
    ),
    _row(
        K22,
        "22B layer, t=8",
        "bytes / sbh",
        korthikanti_sbh(8, False, "none"),
        lambda: layer_sbh(TP8),
    ),
    _row(
        K22,
        "22B layer, t=8 + sequence parallel",
        "bytes / sbh",
        korthikanti_sbh(8, True, "none"),
        lambda: layer_sbh(SP8),
    ),
    _row(
        K22,
        "22B layer, t=8 + SP + selective recompute",
        "bytes / sbh",
        korthikanti_sbh(8, True, "selective"),
        lambda: layer_sbh({**SP8, "recompute": "selective"}),
    ),
    _row(
        K22,
        "22B layer, t=8 + selective recompute",
        "bytes / sbh",
        korthikanti_sbh(8, False, "selective"),
        lambda: layer_sbh({**TP8, "recompute": "selective"}),
    ),
    _row(
        K22,
        "22B layer, full recompute",
        "bytes / sbh",
        korthikanti_sbh(1, False, "full"),
        lambda: layer_sbh({"kind": "one_device", "recompute": "full"}),
    ),
    _row(
        K22,
        "22B layer, t=8 + SP + full recompute",
        "bytes / sbh",
        korthikanti_sbh(8, True, "full"),
        lambda: layer_sbh({**SP8, "recompute": "full"}),
    ),
    _row(
        "Dao et al. 2022 (flash attention)",
        "22B layer, t=8, attention: flash",
        "bytes / sbh",
        korthikanti_sbh(8, False, "none", flash=True),
        lambda: layer_sbh(TP8, flash=True),
    ),
    _row(
        MEG,
        "22B activations, t=8 + SP + selective, b=1",
        "GB",
        megatron_activations(GPT_22B, 8, 1, True, 1) / GB,
        lambda: simdist_total_activations({**SP8, "recompute": "selective"}, 8) / GB,
    ),
    _row(
        MEG,
        "22B activations, t=8 + selective (no SP), b=1",
        "GB",
        megatron_activations(GPT_22B, 8, 1, False, 1) / GB,
        lambda: simdist_total_activations({**TP8, "recompute": "selective"}, 8) / GB,
    ),
    _row(
        MEG,
        "175B first stage, t=8 p=8 (1F1B, 8 micro-batches), SP + selective",
        "GB",
        megatron_activations(GPT_175B, 8, 8, True, 8) / GB,
        lambda: simdist_pipeline_activations(8, 8, 8) / GB,
    ),
    _row(
        MEG,
        "175B first stage, t=8 p=8 v=2 (interleaved 1F1B, 16 micro-batches), SP + selective",
        "GB",
        megatron_activations(GPT_175B, 8, 8, True, 16, virtual_stages=2) / GB,
        lambda: simdist_interleaved_activations(8, 8, 2, 16) / GB,
    ),
    _row(
        MEG,
        "22B weights + Adam, t=8, fp32 gradient buffers",
        "GB",
        megatron_state(GPT_22B, 8, 1, False) / GB,
        lambda: simdist_state(GPT_22B, {**TP8, "grad_reduce": "fp32"}, 8) / GB,
    ),
    _row(
        MEG,
        "22B weights + Adam, t=8 d=8, distributed optimizer",
        "GB",
        megatron_state(GPT_22B, 8, 8, True) / GB,
        lambda: (
            simdist_state(
                GPT_22B,
                {
                    "kind": "hybrid",
                    "mesh": {"data": 8, "tensor": 8, "pipeline": 1},
                    "zero": 1,
                    "grad_reduce": "fp32",
                },
                64,
            )
            / GB
        ),
    ),
]
# ZeRO Fig. 1: Ψ = 7.5B, K = 12, N_d = 64.
CASES += [
    _row(
        ZERO,
        f"7.5B model state, {name}, 64 GPUs",
        "GB",
        published,
        lambda strategy=strategy: simdist_state(GPT_7B, strategy, 64) / GB,
    )
    for name, strategy, published in (
        ("data parallel", {"kind": "multi_worker_mirrored"}, 120.0),
        ("ZeRO-1", {"kind": "zero", "stage": 1}, 31.4),
        ("ZeRO-2", {"kind": "zero", "stage": 2}, 16.6),
        ("ZeRO-3", {"kind": "zero", "stage": 3}, 1.88),
    )
]

TEXT = """\
Memory is the planner's first question (does it fit?), and it is compared here byte for
byte with the accountings the field uses, through the scenario path a run's memory check
takes. Activations come from each layer's stored tensors (simdist/activation_memory.py):
the attention block's QKV input, Q and K, the softmax output, its dropout mask and output,
V, the projection input and the dropout mask after it; the MLP's first-linear input, the
GeLU's input and output and its dropout mask; both LayerNorms' inputs — at the training
precision (2 bytes) and 1-byte masks. Korthikanti et al.'s Table 2 rows come out exactly
(0.0 %): the sum of those tensors is their formula, split where Megatron splits it.

Megatron-LM's theoretical_memory_usage.py adds the embedding's and output layer's terms:
simdist stores int32 token ids (Megatron counts 8 bytes a token), a LayerNorm and
projection input and float32 logits for the cross-entropy in the head, and — with
selective recomputation — the one attention core that exists again in the backward
(5·a·s²·b/t, the working set: a few percent of L layers' 34·sbh/t), which the formula
leaves out. Megatron counts 18 bytes a parameter: its float32 gradient buffer
(``main_grad``) — simdist's ``grad_reduce: fp32``; by default simdist reduces and keeps
gradients in the half precision (DeepSpeed's default), 16 bytes. Its parameter count
leaves out the position embeddings and the final LayerNorm that simdist's gpt has. The
pipeline row runs simdist's own 1F1B schedule: stage 0 holds 8 micro-batches of the
embeddings and 12 blocks. The interleaved row (v = 2: 16 chunks of 6 blocks, device 0
holding chunks 0 and 8) runs simdist's interleaved schedule: at its peak device 0 holds
(8 − 1)·2 + 8 + 1 = 23 chunk micro-batches, 1.428 times the 1F1B row's bytes where the
formula multiplies by 1 + (p − 1)/(p·v) = 1.4375 (Korthikanti et al. 2022, Sec. 4.2.3).
simdist takes the moment its stored bytes peak, 16 micro-batches of chunk 0 (which holds
the embeddings) and 7 of chunk 8; the formula scales the whole stage, the embedding terms
and the recomputed working set included.

ZeRO's Figure 1 (7.5B, K = 12, 64 GPUs) is the same arithmetic as simdist's model state:
2Ψ + 2Ψ + 12Ψ replicated, then partitioned stage by stage; the 7.5B row of Megatron-LM's
Table 1 has Ψ = 7.47e9.
"""
