"""Validation cases: ZeRO-100B's throughput on 400 V100s (rules: validation/__init__.py).

Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC20, arXiv:1910.02054v3. Sec. 10.1: 400 V100 32 GB GPUs, 25 DGX-2 nodes, 800 Gbps
between nodes; ZeRO-100B is ZeRO-DP stage 2 (optimizer state and gradients partitioned over
the data-parallel GPUs) plus ZeRO-R (partitioned activation checkpoints), combined with
Megatron-LM model parallelism inside a node; the models are "GPT-2 like". Appendix Table 5
("Model configurations for Figure 2") gives each ZeRO run's GPUs, MP degree, layers, hidden
size, attention heads and batch per data-parallel copy; Sec. 6.1 the sequence length (1024).
Figure 2 plots the achieved TFLOP/s per GPU; the text gives the 100B point ("over 38 TFlops
per GPU, and aggregate performance over 15 Petaflops", Sec. 1). The other points are read off
Figure 2 by the pixel centre of each marker against the axis grid (± 0.3 TFLOP/s).

Each case runs a short timing-only scenario of simdist's configurable ``gpt`` on the ``v100``
profile at fp16 (its efficiency 0.30 fitted on Megatron-LM's 39 TFLOP/s on one V100 and
frozen); nothing is fitted here.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from simdist.runtime.engine import run
from validation import BAND_PCT, Case
from validation.layouts import gpt_scenario

TITLE = "ZeRO-100B on 400 V100s (ZeRO paper)"

# Rajbhandari et al. 2020, Sec. 6.1: "a batch size of 32, sequence length of 1024".
SEQ_LEN = 1024
# GPT-2's byte-pair vocabulary (Radford et al. 2019); the paper's models are GPT-2 like.
VOCAB = 50257
# DGX-2: 16 V100s, each with 6 NVLink 2 links to the NVSwitches (25 GB/s per direction each,
# NVIDIA DGX-2 datasheet); between nodes "800 Gbps internode communication bandwidth"
# (Rajbhandari et al. 2020, Sec. 10.1), 100 GB/s a node.
GPUS_PER_NODE = 16
NVSWITCH = ("150GB/s", "5us")
IB = ("100GB/s", "5us")


def gpt_params(layers: int, hidden: int) -> int:
    """The ``gpt``'s parameters: 12lh² + 13lh + (V + s)h (Narayanan et al. 2021, Sec. 5.1)
    plus the final LayerNorm's 2h."""
    h = hidden
    return 12 * layers * h * h + 13 * layers * h + (VOCAB + SEQ_LEN) * h + 2 * h


def deepspeed_flops(layers: int, hidden: int, sequences: int) -> float:
    """FLOPs of ``sequences`` as DeepSpeed counts them: 8 per parameter per token (forward 2,
    backward 4, recomputed forward 2). DeepSpeedExamples, Megatron-LM-v1.1.5-ZeRO3/megatron/
    training.py, ``flops_calculator`` (commit 2cd968f2): ``approx_parameters_in_billions *
    args.batch_size * args.seq_length * 2.0 * 4.0``. The paper states no formula; this is its
    authors' own counter."""
    return 8.0 * gpt_params(layers, hidden) * sequences * SEQ_LEN


def scenario(layers: int, hidden: int, heads: int, mp: int, gpus: int, batch: int) -> Any:
    """Timing-only ``gpt`` on ``gpus`` V100s in DGX-2 nodes, ``batch`` sequences per
    data-parallel copy: ZeRO stage 2 over all of them when ``mp`` is 1; else tensor groups
    of ``mp`` inside a node × ``gpus / mp`` copies reducing their gradients (module text:
    why not ``kind: hybrid``)."""
    copies = gpus // mp
    if mp == 1:
        # ZeRO reduces each bucket of gradients as the backward fills it (Sec. 5.2;
        # DeepSpeed's overlap_comm), here as in the MP > 1 rows
        strategy: dict[str, Any] = {"kind": "zero", "stage": 2, "overlap_comm": True}
    else:
        strategy = {
            "kind": "hybrid",
            "mesh": {"data": copies, "tensor": mp, "pipeline": 1},
            "zero": 2,
            # ZeRO-R's partitioned activation checkpoints: each block's input split over
            # the MP group, as sequence parallelism splits it (Rajbhandari et al. Sec. 6.1)
            "sequence_parallel": True,
            # ZeRO reduces each bucket of gradients as the backward fills it, overlapping
            # the backward (Rajbhandari et al. 2020, Sec. 5.2; DeepSpeed's overlap_comm)
            "overlap_grad_reduce": True,
        }
    strategy["recompute"] = "full"
    return gpt_scenario(
        f"validate_zero_{layers}x{hidden}_mp{mp}_n{gpus}",
        (layers, hidden, heads, SEQ_LEN, VOCAB),
        (gpus, GPUS_PER_NODE, "v100-32gb", NVSWITCH, IB),
        batch * copies,
        strategy,
    )


