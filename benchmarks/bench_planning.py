"""Benchmark 7: planning at thousands of GPUs — one timing-only step of Megatron-LM's layouts.

    python benchmarks/bench_planning.py            # the 530B and 310B layouts
    python benchmarks/bench_planning.py --quick    # the 39.1B layout (512 GPUs) alone
    python benchmarks/bench_planning.py --only 530B --tracemalloc 12

Each layout is a row of Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC21, arXiv:2104.04473, Table 1 (heads, hidden,
layers, tensor size t, pipeline size p, GPUs n, global batch), run as ``kind: hybrid`` on
DGX A100 nodes (:func:`validation.layouts.gpt_scenario`: the ``a100`` profile at fp16, NVLink
inside a node, InfiniBand between) with the paper's micro-batch of 1 (Sec. 5.1 and Table 1's
caption: "micro-batch size of 1"), so each of the n / (t·p) data-parallel copies runs
global batch / copies micro-batches; one step, timing-only.

Each layout runs in a fresh process, so that its peak resident memory (``ru_maxrss``) is its
own: the figures are the CPU seconds of :func:`simdist.runtime.engine.run` (``time.process_time``,
the layer costs included) and the process's peak resident set. With ``--tracemalloc N`` the
child also prints the N source lines that hold the most memory at the traced peak (slower:
not for the timings). Absolute figures, unlike the other benchmarks' ratios: the targets of
issue 39 (≤ 20 CPU-s and ≤ 2 GB each) are absolute.

Where it goes (py-spy and the process's peak after each phase, 2-core machine, 2026-11-28):
530B records 19.8 M event rows and 34.7 M link-load changes in one step. Before lock-step
copies (293 CPU-s, 12.7 GB) the simulation of 9 × 35 × 280 micro-batch passes took 55 %
(fair sharing 17 %), the link telemetry (``_Loads`` reading every ``(time, rate)`` tuple)
21 %, the events table 12 %, the summary 7 %; memory was those tuples and rows. After
(125 CPU-s, 8.7 GB): 4 of the 9 copies simulated (46-67 s), the link telemetry 30-42 s and
its 2.8 GB transient (the peak), the events table 15 s, the summary 9 s.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: Narayanan et al. 2021, Table 1: name → (layers, hidden, heads, t, p, n, global batch).
LAYOUTS: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "530B": (105, 20480, 128, 8, 35, 2520, 2520),  # 529.6B: 163 TFLOP/s per GPU
    "310B": (96, 16384, 128, 8, 16, 1920, 2160),  # 310.1B: 155 TFLOP/s per GPU
    "39.1B": (48, 8192, 64, 8, 2, 512, 1536),  # 39.1B: 138 TFLOP/s per GPU (--quick)
}
FULL = ("530B", "310B")
QUICK = ("39.1B",)
#: Issue 39's targets for the full layouts.
TARGET_CPU_S = 20.0
TARGET_PEAK_GB = 2.0


def scenario(name: str) -> Any:
    """One timing-only step of layout ``name`` as ``kind: hybrid``, micro-batch 1."""
    from validation.layouts import IB, NVLINK, SEQ_LEN, VOCAB, gpt_scenario

    layers, hidden, heads, t, p, n, batch = LAYOUTS[name]
    copies = n // (t * p)
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": copies, "tensor": t, "pipeline": p},
        "micro_batches": batch // copies,
    }
    return gpt_scenario(
        f"plan_gpt_{name}",
        (layers, hidden, heads, SEQ_LEN, VOCAB),
        (n, 8, "a100", NVLINK, IB),
        batch,
        strategy,
        steps=1,
    )


def measure_here(name: str, top: int = 0) -> dict[str, Any]:
    """Run layout ``name`` in this process: CPU seconds, peak memory, the step's figures."""
    from simdist.runtime.engine import run

    sc = scenario(name)
    if top:
        import tracemalloc

        tracemalloc.start(1)
    begin = time.process_time()
    result = run(sc)
    cpu_s = time.process_time() - begin
    if top:
        snapshot = tracemalloc.take_snapshot()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"tracemalloc: peak {peak / 1e9:.2f} GB; held at the end, by line:")
        for stat in snapshot.statistics("lineno")[:top]:
            print(f"  {stat.size / 1e6:9.1f} MB {stat.count:>10} blocks  {stat.traceback}")
    *_, t, p, n, batch = LAYOUTS[name]
    summary = result.summary
    return {
        "layout": name,
        "gpus": n,
        "mesh": f"t{t} x p{p} x d{n // (t * p)}",
        "micro_batches": batch // (n // (t * p)),
        "cpu_s": cpu_s,
        # ru_maxrss is in kilobytes on Linux
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "events": len(result.events),
        "link_changes": len(result.tables["link_load"]),
        "step_s": summary["simulated_time_s"] / summary["steps"],
    }


def measure(name: str, top: int = 0) -> dict[str, Any]:
    """:func:`measure_here` in a fresh Python process (its own peak memory)."""
    args = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--tracemalloc"]
    done = subprocess.run([*args, str(top)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{name}: the child failed:\n{done.stderr[-4000:]}")
    *lines, last = done.stdout.strip().splitlines()
    for line in lines:
        print(line)
    return json.loads(last)


def run(quick: bool = False, only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One row per layout (the full ones, or the quick one)."""
    return [measure(name) for name in only or (QUICK if quick else FULL)]


def format_row(row: dict[str, Any]) -> str:
    """One line of the table."""
    return (
        f"{row['layout']:>6} {row['gpus']:>5} GPUs ({row['mesh']}, M={row['micro_batches']}): "
        f"{row['cpu_s']:7.1f} CPU-s, peak {row['peak_gb']:5.2f} GB, "
        f"{row['events']:,} events, {row['link_changes']:,} link load changes, "
        f"step {row['step_s']:.2f} s simulated"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="+", choices=sorted(LAYOUTS), default=())
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    parser.add_argument("--child", choices=sorted(LAYOUTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_here(args.child, args.tracemalloc)))
        return
    names = args.only or (QUICK if args.quick else FULL)
    for name in names:
        row = measure(name, args.tracemalloc)
        met = row["cpu_s"] <= TARGET_CPU_S and row["peak_gb"] <= TARGET_PEAK_GB
        print(format_row(row) + ("" if name in QUICK else f"  target met: {met}"), flush=True)


if __name__ == "__main__":
    main()
