"""Validation cases: long-context training with context parallelism (rules: validation/__init__.py).

Liang et al. 2024, "TorchTitan: One-stop PyTorch native solution for production ready LLM
pre-training", arXiv:2410.06511 (ICLR 2025), Table 5 (the same figures as pytorch/torchtitan
docs/performance.md, Table 2): Llama 3.1 8B on 8 GPUs, FSDP × CP = 8, one sequence per FSDP
rank ("local batch size 1"), full activation checkpointing, torch.compile and Float8 on the
``nn.Linear`` layers, at 32,768 to 262,144 tokens, the tokens per second per GPU. The
platform (docs/performance.md): Grand Teton hosts of 8 H100 (96 GB HBM2e, 2.4 TB/s, run at
the default 500 W power limit) joined by NVLink; throughput read at the 90th iteration.

Each case runs the ``llama3_8b`` preset (Llama 3.1 8B has Llama 3 8B's layers; it differs in
RoPE scaling only) timing-only on one host of 8 ``h100`` at bf16: the hybrid strategy with
``mesh: {data: FSDP, context: CP}``, ``zero: 3`` (parameters, gradients and optimizer state
sharded over data × context, as torchtitan's FSDP shards over its ``dp_shard_cp`` mesh),
flash attention and ``recompute: full``. The context axis runs ring attention on simdist's
clock; torchtitan runs PyTorch's experimental ``context_parallel`` (load-balanced causal
split; its default rotation all-gathers the key/value shards rather than passing them
around a ring): at these lengths both move far less than the attention computes, so the
difference does not show on the clock. Nothing is fitted here: the h100's one bf16
efficiency (0.43) is the only constant.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from validation import Case
from validation.layouts import h100_cluster

TITLE = "Long-context training (context parallelism)"

GPUS = 8
STEPS = 2


def torchtitan_scenario(context: int, seq_len: int) -> Any:
    """Llama 3.1 8B, timing-only, ``STEPS`` Adam steps at bf16 without variability: ``8 /
    context`` FSDP copies × ``context`` context ranks on one host of 8 H100, one
    ``seq_len``-token sequence per copy."""
    data = GPUS // context
    return scenario_from_dict(
        {
            "name": f"validate_torchtitan_llama3_8b_cp{context}",
            "seed": 0,
            "numerics": False,
            "cluster": h100_cluster(1),  # one host: its 8 devices are GPUS
            "workload": {
                "model": {"name": "gpt", "preset": "llama3_8b", "seq_len": seq_len},
                "global_batch_size": data,
                "attention": "flash",
                "optimizer": {"name": "adam", "learning_rate": 3e-4},
                "steps": STEPS,
            },
            "strategy": {
                "kind": "hybrid",
                "mesh": {"data": data, "context": context},
                "zero": 3,
                "recompute": "full",
            },
        }
    )


@cache
def torchtitan_tokens_per_s(context: int, seq_len: int) -> float:
    """Tokens per second per GPU as Table 5 gives them: a step's tokens (one sequence per
    FSDP copy) / (step time × GPUs)."""
    summary = run(torchtitan_scenario(context, seq_len)).summary
    step_s = summary["simulated_time_s"] / summary["steps"]
    return (GPUS // context) * seq_len / step_s / GPUS


def _torchtitan_row(
    context: int, seq_len: int, published: float, within_pct: float, why: str, quick: bool = False
) -> Case:
    return Case(
        source="Liang et al. 2024 (TorchTitan), Table 5",
        layout=f"Llama 3.1 8B, FSDP {GPUS // context} × CP {context}, 8 H100 (one host), "
        f"{seq_len:,}-token sequences, one per FSDP rank, full recomputation",
        quantity="tokens/s per GPU",
        published=published,
        predict=lambda: torchtitan_tokens_per_s(context, seq_len),
        quick=quick,
        expect_within_pct=within_pct,
        note=why,
    )


_SHORT_WHY = (
    "Float8 on the linear layers (the run's; simdist has no fp8 and runs them at bf16) is not "
    "on simdist's clock: the linears are {share} of the FLOPs simdist charges at this length, "
    "and the same source's Table 1 (torchtitan docs/performance.md: 6,667 to 8,532 tokens/s "
    "at 8,192 tokens, 1.28x, the linears 77 % of that run) makes them 1.39x faster, "
    "{gain} here ({after} with it)"
)
_LONG_WHY = (
    "too fast, Float8 aside ({gain}, {after} with it): the published rate implies {implied} "
    "TFLOP/s per GPU of executed work (the causal half of the attention scores, the "
    "recomputed forward included) where the 65,536-token row implies 324; the rate falls by a "
    "third between CP 2 and CP 4, but on simdist's clock the ring is hidden at both (compute "
    "99.6 % of a step or more) and every charged FLOP runs at the h100's one bf16 "
    "efficiency, so no term simdist models moves; the cause is not measured"
)

# Liang et al. 2024, Table 5: FSDP, CP, sequence length, tokens/s per GPU. The shares, the
# Float8 gains and the implied rates are TEXT's count (Megatron's 6·N + 12·l·h·s a token with
# the recomputed forward; the linear layers and the output head against the attention core).
CASES: list[Case] = [
    _torchtitan_row(
        1, 32_768, 3890.0, 20.0, _SHORT_WHY.format(share="46 %", gain="+15 %", after="-3 %")
    ),
    _torchtitan_row(
        2, 65_536, 2540.0, 20.0, _SHORT_WHY.format(share="30 %", gain="+9 %", after="-8 %")
    ),
    _torchtitan_row(
        4, 131_072, 1071.0, 20.0, _LONG_WHY.format(gain="+5 %", after="+24 %", implied="210")
    ),
    _torchtitan_row(
        8,
        262_144,
        548.0,
        30.0,
        _LONG_WHY.format(gain="+3 %", after="+30 %", implied="183"),
        quick=True,
    ),
]

TEXT = """\
TorchTitan's Table 5 (Liang et al. 2024) trains Llama 3.1 8B on one host of 8 H100 at 32,768
to 262,144 tokens a sequence, the sequence split over CP = 1 to 8 GPUs and the model sharded
over all 8 (FSDP × CP), one sequence per FSDP rank, every block recomputed, and gives the
tokens per second per GPU. Each row runs here as the ``llama3_8b`` preset under the hybrid
strategy (``mesh: {data: FSDP, context: CP}``, ``zero: 3``, flash attention,
``recompute: full``) on the ``h100`` profile at bf16. The context axis runs ring attention
where PyTorch's ``context_parallel`` all-gathers the key/value shards after the first block's
attention (torchtitan's default ``context_parallel_rotate_method: allgather``);
either way a step is 99 to 99.8 % compute on simdist's clock (the ring's 128 MiB blocks hide
behind the attention), so the rows test how simdist prices the work of long sequences.