@cache
def zero_tflops(layers: int, hidden: int, heads: int, mp: int, gpus: int, batch: int) -> float:
    """TFLOP/s per GPU as DeepSpeed counts it: :func:`deepspeed_flops` of one copy's batch /
    (iteration time × ``mp``). ZeRO-R checkpoints each block's input (Sec. 6.1): the
    scenario recomputes (``recompute: full``), so the clock holds the extra forward."""
    summary = run(scenario(layers, hidden, heads, mp, gpus, batch)).summary
    step_s = summary["simulated_time_s"] / summary["steps"]
    return deepspeed_flops(layers, hidden, batch) / step_s / mp / 1e12


def _row(
    params: str,
    shape: tuple[int, int, int],
    mp: int,
    batch: int,
    published: float,
    quick: bool = False,
    within_pct: float = BAND_PCT,
    note: str = "",
    gpus: int = 400,
    figure: int = 2,
) -> Case:
    layers, hidden, heads = shape
    return Case(
        source=f"Rajbhandari et al. 2020 (ZeRO), Fig. {figure}",
        layout=f"GPT {params} (l={layers}, h={hidden}), ZeRO-2, MP={mp}, {gpus} V100 32GB, "
        f"batch {batch}/copy",
        quantity="TFLOP/s per GPU",
        published=published,
        predict=lambda: zero_tflops(layers, hidden, heads, mp, gpus, batch),
        quick=quick,
        expect_within_pct=within_pct,
        note=note,
    )


COMM = (
    "published at or above simdist's compute-only ceiling (36.5-36.8 TFLOP/s for these "
    "models, the v100 fp16 efficiency 0.30); simdist adds the tensor collectives and the "
    "all-gather of the updated parameters after the step (text)"
)
OFFLOAD = "170B fits only with its activation checkpoints offloaded to the CPU (Sec. 10.5), "
OFFLOAD += "whose copies simdist does not model"
SMALL_BATCH = (
    "64 GPUs, 4 copies of batch 16: the paper's super-linear scaling (Figure 3) starts "
    "below simdist's flat efficiency (text)"
)
FEW = (
    "batch 16 a copy, what fits: the paper's throughput falls with the batch, simdist's one "
    "flat efficiency per device does not (text)"
)

# Rajbhandari et al. 2020, Table 5 (its ZeRO rows): model size, GPUs (400), MP, layers,
# hidden, attention heads, batch per copy; TFLOP/s per GPU read off Figure 2 (100B: Sec. 1,
# "over 38 TFlops per GPU").
CASES: list[Case] = [
    _row("1.5B", (48, 1600, 16), 1, 24, 30.3, quick=True),
    _row("8B", (72, 3072, 24), 4, 64, 36.9),
    _row("40B", (88, 6144, 32), 4, 12, 35.9),
    _row("60B", (132, 6144, 32), 16, 64, 36.5, within_pct=20.0, note=COMM),
    _row("80B", (100, 8192, 64), 16, 32, 37.6, within_pct=20.0, note=COMM),
    _row("100B", (125, 8192, 64), 16, 32, 38.7, quick=True, within_pct=20.0, note=COMM),
    _row("120B", (150, 8192, 64), 16, 24, 28.1),
    _row("140B", (175, 8192, 64), 16, 16, 26.9, within_pct=20.0, note=FEW),
    _row("170B", (212, 8192, 64), 16, 12, 20.9, within_pct=50.0, note=OFFLOAD),
]
# Table 6 (Figure 3, super-linear scaling): the 60B model of l=75, h=8192, 32 heads, MP 16,
# on 64 to 400 GPUs, with the batch per copy each fits; TFLOP/s per GPU read off Figure 3.
CASES += [
    _row(
        "60B",
        (75, 8192, 32),
        16,
        batch,
        published,
        gpus=gpus,
        figure=3,
        within_pct=25.0 if gpus == 64 else 20.0,
        note=SMALL_BATCH if gpus == 64 else COMM,
    )
    for gpus, batch, published in (
        (64, 16, 25.6),
        (128, 48, 37.6),
        (256, 48, 39.0),
        (400, 64, 36.6),
    )
]

