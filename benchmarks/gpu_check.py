"""Do simdist's numerics give the CPU's results on this machine's accelerator? A table.

simdist's clock is simulated, its numerics are real JAX, and every figure in the docs was
measured on the CPU. This check runs the numerics of four shipped scenarios — one_device
(one_device_digits), mirrored (mirrored_4dev), asynchronous parameter servers (ps_4w2s) and
ZeRO stage 3 (zero3_4dev) — in three fresh processes: on the CPU (``JAX_PLATFORMS=cpu``, the
reference), then twice on JAX's default backend (a GPU when one is there), and compares:

* the train loss at every step and the test accuracy at every evaluation, and
* the final parameters, as ‖p_backend − p_cpu‖ / ‖p_cpu‖ over all leaves,

against :data:`RTOL`. A GPU computes float32 matrix products in another order (and, on
Ampere or later at JAX's default precision, in TF32), so its results differ from the CPU's
in the last bits at the first step, and a few hundred steps of training carry that
forward; :data:`RTOL` (2 %) is far above float32 rounding and far below what a wrong
gradient or a lost update would do (a step missing or applied twice moves these figures by
tens of per cent in 100 steps). The two runs on the backend are also compared with each
other: byte-identical reports promise identical results from one software stack, which a
GPU keeps only with XLA's deterministic ops (docs/devices.md, "Determinism on a GPU").

Runs are shortened (:data:`STEPS`) so that the whole check takes under 5 minutes on a
GPU (about a minute on the CPU). With one GPU, zero3_4dev's 4 replicas run ``batched`` on
it (``execution: devices`` would fall back to emulated CPU devices, comparing the CPU with
itself); the table's ``execution`` column says how each case ran. On a machine without a
GPU the check still runs, comparing the CPU with the CPU, and says so.

    python benchmarks/gpu_check.py [--deterministic] [--highest] [--rtol 0.02]

``--deterministic`` adds ``--xla_gpu_deterministic_ops=true`` to ``XLA_FLAGS`` for the
backend's runs; ``--highest`` sets ``JAX_DEFAULT_MATMUL_PRECISION=highest`` there (float32
products, no TF32). Exit status 0 when every case is within the tolerance, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"

#: The cases: name → (scenario file, steps; evaluated every steps / 4).
CASES: dict[str, tuple[str, int]] = {
    "one_device": ("one_device_digits.yaml", 100),
    "mirrored": ("mirrored_4dev.yaml", 100),
    "ps_4w2s": ("ps_4w2s.yaml", 400),
    "zero3": ("zero3_4dev.yaml", 100),
}
STEPS = {name: steps for name, (_, steps) in CASES.items()}

#: Largest relative difference allowed between the backend's figures and the CPU's (see
#: the module's docstring for why this size).
RTOL = 0.02

#: Emulated CPU devices every child asks for: zero3_4dev and mirrored_4dev have 4 replicas.
DEVICES = 4


def child(out: Path) -> None:
    """Run every case on this process's default backend; write figures to ``out``."""
    import jax
    import numpy as np

    import simdist

    backend = jax.default_backend()
    on_accelerator = backend != "cpu"
    figures: dict[str, Any] = {
        "backend": backend,
        "devices": [str(d) for d in jax.devices()],
        "cases": {},
    }
    arrays: dict[str, Any] = {}
    for name, (path, steps) in CASES.items():
        overrides = [f"workload.steps={steps}", f"workload.eval_every={steps // 4}"]
        if name == "zero3" and on_accelerator and jax.device_count() < DEVICES:
            overrides.append("strategy.execution=batched")  # on the GPU, not emulated CPUs
        start = time.perf_counter()
        result = simdist.run(SCENARIOS / path, overrides=overrides)
        metrics = result.metrics
        leaves = jax.tree_util.tree_leaves(result.params)
        arrays[name] = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in leaves])
        figures["cases"][name] = {
            "train_loss": metrics[metrics["metric"] == "train_loss"]["value"].tolist(),
            "test_accuracy": metrics[metrics["metric"] == "test_accuracy"]["value"].tolist(),
            "execution": result.summary.get("execution", "batched"),
            "wall_s": time.perf_counter() - start,
        }
    np.savez(out.with_suffix(".npz"), **arrays)
    out.write_text(json.dumps(figures))


