"""Validation cases: DeepSpeed-MoE's training throughput on 128 A100s (rules:
validation/__init__.py).

DeepSpeed team, "DeepSpeed-MoE for NLG: Reducing the training cost of language models by 5
times", DeepSpeed blog, 2021-12-09 (github.com/deepspeedai/DeepSpeed,
docs/_posts/2021-12-09-deepspeed-moe-nlg.md; the NLG results of Rajbhandari et al. 2022,
"DeepSpeed-MoE", arXiv:2201.05596). Its models are GPT-like: 1.3B (24 layers, hidden 2048,
16 heads) and 6.7B (32 layers, hidden 4096, 32 heads); "1.3B+MoE-128" adds 128 experts on
every other feed-forward layer (12 MoE layers), top-1 gating. Both were pre-trained with
DeepSpeed on 128 A100 GPUs, "a combination of data parallel and expert parallel". Table 2
("Training throughput (on 128 A100 GPUs)"): 6.7B dense 70 training samples per second,
1.3B+MoE-128 372. The example script of the release (github.com/deepspeedai/
Megatron-DeepSpeed, examples_deepspeed/MoE/ds_pretrain_gpt_1.3B_MoE128.sh) gives the rest:
sequences of 2,048, global batch 512 for the 1.3B and 1,024 for the 6.7B (its GPT-3 configs),
expert-parallel size min(experts, GPUs) = 128, capacity factor 1.0 with tokens dropped, fp16,
ZeRO stage 0, activation checkpointing. The 6.7B dense run's layout is not published; it runs
here as ZeRO-1 data parallelism (the 6.7B's fp16 Adam state does not fit an 80 GB A100
without partitioning).

Each case is a timing-only run of simdist's configurable ``gpt`` (with ``experts: 128,
top_k: 1, moe_every: 2`` for the MoE model) on the ``a100`` profile at fp16 with
``recompute: full``, GPT-2's vocabulary, DGX A100 nodes (NVLink and 8 × 200 Gb/s HDR
InfiniBand, as :mod:`validation.layouts`); nothing is fitted here.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from validation import Case
from validation.layouts import IB, NVLINK

TITLE = "Mixture-of-experts training (DeepSpeed-MoE)"

SOURCE = "DeepSpeed-MoE for NLG blog 2021, Table 2"
SEQ_LEN = 2048
VOCAB = 50257  # GPT-2's byte-pair vocabulary, as the release's gpt2-vocab.json
GPUS = 128
# Per GPU: 512 sequences over 128 GPUs (1.3B+MoE-128), 1,024 (6.7B).
MOE_PER_GPU = 4
DENSE_PER_GPU = 8
# The MoE case simulates 64 of the 128 GPUs (expert axis 64, two experts a GPU) and gives
# their per-GPU rate × 128: every all-to-all is a message per pair of GPUs, and the whole
# 128-GPU layout (16,256 messages an all-to-all, 48 all-to-alls a step) takes 270 s to
# simulate. Measured per-GPU rates at 16, 32, 64 and 128 GPUs: 4.776, 4.837, 4.861 and
# 4.863 samples/s (the 64-GPU slice is within 0.1 % of the whole layout).
MOE_SLICE_GPUS = 64


def cluster(gpus: int) -> dict[str, Any]:
    """``gpus`` A100s in DGX A100 nodes of 8, without variability, fp16; FIFO sharing of
    links (the all-to-alls' thousands of equal messages: fair sharing gives the same step at
    16 GPUs, 10 times slower to simulate)."""
    return {
        "hosts": gpus // 8,
        "devices_per_host": 8,
        "device": {"profile": "a100", "precision": "fp16", "variability": 0},
        "links": {
            "intra_host": {"bandwidth": NVLINK[0], "latency": NVLINK[1]},
            "network": {"bandwidth": IB[0], "latency": IB[1]},
        },
        "network": {"protocol": "nccl-ib", "intra_host": "nvlink", "sharing": "fifo"},
    }


def gpt(layers: int, hidden: int, heads: int, **moe: Any) -> dict[str, Any]:
    """The configurable gpt at the blog's sizes."""
    return {
        "name": "gpt",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "seq_len": SEQ_LEN,
        "vocab": VOCAB,
        **moe,
    }


