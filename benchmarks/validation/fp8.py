"""Validation cases: FP8 training on H100 (rules: validation/__init__.py).

NVIDIA NeMo's published performance tables, run at ``precision: fp8``
(:mod:`simdist.hardware.fp8`: TransformerEngine's recipe, the linear layers' GEMMs in FP8, the
rest in BF16):

* NVIDIA/NeMo docs/source/performance/performance_summary.md at commit 8e3d65dc ("24.07 perf
  numbers"): pre-training at FP8 with the NeMo 24.07 container on DGX-H100 (8 H100 SXM5 a
  node), tokens per second per GPU. The rows with VP > 1 run Megatron's interleaved 1F1B
  schedule (``schedule: interleaved``, ``virtual_stages`` = VP).
* NVIDIA/NeMo docs/source/performance/performance_long_sequence.md at commit b39e679b:
  LLAMA2-7B at FP8 (NeMo 24.03.01) with context parallelism, model TFLOP/s per GPU. simdist's
  tokens per second are turned into TFLOP/s with NeMo's own count
  (nemo/collections/common/metrics/perf_metrics.py, ``FLOPsMeasurementCallback._llama2``,
  added in commit d8995496, the first formula in NeMo's source; 24.03 had none):
  ``GBS·s·l·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(l·h))`` a step, V = 32,000.

Layout details the tables do not give are those of NeMo-Framework-Launcher's training
configs at tag 24.07, commit 8325688d (launcher_scripts/conf/training/{gpt3/5b, gpt3/20b,
gpt3/175b, llama/llama2_7b, llama/llama2_13b, llama/llama2_70b, llama/llama3_8b,
llama/llama3_70b, nemotron/nemotron_8b, nemotron/nemotron_22b, nemotron/nemotron_340b}.yaml;
the table's TP, PP, CP and VP where a config differs: llama3_70b has VP 10, gpt3/175b VP 12,
nemotron_340b TP 8 × PP 12 × VP 8): ``distributed_fused_adam``
(optimizer state sharded over the data-parallel group: ``zero: 1`` here) with
``overlap_grad_sync`` (here ``overlap_grad_reduce``), no activation recomputation,
TransformerEngine's fused (flash) attention, and sequence parallelism where the config turns
it on (GPT3-20B, GPT3-175B, LLAMA2-70B, LLAMA3-70B, Nemotron-8B, 22B and 340B; not
LLAMA2-13B), selective recomputation where it asks for it (Nemotron-340B)
and on the long-sequence rows with TP (NeMo's long-context
recipes set it: nemo/collections/llm/recipes/llama3_8b_64k.py at 8e3d65dc). The
long-sequence rows' batch sizes are the ones a later edit of their table adds
(NVIDIA/NeMo@19fadb67, "Batch Size"), one sequence a micro-batch.
Micro-batches = GBS / (DP × MBS), run one after another (gradient accumulation). An
interleaved pipeline's model chunks are Megatron-LM's (:func:`megatron_partition`), and its
gradients are reduced after the flush: simdist refuses ``overlap_grad_reduce`` under the
interleaved schedule, where NeMo overlaps ``overlap_grad_sync`` and ``overlap_param_sync``
with the chunks' passes. Every case
runs timing-only on ``h100`` hosts of 8 (the Llama 3 rows' cluster, validation.layouts).
Nothing is fitted: the h100's fp8 share is its bf16 one (0.43, Llama 3's MFU).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from simdist.catalog import GPT_PRESETS
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from validation import Case
from validation.layouts import h100_cluster

TITLE = "FP8 training (NeMo on DGX-H100)"

SUMMARY = "NeMo 24.07 performance summary (NVIDIA/NeMo@8e3d65dc)"
LONG = "NeMo 24.03 long-sequence performance (NVIDIA/NeMo@b39e679b)"

# The models as NeMo-Framework-Launcher 24.07 configures them (vocabularies: NeMo's
# LLM_VOCAB_SIZE_MAP, nemo/collections/common/parts/perf_metrics_utils.py).
GPT3 = {"mlp": "gelu", "vocab": 51_200}  # learned positions, LayerNorm, biases, tied head
LLAMA = {
    "norm": "rmsnorm",
    "mlp": "swiglu",
    "positions": "rotary",
    "tied_embeddings": False,
    "bias": False,
    "dropout": False,
}
# Nemotron: a squared-ReLU MLP (priced with the FLOPs of a GeLU one of the same width),
# LayerNorm (layernorm1p), rotary positions on half the head, no biases, its own head.
NEMOTRON = {
    "vocab": 256_000,
    "seq_len": 4096,
    "positions": "rotary",
    "tied_embeddings": False,
    "bias": False,
    "dropout": False,
}
MODELS: dict[str, dict[str, Any]] = {
    "GPT3-5B": {"layers": 24, "hidden": 4096, "heads": 32, "seq_len": 2048, **GPT3},
    "GPT3-20B": {"layers": 44, "hidden": 6144, "heads": 48, "seq_len": 2048, **GPT3},
    "LLAMA2-7B": {
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "ffn_hidden": 11008,
        "vocab": 32_000,
        "seq_len": 4096,
        **LLAMA,
    },
    "LLAMA3-8B": {"preset": "llama3_8b", "seq_len": 8192},
    "Nemotron-8B": {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 16384, **NEMOTRON},
    "LLAMA2-13B": {
        "layers": 40,
        "hidden": 5120,
        "heads": 40,
        "ffn_hidden": 13824,
        "vocab": 32_000,
        "seq_len": 4096,
        **LLAMA,
    },
    # grouped-query attention: 8 key/value groups (num_query_groups)
    "LLAMA2-70B": {
        "layers": 80,
        "hidden": 8192,
        "heads": 64,
        "kv_heads": 8,
        "ffn_hidden": 28672,
        "vocab": 32_000,
        "seq_len": 4096,
        **LLAMA,
    },
    "LLAMA3-70B": {"preset": "llama3_70b", "seq_len": 8192},
    "GPT3-175B": {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, **GPT3},
    "Nemotron-22B": {"layers": 40, "hidden": 6144, "heads": 48, "ffn_hidden": 24576, **NEMOTRON},
    # 8 key/value groups (num_query_groups: 8)
    "Nemotron-340B": {
        "layers": 96,
        "hidden": 18432,
        "heads": 96,
        "kv_heads": 8,
        "ffn_hidden": 73728,
        **NEMOTRON,
    },
}
# Sequence parallelism as each model's launcher config sets it (sequence_parallel: true).
SEQUENCE_PARALLEL = (
    "GPT3-20B",
    "Nemotron-8B",
    "GPT3-175B",
    "LLAMA2-70B",
    "Nemotron-22B",
    "LLAMA3-70B",
    "Nemotron-340B",
)


def megatron_partition(blocks: int, chunks: int) -> list[int]:
    """Profile layers a model chunk as Megatron-LM cuts an interleaved pipeline: the
    Transformer blocks split evenly over the ``chunks`` (``get_num_layers_to_build``,
    megatron/core/transformer/transformer_block.py), the embedding on the first chunk and
    the output head on the last; a block is two profile layers (attention, MLP)."""
    per_chunk = 2 * blocks // chunks
    counts = [per_chunk] * chunks
    counts[0] += 1
    counts[-1] += 1
    return counts


def nemo_scenario(
    model: str,
    gpus: int,
    gbs: int,
    mbs: int,
    tensor: int = 1,
    context: int = 1,
    seq_len: int | None = None,
    sequence_parallel: bool = False,
    precision: str = "fp8",
    pipeline: int = 1,
    virtual_stages: int = 1,
    recompute: str = "none",
) -> Any:
    """One NeMo row, timing-only, one Adam step at ``precision`` (the tables': fp8) without
    variability: ``gpus`` H100 as DP × PP × TP × CP, ``gbs`` sequences a step in
    micro-batches of ``mbs`` per copy; with ``virtual_stages`` > 1 Megatron's interleaved
    1F1B schedule, the model cut as :func:`megatron_partition` cuts it; ``recompute`` as the
    launcher config's ``activations_checkpoint_granularity``."""
    data = gpus // (tensor * context * pipeline)
    sizes = dict(MODELS[model])
    if seq_len is not None:
        sizes["seq_len"] = seq_len
    cluster = h100_cluster(max(1, gpus // 8))
    if gpus < 8:
        cluster["devices_per_host"] = gpus
    cluster["device"] = {**cluster["device"], "precision": precision}
    mesh: dict[str, int] = {"data": data, "tensor": tensor}
    if context > 1:
        mesh["context"] = context
    strategy: dict[str, Any] = {
        "kind": "hybrid",
        "mesh": mesh,
        "zero": 1,
        "micro_batches": gbs // (data * mbs),
        "sequence_parallel": sequence_parallel,
        # simdist cannot yet cut the gradient buckets along a context axis's ring, nor
        # across an interleaved stage's model chunks (the hybrid spec refuses it)
        "overlap_grad_reduce": context == 1 and virtual_stages == 1,
        "recompute": recompute,
    }
    if pipeline > 1:
        mesh["pipeline"] = pipeline
    if virtual_stages > 1:
        strategy["schedule"] = "interleaved"
        strategy["virtual_stages"] = virtual_stages
        blocks = int(sizes.get("layers") or GPT_PRESETS[sizes["preset"]]["layers"])
        strategy["partition"] = megatron_partition(blocks, pipeline * virtual_stages)
    return scenario_from_dict(
        {
            "name": f"validate_nemo_{model.lower()}_{gpus}gpus",
            "seed": 0,
            "numerics": False,
            "cluster": cluster,
            "workload": {
                "model": {"name": "gpt", **sizes},
                "global_batch_size": gbs,
                "attention": "flash",
                "optimizer": {"name": "adam", "learning_rate": 3e-4},
                "steps": 1,
            },
            "strategy": strategy,
        }
    )


@cache
def tokens_per_s_per_gpu(*args: Any, **kwargs: Any) -> float:
    """A step's tokens / (step time × GPUs)."""
    scenario = nemo_scenario(*args, **kwargs)
    summary = run(scenario).summary
    step_s = summary["simulated_time_s"] / summary["steps"]
    seq_len = int(scenario.workload.clock_model.seq_len or 0)
    gpus = scenario.cluster.hosts * scenario.cluster.devices_per_host
    return scenario.workload.global_batch_size * seq_len / step_s / gpus


def nemo_llama2_flops_per_token(seq_len: int) -> float:
    """Model FLOPs a token of LLAMA2-7B as NeMo counts them (``_llama2`` in
    nemo/collections/common/metrics/perf_metrics.py, NVIDIA/NeMo@8e3d65dc):
    l·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(l·h)), the s² term counted in full."""
    m = MODELS["LLAMA2-7B"]
    layers, h, f, vocab = m["layers"], m["hidden"], m["ffn_hidden"], m["vocab"]
    groups_per_head = 1.0  # no grouped-query attention
    return (
        layers
        * h
        * h
        * (12 + 12 * groups_per_head + 18 * f / h + 12 * seq_len / h + 6 * vocab / (layers * h))
    )


@cache
def long_sequence_tflops(seq_len: int, gpus: int, gbs: int, tensor: int, context: int) -> float:
    """Model TFLOP/s per GPU of a long-sequence row: simdist's tokens / s per GPU × NeMo's
    FLOPs a token."""
    rate = tokens_per_s_per_gpu(
        "LLAMA2-7B",
        gpus,
        gbs,
        1,
        tensor=tensor,
        context=context,
        seq_len=seq_len,
        sequence_parallel=tensor > 1,
    )
    return rate * nemo_llama2_flops_per_token(seq_len) / 1e12


def _summary_row(
    model: str,
    gpus: int,
    gbs: int,
    mbs: int,
    published: float,
    tensor: int = 1,
    context: int = 1,
    quick: bool = False,
    pipeline: int = 1,
    virtual_stages: int = 1,
    within_pct: float = 15.0,
    why: str = "",
    recompute: str = "none",
) -> Case:
    m = MODELS[model]
    seq_len = int(m["seq_len"])
    sequence_parallel = model in SEQUENCE_PARALLEL
    data = gpus // (tensor * context * pipeline)
    parts = [
        f"TP {tensor}" if tensor > 1 else "",
        f"PP {pipeline}" if pipeline > 1 else "",
        f"CP {context}" if context > 1 else "",
    ]
    layout = " × ".join(p for p in [f"DP {data}", *parts] if p)
    if virtual_stages > 1:
        layout += f", interleaved 1F1B (VP {virtual_stages})"
    return Case(
        source=f"{SUMMARY}, performance_summary.md",
        layout=f"{model}, {layout}, {gpus} H100 (DGX), FP8, {seq_len:,}-token sequences, "
        f"GBS {gbs}, MBS {mbs}"
        + (", sequence parallel" if sequence_parallel else "")
        + (f", {recompute} recomputation" if recompute != "none" else ""),
        quantity="tokens/s per GPU",
        published=published,
        predict=lambda: tokens_per_s_per_gpu(
            model,
            gpus,
            gbs,
            mbs,
            tensor=tensor,
            context=context,
            sequence_parallel=sequence_parallel,
            pipeline=pipeline,
            virtual_stages=virtual_stages,
            recompute=recompute,
        ),
        quick=quick,
        expect_within_pct=within_pct,
        note=why,
    )


_LONG_WHY = (
    "too slow: the attention core is {share} of this row's FLOPs as NeMo counts them, and "
    "simdist charges every s×s score of it (XLA's full matmuls, masked half included) at "
    "the h100's one bf16 share (0.43); the published rate implies the core ran at {rate} "
    "TFLOP/s counted so ({frac} of the bf16 peak; {causal} TFLOP/s of the causal half "
    "FlashAttention executes), with the linear layers at the fp8 rate; the ring is hidden "
    "on simdist's clock. A core rate of its own would be a second constant per device, "
    "which the calibration rule does not allow"
)


def _long_row(
    seq_len: int,
    gpus: int,
    gbs: int,
    tensor: int,
    context: int,
    published: float,
    within_pct: float = 15.0,
    why: str = "",
) -> Case:
    data = gpus // (tensor * context)
    cp = f" × CP {context}" if context > 1 else ""
    return Case(
        source=f"{LONG}, performance_long_sequence.md",
        layout=f"LLAMA2-7B, TP {tensor} × DP {data}{cp}, {gpus} H100 (DGX), FP8, "
        f"{seq_len // 1024}K-token sequences, GBS {gbs}, sequence parallel",
        quantity="model TFLOP/s per GPU",
        published=published,
        predict=lambda: long_sequence_tflops(seq_len, gpus, gbs, tensor, context),
        expect_within_pct=within_pct,
        note=why,
    )


# performance_summary.md (NeMo 24.07): model, GPUs, GBS, MBS, TP, CP, tokens/s per GPU.
# performance_long_sequence.md (NeMo 24.03.01): sequence length, GPUs, TP, CP with DP 8,
# model TFLOP/s per GPU; the batch sizes are the same table's at NVIDIA/NeMo@19fadb67,
# which adds a "Batch Size" column to it (4M tokens a step). The shares and implied rates
# are TEXT's count (NeMo's formula; the linears at 1,979 × 0.43, the rest at 989.4 × 0.43).
CASES: list[Case] = [
    _summary_row("GPT3-5B", 64, 2048, 4, 23406.0),
    _summary_row("GPT3-20B", 64, 256, 2, 5851.0, tensor=2),
    _summary_row("LLAMA2-7B", 8, 128, 1, 16934.0, quick=True),
    _summary_row("Nemotron-8B", 64, 256, 4, 12507.0, tensor=2),
    _summary_row("LLAMA3-8B", 8, 128, 1, 12273.0, context=2),
    _summary_row(
        "LLAMA3-70B",
        64,
        128,
        1,
        1524.0,
        tensor=4,
        context=2,
        pipeline=4,
        virtual_stages=5,
        within_pct=20.0,
        why=(
            "too slow: the last stage, whose last model chunk holds the output head (a "
            "128,256-token vocabulary, at bf16) beside its 4 blocks, computes 88.1 % of "
            "simdist's step (the first stage 80.8 %), so the published rate, 81.4 % of that "
            "step, is passed by its compute alone; the rest of the last stage's step is the "
            "tensor-parallel collectives, every one on the critical path (9.3 %; the launcher "
            "config overlaps them with the GEMMs, ub_tp_comm_overlap), the gradient reduction "
            "and parameter all-gather after the flush (1.6 %; NeMo overlaps both, and simdist "
            "refuses overlap_grad_reduce under the interleaved schedule), the context ring "
            "(0.7 %) and idle time (0.9 %; 3/323 on equal chunks). Nothing is recomputed"
        ),
    ),
    _summary_row(
        "LLAMA2-70B",
        64,
        128,
        1,
        1728.0,
        tensor=4,
        pipeline=4,
        virtual_stages=20,
        within_pct=25.0,
        why=(
            "too slow: the last stage computes 81.2 % of simdist's step (the first 79.2 %) and "
            "the published rate is 79.7 % of it: simdist's compute alone is the published "
            "step. The rest is the tensor-parallel collectives, every one on the critical "
            "path (11.0 %; the launcher config overlaps them with the GEMMs, "
            "ub_tp_comm_overlap), the gradient reduction and parameter all-gather after the "
            "flush (6.9 %; NeMo overlaps both, and simdist refuses overlap_grad_reduce under "
            "the interleaved schedule) and idle time (0.5 %; 3/643 on equal chunks). Nothing "
            "is recomputed"
        ),
    ),
    _summary_row("LLAMA2-13B", 16, 128, 1, 8715.0, pipeline=4, virtual_stages=10),
    _summary_row(
        "Nemotron-22B",
        64,
        256,
        2,
        4312.0,
        tensor=2,
        pipeline=4,
        virtual_stages=10,
        within_pct=20.0,
        why=(
            "too slow: the last stage, whose last model chunk holds the output head (a "
            "256,000-token vocabulary, at bf16) beside its one block, computes 88.2 % of "
            "simdist's step (the first stage 57.0 %), so the published rate, 81.7 % of that "
            "step, is passed by its compute alone; the rest of the last stage's step is the "
            "gradient reduction and parameter all-gather after the flush (6.4 %; NeMo "
            "overlaps both, and simdist refuses overlap_grad_reduce under the interleaved "
            "schedule), the tensor-parallel collectives on the critical path (3.9 %; the "
            "launcher config overlaps them, ub_tp_comm_overlap) and idle time (1.3 %; 3/163 "
            "on equal chunks). Nothing is recomputed"
        ),
    ),
    _summary_row(
        "GPT3-175B",
        128,
        256,
        1,
        716.0,
        tensor=4,
        pipeline=8,
        virtual_stages=6,
        within_pct=20.0,
        why=(
            "too slow: the last stage computes 82.2 % of simdist's step (the first 78.1 %) and "
            "the published rate is 82.3 % of it: simdist's compute alone is the published "
            "step. The rest is the tensor-parallel collectives on the critical path (8.4 %; "
            "the launcher config does not overlap them either, ub_tp_comm_overlap: false), "
            "the gradient reduction and parameter all-gather after the flush (7.4 %; NeMo "
            "overlaps both, and simdist refuses overlap_grad_reduce under the interleaved "
            "schedule) and idle time (1.7 %; 7/391 on equal chunks). Nothing is recomputed"
        ),
    ),
    _summary_row(
        "GPT3-175B",
        512,
        2048,
        2,
        825.0,
        tensor=4,
        pipeline=8,
        virtual_stages=6,
        within_pct=30.0,
        why=(
            "too slow: the last stage computes 84.9 % of simdist's step (the first 80.6 %) and "
            "the published rate is 73.9 % of it, so simdist's compute alone is 15 % slower "
            "than the whole published step. The row runs two sequences a micro-batch, where "
            "simdist prices every GEMM at the one share it uses at one: its rate rises 3.5 % "
            "from the 128-GPU row, the published one 15.2 % (the table links this row's "
            "TFLOP/s to MLCommons' results, a tuned MLPerf run). The rest is the "
            "tensor-parallel collectives on the critical path (8.4 %; ub_tp_comm_overlap: "
            "false in the launcher config), the gradient reduction and parameter all-gather "
            "after the flush (4.9 %; NeMo overlaps both, and simdist refuses "
            "overlap_grad_reduce under the interleaved schedule) and idle time (1.7 %; 7/391 "
            "on equal chunks). Nothing is recomputed"
        ),
    ),
    _summary_row(
        "Nemotron-340B",
        128,
        32,
        1,
        326.0,
        tensor=8,
        pipeline=8,
        virtual_stages=12,
        recompute="selective",
        within_pct=30.0,
        why=(
            "too slow: the last stage, whose last model chunk holds the output head (a "
            "256,000-token vocabulary, at bf16) beside its one block, computes 75.2 % of "
            "simdist's step (selective recomputation's attention cores included), and the "
            "published rate is 72.4 % of that step, so its compute alone passes it; the rest "
            "is the tensor-parallel collectives on the critical path (11.1 %; the launcher "
            "config overlaps them, ub_tp_comm_overlap) and the gradient reduction and "
            "parameter all-gather after the flush (8.4 %; NeMo overlaps both, and simdist "
            "refuses overlap_grad_reduce under the interleaved schedule)"
        ),
    ),
    _long_row(16384, 16, 256, 2, 1, 660.0),
    _long_row(
        32768,
        32,
        128,
        2,
        2,
        610.0,
        20.0,
        _LONG_WHY.format(share="57 %", rate="505", frac="0.51", causal="253"),
    ),
    _long_row(
        65536,
        64,
        64,
        4,
        2,
        574.0,
        25.0,
        _LONG_WHY.format(share="72 %", rate="512", frac="0.52", causal="256"),
    ),
    _long_row(
        131072,
        128,
        32,
        4,
        4,
        555.0,
        25.0,
        _LONG_WHY.format(share="84 %", rate="521", frac="0.53", causal="261"),
    ),
    _long_row(
        262144,
        256,
        16,
        4,
        8,
        549.0,
        25.0,
        _LONG_WHY.format(share="91 %", rate="532", frac="0.54", causal="266"),
    ),
]

TEXT = """\
NVIDIA publishes NeMo's pre-training throughput at FP8 on DGX-H100 (8 H100 SXM5 a node):
a performance summary for NeMo 24.07 (tokens and model TFLOP/s per GPU) and a
long-sequence table for LLAMA2-7B with context parallelism (NeMo 24.03.01, model TFLOP/s per
GPU). Each row runs here timing-only at ``precision: fp8`` on ``h100`` hosts of 8: the
linear layers' GEMMs at the datasheet's dense FP8 peak (1,979 TFLOP/s) × the h100's bf16
share (0.43, not fitted: FP8 has no constant of its own), the attention core, norms,
embeddings and output head at bf16, the casts to FP8 in series at the memory bandwidth, and
BF16 model state, activations and collectives (docs/devices.md, FP8). The hybrid strategy
takes each row's DP × TP × CP; what the tables leave out is NeMo-Framework-Launcher 24.07's
config for the model: the distributed optimizer (``zero: 1``) with gradient reduction
overlapped (not with a context axis, which simdist cannot overlap yet), no recomputation,
fused attention, sequence parallelism where the config has it (and on every long-sequence
row with TP, as NeMo's long-context recipes set it), micro-batches = GBS / (DP × MBS).
GPT3 models are learned-position, GeLU, tied-head GPTs with a 51,200 vocabulary;
Nemotron-8B's squared-ReLU MLP is priced as a GeLU one (the same GEMMs).

The summary's five rows without an interleaved pipeline come out −6.0 % (GPT3-5B), −13.2 %
(GPT3-20B, TP 2), −10.8 % (LLAMA2-7B), −9.7 % (Nemotron-8B, TP 2) and −10.3 % (LLAMA3-8B,
CP 2), all within the band and all slow. The same layouts at bf16 give 12,891, 3,027, 9,154,
7,625 and 7,278 tokens/s (−45, −48, −46, −39 and −41 %): on simdist's clock FP8 is worth
1.48–1.71× here, the linear GEMMs being 72–93 % of a step's FLOPs.

The rows with VP > 1 run Megatron's interleaved 1F1B schedule with the table's VP, the
blocks split evenly over the PP × VP model chunks, the embedding on the first and the
output head on the last (Megatron-LM's cut). LLAMA2-13B (PP 4, VP 10) comes out −13.8 %,
inside the band; LLAMA3-70B (TP 4 × PP 4 × CP 2, VP 5) −18.6 %, LLAMA2-70B (TP 4 × PP 4,
VP 20) −20.2 %, Nemotron-22B (TP 2 × PP 4, VP 10) −18.3 % and GPT3-175B (TP 4 × PP 8, VP
6) −17.7 % on 128 GPUs and −26.1 % on 512. Nothing is recomputed in any of them and the
schedule's own bubble is small (0.5–1.8 % of the step on equal chunks). Measured on the
five misses' busiest stage, the last (Megatron's output head runs there at bf16 beside the
last chunk: with Nemotron-22B's 256,000-token vocabulary and one block a chunk the last
stage computes 88 % of the step, the first 57 %), simdist's compute alone takes 81–88 % of
its step, which is already the whole published step (80–82 % of simdist's; 74 % on 512
GPUs). On top of it come the tensor-parallel collectives, every one on the critical path
(4–11 % of the step; the launcher configs overlap them with the GEMMs for the Llama and
Nemotron models, ``ub_tp_comm_overlap``, not for GPT3-175B), and the gradient reduction and
parameter all-gather after the flush (2–7 %; NeMo overlaps both, and simdist refuses
``overlap_grad_reduce`` under the interleaved schedule). On 512 GPUs GPT3-175B runs two
sequences a micro-batch, which the published rate gains 15 % from (the table links its
TFLOP/s to MLCommons' results, a tuned MLPerf run) and simdist 3.5 %: its clock prices a
GEMM at one share whatever its size. Nemotron-340B (TP 8 × PP 8, VP 12, GBS 32, sequence
parallelism and selective recomputation as its launcher config sets them) fits with 73.1 of
an H100's 74.5 GiB on the first stage (model state 53.6 GiB, activations 19.3 GiB with
grouped-query attention, flash attention and FP8 copies of the linear inputs) and comes out
−27.6 %: its last stage computes 75.2 % of simdist's step against the published 72.4 %.

The long-sequence rows are counted with NeMo's own formula (``_llama2`` in
nemo/collections/common/metrics/perf_metrics.py: the s² term in full); their batch sizes are
the ones a later edit of the same table adds (NVIDIA/NeMo@19fadb67, "Batch Size": 4M tokens
a step), one sequence a micro-batch. At 16K (TP 2, no CP)
the row is −14.7 %; with CP it is −16.0 % at 32K, −20.0 % at 64K, −20.5 % at 128K and
−21.6 % at 256K. The error grows with the attention core's share of the FLOPs (39, 57, 72,
84 and 91 % as NeMo counts them): simdist charges every s×s score of the core (XLA's full
matmuls, the masked half included) at the h100's one bf16 share, 425 TFLOP/s, while the
published rates, with the linear layers at simdist's fp8 rate, imply the core ran at 499,
505, 512, 521 and 532 TFLOP/s counted so (0.50–0.54 of the bf16 peak; 250–266 TFLOP/s of
the causal half cuDNN's fused attention executes). The context ring is hidden on simdist's
clock at every row. TorchTitan's long rows (the long-context family above) miss the other
way, their attention slower than the bf16 share: one attention efficiency per device would
not fit both, and the calibration rule allows none, so the rows stay outside the band and
say so. The 512K and 1,024K rows (TP 8 × CP 16 and 32 on 512 and 1,024 GPUs) are not run:
the profile of one 524,288-token attention layer is refused (XLA's unfused bytes of its s×s
scores, 1.6e15, pass the 2^50-byte cap on a layer's numbers, simdist/layers/profile.py).
"""