def run_child(
    out: Path, *, cpu: bool, deterministic: bool = False, highest: bool = False
) -> dict[str, Any]:
    """One child process on the CPU (``cpu``) or the default backend; its figures."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={DEVICES}")
    if deterministic and not cpu:
        flags.append("--xla_gpu_deterministic_ops=true")
    env["XLA_FLAGS"] = " ".join(flags)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # one process at a time, but be modest
    if highest and not cpu:
        env["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
    if cpu:
        env["JAX_PLATFORMS"] = "cpu"
    else:
        env.pop("JAX_PLATFORMS", None)
    subprocess.run([sys.executable, __file__, "--child", str(out)], env=env, check=True)
    import numpy as np

    figures = json.loads(out.read_text())
    with np.load(out.with_suffix(".npz")) as params:
        figures["params"] = {name: params[name] for name in params.files}
    return figures


def relative(a: Any, b: Any) -> float:
    """max |a − b| / max |b| over two equal-length sequences (inf if the lengths differ)."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = float(np.abs(b).max()) if b.size else 1.0
    return float(np.abs(a - b).max() / (scale or 1.0)) if b.size else 0.0


def compare(reference: dict, backend: dict, again: dict, rtol: float) -> list[dict[str, Any]]:
    """One row per case: the backend's figures against the CPU's, and against itself."""
    import numpy as np

    rows = []
    for name in CASES:
        ref, got, rerun = (f["cases"][name] for f in (reference, backend, again))
        p_ref, p_got = reference["params"][name], backend["params"][name]
        params = float(np.linalg.norm(p_got - p_ref) / np.linalg.norm(p_ref))
        loss = relative(got["train_loss"], ref["train_loss"])
        accuracy = relative(got["test_accuracy"], ref["test_accuracy"])
        repeat = got["train_loss"] == rerun["train_loss"] and np.array_equal(
            p_got, again["params"][name]
        )
        rows.append(
            {
                "case": name,
                "steps": STEPS[name],
                "execution": got["execution"],
                "final loss cpu": ref["train_loss"][-1],
                "final loss backend": got["train_loss"][-1],
                "loss rel. diff": loss,
                "accuracy rel. diff": accuracy,
                "params rel. diff": params,
                "within": max(loss, accuracy, params) <= rtol,
                "repeat identical": repeat,
                "wall s": got["wall_s"],
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    keys = list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(cell(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtol", type=float, default=RTOL)
    parser.add_argument("--deterministic", action="store_true", help="XLA's deterministic ops")
    parser.add_argument("--highest", action="store_true", help="float32 products, no TF32")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        print("running on the CPU (the reference) ...", flush=True)
        reference = run_child(Path(tmp) / "cpu.json", cpu=True)
        print("running on the default backend, twice ...", flush=True)
        options = {"deterministic": args.deterministic, "highest": args.highest}
        backend = run_child(Path(tmp) / "backend.json", cpu=False, **options)
        again = run_child(Path(tmp) / "again.json", cpu=False, **options)
    found = backend["backend"]
    if found == "cpu":
        print(
            "no GPU found: JAX's default backend is the CPU, so this compares the CPU with itself"
        )
    else:
        print(f"default backend: {found}, {', '.join(backend['devices'])}")
    rows = compare(reference, backend, again, args.rtol)
    print(table(rows))
    bad = [row["case"] for row in rows if not row["within"]]
    print(
        f"tolerance: relative {args.rtol:g} on every train loss, test accuracy and the final "
        f"parameters' norm; {len(rows) - len(bad)} of {len(rows)} within"
        f"{'' if not bad else ' (not: ' + ', '.join(bad) + ')'}; "
        f"{time.perf_counter() - start:.0f} s in all"
    )
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