def moe_scenario() -> Any:
    """1.3B+MoE-128 on :data:`MOE_SLICE_GPUS` A100s, expert-parallel over all of them, one
    Adam step, uniform routing (DeepSpeed's load-balancing loss keeps the experts even)."""
    gpus = MOE_SLICE_GPUS
    return scenario_from_dict(
        {
            "name": "validate_deepspeed_moe_1.3b_moe128",
            "seed": 0,
            "numerics": False,
            "cluster": cluster(gpus),
            "workload": {
                "model": gpt(24, 2048, 16, experts=128, top_k=1, capacity_factor=1.0, moe_every=2),
                "global_batch_size": MOE_PER_GPU * gpus,
                "optimizer": {"name": "adam", "learning_rate": 1.2e-4},
                "steps": 1,
            },
            "strategy": {
                "kind": "expert_parallel",
                "expert": gpus,
                "data": 1,
                "routing": "uniform",
                "recompute": "full",
            },
        }
    )


def dense_scenario() -> Any:
    """6.7B dense on 128 A100s, ZeRO-1 data parallelism, one Adam step."""
    return scenario_from_dict(
        {
            "name": "validate_deepspeed_moe_6.7b_dense",
            "seed": 0,
            "numerics": False,
            "cluster": cluster(GPUS),
            "workload": {
                "model": gpt(32, 4096, 32),
                "global_batch_size": DENSE_PER_GPU * GPUS,
                "optimizer": {"name": "adam", "learning_rate": 1.2e-4},
                "steps": 1,
            },
            "strategy": {"kind": "zero", "stage": 1, "recompute": "full"},
        }
    )


@cache
def moe_samples_per_s() -> float:
    """1.3B+MoE-128's training samples per second on 128 GPUs: the slice's per-GPU rate × 128."""
    summary = run(moe_scenario()).summary
    step_s = summary["simulated_time_s"] / summary["steps"]
    return MOE_PER_GPU / step_s * GPUS


@cache
def dense_samples_per_s() -> float:
    """6.7B dense's training samples per second on 128 GPUs."""
    summary = run(dense_scenario()).summary
    step_s = summary["simulated_time_s"] / summary["steps"]
    return DENSE_PER_GPU * GPUS / step_s


MOE_WHY = (
    "the published run reaches 54 TFLOP/s of model FLOPs per GPU (6·N + 12·l·h·s a token, N "
    "the 1.3B parameters a token multiplies: 17 % of the A100's 312, 23 % counting the "
    "recomputed forward), the 6.7B dense run 48 (15 %, 21 %); the a100 fp16 efficiency (0.52, "
    "Megatron-LM's 1T row) prices a GEMM at 2.3 times that, and simdist's step is 86 % "
    "compute (0.71 of 0.82 s), so no communication term is left to correct: DeepSpeed's 2021 "
    "runs went at under half of Megatron-LM's rate, which one constant per device cannot "
    "carry (text)"
)
DENSE_WHY = (
    "the run's layout is not published (ZeRO-1 data parallelism assumed here); at 48 TFLOP/s "
    "of model FLOPs per GPU (15 % of peak, 21 % counting the recomputed forward) it ran at "
    "40 % of the rate of Megatron-LM's GEMMs the a100 constant (0.52) comes from, and "
    "simdist's step is 96 % compute (text)"
)
RATIO_WHY = (
    "the constant cancels in the ratio, leaving the MoE model's own costs: its model FLOPs "
    "are 4.74 times fewer a token than the 6.7B's, the published gain is 5.31 (the MoE run 12 "
    "% more efficient per FLOP than the dense one), simdist's 3.67 (23 % less): each MoE "
    "layer costs 66 % more than the dense MLP it replaces (router, dispatch scatter and "
    "combine gather priced as memory traffic: 12 of them add 0.11 s, 15 % of the compute), "
    "the all-to-alls leave 0.06 s exposed and the busiest expert 0.05 s of waiting (text)"
)

