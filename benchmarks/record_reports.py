"""Record the report folders of a fixed set of scenarios, and compare two recordings.

A change meant to keep every output the same (an optimisation, a refactor) is checked by
recording the reports with the code before it and with the code after it, then comparing
the two folders file by file: events.csv, metrics.csv, updates.csv, summary.json,
trace.json, the PNGs, params.npz. ::

    git worktree add /tmp/before <commit>
    python benchmarks/record_reports.py record /tmp/rec_before --checkout /tmp/before
    python benchmarks/record_reports.py record /tmp/rec_after         # this checkout
    python benchmarks/record_reports.py compare /tmp/rec_before /tmp/rec_after

Each case runs ``simdist run`` in its own process, with ``PYTHONPATH`` set to the
checkout and the working directory outside it: ``python -m`` puts the working directory
first on ``sys.path``, so a run started inside a checkout runs that checkout whatever
``PYTHONPATH`` says. Exit statuses are recorded too (``status.txt``: 3 is a diverged run,
whose report is written). ``compare`` exits 1 when any file or status differs, 2 when a
folder is not a finished recording.

The cases: every scenario shipped in scenarios/ (sweep files are skipped), parameter_server
variants (stale-synchronous, lr / staleness, sync with a backup worker, fifo sharing, 64
workers and 4 PS tasks), divergences, central_storage with stragglers, a restart and fifo
sharing, overlapped steps with stragglers (per-layer buckets), and timing-only runs of
benchmark 2's layouts at 64 and 256 devices.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, beside this file

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"

#: A persistent ×3 straggler and 20% of steps with a Pareto hiccup (heavy tail).
STRAGGLERS = (
    "faults.stragglers=[{device: 3, slowdown: 3.0}, "
    "{probability: 0.2, slowdown: {kind: pareto, alpha: 1.5}}]"
)
DIVERGE = "workload.optimizer.learning_rate=1e30"

#: name → (scenario file in scenarios/ or a generated layout, --set overrides, --seed)
VARIANTS: dict[str, tuple[str, tuple[str, ...], int | None]] = {
    "ps_ssp": ("ps_4w2s.yaml", ("strategy.staleness_bound=0",), None),
    "ps_inverse": ("ps_4w2s.yaml", ("strategy.lr_staleness=inverse",), None),
    "ps_sync_backup": (
        "ps_4w2s.yaml",
        ("strategy.mode=sync", "strategy.backup_workers=1"),
        None,
    ),
    "ps_fifo": ("ps_4w2s.yaml", ("cluster.network.sharing=fifo",), None),
    "ps_64w": (
        "ps_4w2s.yaml",
        ("cluster.hosts=64", "cluster.ps=4", "workload.batch_size=16", "workload.steps=1000"),
        None,
    ),
    # Stale-synchronous with stragglers on 16 workers: waiting workers are woken in an
    # order that depends on every tick's event (the 4-worker ps_ssp does not show it).
    "ps_ssp_16w_stragglers": (
        "ps_4w2s.yaml",
        (
            "cluster.hosts=16",
            "strategy.staleness_bound=1",
            "workload.steps=300",
            "faults.stragglers=[{probability: 0.3, slowdown: {kind: pareto, alpha: 1.5}}]",
        ),
        None,
    ),
    # Per-variable pulls and pushes overlapped with compute (a phase's join and each
    # layer's join wait on the same messages), 8 workers with stragglers.
    "ps_overlap_stragglers": (
        "ps_4w2s.yaml",
        ("strategy.overlap=true", "cluster.hosts=8", "workload.steps=300", STRAGGLERS),
        None,
    ),
    "ps_diverge": ("ps_4w2s.yaml", (DIVERGE,), None),
    "mirrored_diverge": ("mirrored_4dev.yaml", (DIVERGE,), None),
    "cs_diverge": ("central_storage_4dev.yaml", (DIVERGE,), None),
    "cs_fifo": ("central_storage_4dev.yaml", ("cluster.network.sharing=fifo",), None),
    "cs_stragglers": ("central_storage_4dev.yaml", (STRAGGLERS,), None),
    "cs_stragglers_fifo": (
        "central_storage_4dev.yaml",
        (STRAGGLERS, "cluster.network.sharing=fifo"),
        None,
    ),
    "cs_restart": (
        "central_storage_4dev.yaml",
        (
            "faults.failures=[{target: worker 0, at: 5ms, restart_after: 2ms}]",
            "checkpoint.every_steps=20",
            "checkpoint.storage_bandwidth=200MB/s",
        ),
        None,
    ),
    "cs_eval_seed": ("central_storage_4dev.yaml", ("workload.eval_every=7",), 4),
    "mwm_seed": ("mwm_2x4_ring.yaml", (), 7),
    "tpu_seed": ("tpu_2x2.yaml", (), 5),
    "overlap_resnet50": ("resnet50_4x8_25g.yaml", (STRAGGLERS,), None),
    "overlap_resnet50_128": (
        "resnet50_4x8_25g.yaml",
        ("cluster.hosts=16", "workload.steps=20"),
        None,
    ),
    "overlap_mwm": (
        "mwm_2x4_ring.yaml",
        ("strategy.bucket_bytes=4KiB", "workload.eval_every=20", STRAGGLERS),
        None,
    ),
    "overlap_mixed": ("mixed_gpus.yaml", (STRAGGLERS,), None),
    "overlap_mirrored": ("mirrored_straggler.yaml", ("strategy.bucket_bytes=8KiB",), None),
    # Hybrid's data copies in lock-step (no variability): the leading copy alone simulated.
    "hybrid_lockstep": ("gpt2_3d.yaml", ("cluster.device.variability=0",), None),
    "layout_cs_64": ("@central_storage:64:400", (), None),
    "layout_cs_64_stragglers": ("@central_storage:64:400", (STRAGGLERS,), None),
    "layout_cs_256": ("@central_storage:256:100", (), None),
    "layout_mirrored_256": ("@mirrored:256:100", (), None),
    "layout_ps_64": ("@parameter_server:64:4000", (), None),
}


def cases(layouts: Path) -> dict[str, tuple[Path, tuple[str, ...], int | None]]:
    """Every case: the shipped scenarios, then :data:`VARIANTS`; layouts written to ``layouts``."""
    from simdist.scenario.load import is_sweep_file

    found: dict[str, tuple[Path, tuple[str, ...], int | None]] = {}
    for path in sorted(SCENARIOS.glob("*.yaml")):
        if not is_sweep_file(yaml.safe_load(path.read_text())):
            found[path.stem] = (path, (), None)
    for name, (source, overrides, seed) in VARIANTS.items():
        found[name] = (_layout(source, layouts) if source.startswith("@") else SCENARIOS / source,
                       overrides, seed)  # fmt: skip
    return found


def _layout(spec: str, folder: Path) -> Path:
    """A timing-only scenario of benchmark 2's layouts (``@kind:devices:steps``), as a file."""
    from common import sync_scenario

    from simdist.scenario.load import dump_scenario

    kind, devices, steps = spec[1:].split(":")
    path = folder / f"{kind}_{devices}.yaml"
    path.write_text(dump_scenario(sync_scenario(kind, int(devices), int(steps), numerics=False)))
    return path


