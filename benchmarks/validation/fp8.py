"""Validation cases: FP8 training on H100 (rules: validation/__init__.py).

NVIDIA NeMo's published performance tables, run at ``precision: fp8``
(:mod:`simdist.hardware.fp8`: TransformerEngine's recipe, the linear layers' GEMMs in FP8, the
rest in BF16):

* NVIDIA/NeMo docs/source/performance/performance_summary.md at commit 8e3d65dc ("24.07 perf
  numbers"): pre-training at FP8 with the NeMo 24.07 container on DGX-H100 (8 H100 SXM5 a
  node), tokens per second per GPU. The rows without an interleaved pipeline (VP 1) run here.
* NVIDIA/NeMo docs/source/performance/performance_long_sequence.md at commit b39e679b:
  LLAMA2-7B at FP8 (NeMo 24.03.01) with context parallelism, model TFLOP/s per GPU. simdist's
  tokens per second are turned into TFLOP/s with NeMo's own count
  (nemo/collections/common/metrics/perf_metrics.py, ``FLOPsMeasurementCallback._llama2``,
  added in commit d8995496, the first formula in NeMo's source; 24.03 had none):
  ``GBS·s·l·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(l·h))`` a step, V = 32,000.

Layout details the tables do not give are those of NeMo-Framework-Launcher's training
configs at tag 24.07 (launcher_scripts/conf/training/{gpt3/5b,gpt3/20b,llama/llama2_7b,
llama/llama3_8b,nemotron/nemotron_8b}.yaml): ``distributed_fused_adam`` (optimizer state
sharded over the data-parallel group: ``zero: 1`` here) with ``overlap_grad_sync`` (here
``overlap_grad_reduce``), no activation recomputation, TransformerEngine's fused (flash)
attention, and sequence parallelism where the config turns it on (GPT3-20B, Nemotron-8B).
Micro-batches = GBS / (DP × MBS), run one after another (gradient accumulation). Every case
runs timing-only on ``h100`` hosts of 8 (the Llama 3 rows' cluster, validation.layouts).
Nothing is fitted: the h100's fp8 share is its bf16 one (0.43, Llama 3's MFU).
"""

from __future__ import annotations

from functools import cache
from typing import Any

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
    # squared-ReLU MLP of 16,384 (the FLOPs of a GeLU one), LayerNorm, rotary positions on
    # half the head, no biases, its own head
    "Nemotron-8B": {
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "ffn_hidden": 16384,
        "vocab": 256_000,
        "seq_len": 4096,
        "positions": "rotary",
        "tied_embeddings": False,
        "bias": False,
        "dropout": False,
    },
}


def nemo_scenario(
    model: str,
    gpus: int,
    gbs: int,
    mbs: int,
    tensor: int = 1,
    context: int = 1,
    seq_len: int | None = None,
    sequence_parallel: bool = False,
) -> Any:
    """One NeMo row, timing-only, one Adam step at fp8 without variability: ``gpus`` H100
    as DP × TP × CP, ``gbs`` sequences a step in micro-batches of ``mbs`` per copy."""
    data = gpus // (tensor * context)
    sizes = dict(MODELS[model])
    if seq_len is not None:
        sizes["seq_len"] = seq_len
    cluster = h100_cluster(max(1, gpus // 8))
    if gpus < 8:
        cluster["devices_per_host"] = gpus
    cluster["device"] = {**cluster["device"], "precision": "fp8"}
    mesh: dict[str, int] = {"data": data, "tensor": tensor}
    if context > 1:
        mesh["context"] = context
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
            "strategy": {
                "kind": "hybrid",
                "mesh": mesh,
                "zero": 1,
                "micro_batches": gbs // (data * mbs),
                "sequence_parallel": sequence_parallel,
                # simdist cannot yet cut the gradient buckets along a context axis's ring
                "overlap_grad_reduce": context == 1,
            },
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
        * (
            12
            + 12 * groups_per_head
            + 18 * f / h
            + 12 * seq_len / h
            + 6 * vocab / (layers * h)
        )
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