TEXT = """\
The ZeRO paper (Rajbhandari et al. 2020, arXiv:1910.02054v3) trains GPT-2-like models of
1.5B to 170B parameters on 400 V100 32 GB GPUs (25 DGX-2 nodes, 800 Gbps between nodes)
with ZeRO-100B: ZeRO stage 2 over the data-parallel GPUs, Megatron-LM model parallelism (MP)
inside a node, activation checkpoints partitioned over the MP group. Its appendix Tables 5
and 6 give every run's layers, hidden size, heads, MP, GPUs and batch; the TFLOP/s per GPU
are read off Figures 2 and 3 (the 100B point is also in the text: over 38 TFLOP/s per GPU,
over 15 PFLOP/s in all). FLOPs are counted as DeepSpeed's own Megatron example counts them,
8 per parameter per token with the recomputed forward (``flops_calculator``,
DeepSpeedExamples commit 2cd968f2; the paper states no formula); Megatron's formula
(Narayanan et al. 2021) counts 2 % (h = 8192) to 9 % (1.5B) more. Nothing is fitted: the
``v100-32gb`` profile is the ``v100``'s figures with 32 GB, its fp16 efficiency (0.30) from
Megatron-LM's 39 TFLOP/s on one V100.

Every row recomputes each block (``recompute: full``): the recomputed forward is on the
clock. MP = 1 runs simdist's ``zero`` (stage 2) on all 400 GPUs; MP > 1 runs ``hybrid``
with a data axis, ZeRO stage 2 over it and a tensor group of MP inside a node, with
sequence parallelism standing in for ZeRO-R's partitioned checkpoints (each block's input
split over the MP group): with Korthikanti's activations, fp16 collectives and 2/2/12 bytes
of model state, every layout fits its 32 GB. Gradients, parameter gathers and tensor
collectives move fp16 bytes, as DeepSpeed's. The gradients are reduce-scattered bucket by
bucket while the backward runs (``overlap_comm: true`` for ``zero``, ``overlap_grad_reduce:
true`` for ``hybrid``), as the paper's implementation does (Sec. 5.2: a bucket is reduced as
soon as it is full, "to overlap communication and computation"), although DeepSpeed's
default for stages 1 and 2 is not to overlap (deepspeed/runtime/zero/config.py); the
updated parameters are all-gathered after the step.

simdist lands within 15 % on 7 of the 13 rows, 2 of the 6 MP = 16 rows at large batch
(the 60B of Figure 3 on 128 and 400 GPUs). Those six rows come out -12 % to -18 %: the
paper reports 36.5-39.0 TFLOP/s per GPU, at or above what simdist computes with no
communication at all (36.5-36.8 TFLOP/s for these models at efficiency 0.30), and simdist
adds the tensor collectives (over NVSwitch), the last bucket's reduce-scatter and the
all-gather of the updated parameters (over InfiniBand). The tensor collectives include the
recomputed forward's: Megatron's checkpointed block runs its forward again before its
backward, its all-gather and reduce-scatter included (Korthikanti et al. 2022, Sec. 5), so
each block moves three pairs where it moved two. For 100B a step is 45.1 s of compute
(11.2 s of it the recomputed forward), 5.2 s of tensor collectives (1.7 s of them the
recomputed forward's) and 4.2 s of data-axis reduce-scatter and all-gather, of which the
overlap hides about 1.9 s: 31.6 TFLOP/s (-18 %; 32.6 before the recomputed forward's
collectives were on the clock). The overlap lifts the small-batch rows too, where simdist
is above the paper: 120B and 140B (+11 %, +12 %) run at the batch that fits (24, 16 a copy),
and simdist's one efficiency per device does not fall with the GEMMs' size as the paper's
throughput does; 170B (+40 %) fits in the paper only with its activation checkpoints
offloaded to the CPU (Sec. 10.5), whose copies simdist does not model. The 60B scaling of
Figure 3 shows in simdist as 30.5, 32.0, 32.0, 32.2 TFLOP/s per GPU on 64, 128, 256, 400
GPUs against the paper's 25.6, 37.6, 39.0, 36.6: simdist's one flat efficiency per device
has no super-linear step from the larger batch a copy.

**The sources read again.** Is the ceiling a misreading? (1) The peak: Megatron-LM's 39
TFLOP/s ran on a V100 SXM3 32GB of a DGX-2H and is "30% of the theoretical peak FLOPS for a
single GPU as configured in a DGX-2H server" (Shoeybi et al. 2019, Sec. 1, 5 and 5.1): a
peak of 130 TFLOP/s (NV-ADLR's later "MegatronLM's Supercharged V1.0" post gives the same,
62.4 TFLOP/s "is 48%"), above the V100 SXM2 datasheet's 125 the ``v100`` profile uses.
simdist carries the share, 0.30, to the profile's peak, so its GEMMs run at 37.5 TFLOP/s,
not 39. The ZeRO paper's own arithmetic uses 125 for its DGX-2 nodes: 15 PFLOP/s over 400
GPUs, 37.5 TFLOP/s each, is "over 30% of the peak" (Sec. 10.2), which 130 would not give.
So both readings stand; taking Megatron's rate instead of its share (39 / 125 = 0.312) would
carry a DGX-2H's clocks to the ZeRO paper's DGX-2s, which no source supports, and would
lift these rows by 4 % at most. (2) The FLOPs: Megatron-LM 2019 states no FLOP count (it
checkpoints every layer, Sec. 4.2); Megatron's own 1.2B baseline (40 layers, h = 1536, 8
sequences of 1,024 tokens) on the ``v100-32gb`` comes out at 36.7 TFLOP/s counted with
Narayanan et al.'s recomputation formula (27.9 counted without it), so the
constant reproduces its source within 6 % only when the 39 counts the recomputed forward.
The ZeRO rows are counted with DeepSpeed's own counter (above); Megatron's formula would
add 2 % at h = 8192. (3) The layouts: each row's layers and hidden size give the model's
stated size by 12·l·h² (40B and 60B only at h = 6144), so Table 5 is read consistently.
Nothing read from the sources moves the six MP = 16 rows into the band; they stay misses,
with the reason above.
"""