def record(out: Path, checkout: Path, only: list[str], jobs: int) -> int:
    """Run every case (or those named in ``only``) with ``checkout``'s simdist into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    layouts = out / "_scenarios"
    layouts.mkdir(exist_ok=True)
    todo = {k: v for k, v in cases(layouts).items() if not only or k in only}
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    neutral = tempfile.mkdtemp(prefix="record_reports_")

    def run(name: str) -> str:
        path, overrides, seed = todo[name]
        command = [sys.executable, "-m", "simdist.cli", "run", str(path), "-q"]
        command += [arg for o in overrides for arg in ("--set", o)]
        command += ["--seed", str(seed)] if seed is not None else []
        command += ["--out", str(out / name)]
        done = subprocess.run(command, cwd=neutral, env=env, capture_output=True, text=True)
        (out / f"{name}.log").write_text(done.stdout + done.stderr)
        return f"{name} {done.returncode}"

    with ThreadPoolExecutor(jobs) as pool:
        statuses = list(pool.map(run, todo))
    (out / "status.txt").write_text("\n".join(statuses) + "\n")
    print(f"recorded {len(todo)} cases in {out} with {checkout}")
    return 0


def compare(a: Path, b: Path) -> int:
    """Print what differs between two recordings (logs aside); 1 if anything does."""
    differ: list[str] = []
    for root in (a, b):
        if not (root / "status.txt").is_file():  # written last, when every case has run
            print(f"{root}: not a finished recording (no status.txt); record it first")
            return 2
    lines_a, lines_b = (set((p / "status.txt").read_text().splitlines()) for p in (a, b))
    differ += [f"status: {line} (only in {a})" for line in sorted(lines_a - lines_b)]
    differ += [f"status: {line} (only in {b})" for line in sorted(lines_b - lines_a)]
    files_a, files_b = (
        {p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.suffix != ".log"}
        for root in (a, b)
    )
    differ += [f"only in {a}: {p}" for p in sorted(files_a - files_b)]
    differ += [f"only in {b}: {p}" for p in sorted(files_b - files_a)]
    differ += [
        f"differs: {p}"
        for p in sorted(files_a & files_b)
        if p.name != "status.txt" and not filecmp.cmp(a / p, b / p, shallow=False)
    ]
    print("\n".join(differ) if differ else f"identical: {len(files_a)} files")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run every case into a folder")
    rec.add_argument("out", type=Path)
    rec.add_argument("--checkout", type=Path, default=ROOT, help="whose simdist (default: this)")
    rec.add_argument("--only", nargs="*", default=[], help="case names (default: all)")
    rec.add_argument("--jobs", type=int, default=2, help="cases run at once")
    cmp_ = commands.add_parser("compare", help="compare two recordings")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        return record(args.out, args.checkout.resolve(), args.only, args.jobs)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