simdist predicts 3,278, 2,136, 1,259 and 691 tokens/s against 3,890, 2,540, 1,071 and 548:
−16 %, −16 %, +18 % and +26 %, all four outside the band, on both sides of it. Counted as
Megatron counts a step (6·N + 12·l·h·s FLOPs a token, plus the recomputed forward), the
linear layers and the output head are 46, 30, 18 and 10 % of the FLOPs at the four lengths,
the attention core the rest. The run has Float8 on its linear layers and simdist has no
fp8; the source's own Table 1 (6,667 to 8,532 tokens/s at 8,192 tokens, 1.28×, on a run
whose linears are 77 % of the FLOPs) makes them 1.39× faster, worth +15, +9, +5 and +3 % at
these lengths: with it the two short rows would be −3 % and −8 %, the long ones +24 % and
+30 %. The long rows' gap is a fall the clock does not have: with the causal half of the
s×s scores as the executed attention, the published rates imply 363, 324, 210 and 183
TFLOP/s per GPU of executed work (37, 33, 21 and 19 % of the peak, at the cluster's 500 W
power limit): a third of the rate goes between CP 2 and CP 4 (2,540 to 1,071 tokens/s,
÷2.37, where the FLOPs a token grow 1.70×). On simdist's clock the ring is hidden at every
CP and every charged FLOP runs at the h100's one bf16 efficiency (0.43, on every s×s score,
masked or not), so its rate stays at 420 TFLOP/s charged and nothing it models moves. The
cause is not measured here (candidates: PyTorch's all-gathered K/V at 84 GiB of 96 per
GPU, sustained power capping, the per-block attention kernels); a flash-attention
efficiency of its own would be a second constant per device, which the calibration rule
does not allow, so the rows stay outside the band and say so.

The Llama 3 paper's context-parallel row (Dubey et al. 2024, Table 4: 405B, TP 8 × CP 16 ×
PP 16 on 16,384 H100, 131,072-token sequences, 16M tokens a batch, 380 TFLOP/s per GPU;
Llama 3's CP all-gathers keys and values rather than passing them around a ring) is not
run: its batch is 16 sequences per data copy, so one copy is 2,048 GPUs × 8 attention
layers a stage × 16 micro-batches × 31 ring messages, about 8M messages a step (simdist
moves about 6,000 a second, measured on a 2-layer slice: over 20 minutes), and its pipeline
would idle 15/31 of a flush at M = 16 under 1F1B (15/47 with the interleaved
schedule at V = 2, which the two Llama 3 rows above run).
"""
