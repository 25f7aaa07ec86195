"""How the sync/async lesson depends on the size of the step-time noise (σ).

ps_4w2s (4 workers, 2 PS tasks) is run timing-only, asynchronously (2000 gradients) and
synchronously (``mode: sync``, 500 steps of 4 gradients: the same 2000 gradients), with
``cluster.device.variability`` swept one spread at a time, the other held at 0:

* the per-step σ at 0, 1e-4, 0.01, the default 0.034 and 0.1 (``device: 0``);
* the per-device σ at 0, 1e-4, 0.01, the default 0.041 and 0.1 (``step: 0``);
* and both at their defaults, as shipped.

Per run and seed: the simulated time of each, async's throughput lead over sync (sync's
time / async's − 1: both apply 2000 gradients), async's mean and largest staleness and the
share of its gradients at each staleness (the shape), the largest iteration gap between
workers, and the lock-step measure of docs/VARIABILITY.md (the share of the iterations
every worker reached in which all of them read one parameter version, mean of the two PS
tasks). Timing-only, because none of these depends on the values: the clock of a parameter
server does not read the numerics. The table is written to ``benchmarks/sigma_study.csv``,
which notebooks/sync_vs_async.ipynb and docs/VARIABILITY.md read.

    python benchmarks/sigma_study.py [--seeds 5] [--out benchmarks/sigma_study.csv]

About 2 CPU-minutes with 5 seeds (110 runs of under a second each).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import simdist

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "ps_4w2s.yaml"
OUT = Path(__file__).resolve().parent / "sigma_study.csv"
#: simdist.hardware.variability's defaults (Alibaba PAI traces, docs/VARIABILITY.md).
STEP_DEFAULT, DEVICE_DEFAULT = 0.034, 0.041
#: sweep → the (step σ, device σ) it runs, in order.
SWEEPS: dict[str, list[tuple[float, float]]] = {
    "step": [(s, 0.0) for s in (0.0, 1e-4, 0.01, STEP_DEFAULT, 0.1)],
    "device": [(0.0, d) for d in (0.0, 1e-4, 0.01, DEVICE_DEFAULT, 0.1)],
    "shipped": [(STEP_DEFAULT, DEVICE_DEFAULT)],
}
#: Staleness values tallied one by one; larger ones are counted together in the last column.
STALENESS_BINS = 7
SYNC = {"strategy.mode": "sync", "workload.steps": 500}


def lock_step_share(updates: pd.DataFrame, ps: int) -> float:
    """The share of iterations in which every worker read one version from PS ``ps``.

    ``version`` is the PS's version after an update, so the version a worker read is
    ``version − 1 − staleness``; only iterations every worker reached count
    (docs/VARIABILITY.md, "Measuring lock-step").
    """
    mine = updates[updates["ps"] == ps]
    read = (mine["version"] - 1 - mine["staleness"]).groupby(mine["iteration"])
    everyone = read.size() == mine["worker"].nunique()
    return float((read.nunique() == 1)[everyone].mean())


def row(sweep: str, step: float, device: float, seed: int) -> dict[str, float | int | str]:
    """One (σ, seed) point: async and sync, timing-only."""
    spread = {"cluster.device.variability": {"step": step, "device": device}, "seed": seed}
    free = simdist.run(SCENARIO, numerics=False, overrides=spread)
    sync = simdist.run(SCENARIO, numerics=False, overrides={**spread, **SYNC})
    updates = free.tables["updates"]
    staleness = updates["staleness"].clip(upper=STALENESS_BINS - 1)
    shares = staleness.value_counts(normalize=True)
    async_s = float(free.summary["simulated_time_s"])
    sync_s = float(sync.summary["simulated_time_s"])
    return {
        "sweep": sweep,
        "sigma_step": step,
        "sigma_device": device,
        "seed": seed,
        "async_ms": async_s * 1e3,
        "sync_ms": sync_s * 1e3,
        "async_lead": sync_s / async_s - 1,
        "staleness_mean": float(updates["staleness"].mean()),
        "staleness_max": int(updates["staleness"].max()),
        "iteration_gap_max": int(updates["ssp_staleness"].max()),
        "lock_step_share": (lock_step_share(updates, 0) + lock_step_share(updates, 1)) / 2,
        **{f"staleness_{k}": float(shares.get(k, 0.0)) for k in range(STALENESS_BINS)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = []
    for sweep, points in SWEEPS.items():
        for step, device in points:
            for seed in range(args.seeds):
                rows.append(row(sweep, step, device, seed))
                r = rows[-1]
                print(
                    f"{sweep:8} step {step:<7g} device {device:<7g} seed {seed}: "
                    f"async {r['async_ms']:.1f} ms, sync {r['sync_ms']:.1f} ms, "
                    f"lead {r['async_lead']:+.1%}, staleness {r['staleness_mean']:.2f} "
                    f"(max {r['staleness_max']}), lock-step {r['lock_step_share']:.1%}",
                    flush=True,
                )
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False, float_format="%.6g")
    summary = table.groupby(["sweep", "sigma_step", "sigma_device"], sort=False)[
        ["async_lead", "staleness_mean", "staleness_max", "lock_step_share"]
    ].agg(["mean", "min", "max"])
    pd.set_option("display.width", 200)
    print(summary.round(3).to_string())


if __name__ == "__main__":
    main()