LAYOUT = "128 A100, 2,048-token sequences"
CASES: list[Case] = [
    Case(
        source=SOURCE,
        layout=f"1.3B+MoE-128 (24 layers, 2048, 128 experts every other layer, top-1), "
        f"expert parallel 128, {LAYOUT}, batch 512",
        quantity="training samples/s",
        published=372.0,
        predict=moe_samples_per_s,
        expect_within_pct=75.0,
        note=MOE_WHY,
    ),
    Case(
        source=SOURCE,
        layout=f"6.7B dense (32 layers, 4096), data parallel (layout not published; ZeRO-1 "
        f"here), {LAYOUT}, batch 1,024",
        quantity="training samples/s",
        published=70.0,
        predict=dense_samples_per_s,
        quick=True,
        expect_within_pct=150.0,
        note=DENSE_WHY,
    ),
    Case(
        source=SOURCE,
        layout=f"1.3B+MoE-128 over 6.7B dense (the table's throughput gain, 372 / 70), {LAYOUT}",
        quantity="× the dense samples/s",
        published=372.0 / 70.0,
        predict=lambda: moe_samples_per_s() / dense_samples_per_s(),
        expect_within_pct=35.0,
        note=RATIO_WHY,
    ),
]

TEXT = """\
The DeepSpeed-MoE release (DeepSpeed blog, 2021; the NLG results of Rajbhandari et al. 2022)
gives, in its Table 2, the training throughput on 128 A100s of a GPT-like 1.3B model with
128 experts on every other feed-forward layer (top-1, 52B parameters) and of the 6.7B dense
model of the same quality: 372 and 70 samples a second of 2,048 tokens. They run here as
simdist's configurable ``gpt`` with ``experts: 128, top_k: 1, capacity_factor: 1.0,
moe_every: 2`` under ``expert_parallel`` (the expert axis over all the GPUs, as the
release's script sets it; uniform routing, one draw a MoE layer and step; each all-to-all a
message per pair of GPUs with the tokens one keeps for the other's experts), and as the
dense ``gpt`` under ZeRO-1 (the dense run's layout is not published), both with full
recomputation (the script's activation checkpointing) at fp16. The MoE case simulates 64 of
the 128 GPUs and scales their per-GPU rate (measured at 16, 32, 64 and 128 GPUs: 4.776,
4.837, 4.861, 4.863 samples a second a GPU; the whole layout takes 270 s to simulate).

simdist predicts 622 and 170 samples a second against 372 and 70: +67 % and +142 %, outside
the band and said so. In model FLOPs (6·N + 12·l·h·s a token, N the parameters a token
multiplies) the published runs reach 54 and 48 TFLOP/s a GPU, 17 % and 15 % of the A100's
fp16 peak (23 % and 21 % counting the recomputed forward), where the ``a100`` constant
(0.52) is Megatron-LM's 1T row: DeepSpeed's runs of 2021 went at under half of Megatron-LM's
GEMM rate, and simdist's steps are 86 % and 96 % compute, so nothing but the per-device
constant could close the gap, and it is not fitted per case. The throughput gain, where the
constant cancels, is the row that tests the MoE clock itself: published 5.31, simdist 3.67
(-31 %). The MoE model does 4.74 times fewer model FLOPs a token than the 6.7B; the
published MoE run was 12 % *more* efficient per FLOP than its dense counterpart, simdist's
is 23 % less: each MoE layer costs 66 % more than the MLP it replaces (5.6 ms forward
against 3.4: the router's softmax and top-k, the dispatch scatter into 128 × 4,096 slots and
the combine gather, priced as the memory traffic XLA counts for them), 0.11 s over the 12
layers (15 % of the compute), the all-to-alls leave 0.06 s exposed and the busiest expert
0.05 s of waiting (imbalance 1.05, 0.6 % dropped). How much of the routing DeepSpeed fused
or overlapped is not published. The capacity is over the global batch here (4,096 slots an
expert), where DeepSpeed's is per device (64), so simdist drops fewer tokens than DeepSpeed
would.
"""
