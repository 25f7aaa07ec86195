"""Benchmark 3: wall time per applied update of parameter_server, 8 → 64 workers.

The same number of gradients is applied at every worker count; if the cost
per update is flat, simulating more workers costs nothing beyond the work
itself.  Shown for full runs and for timing-only runs (the simulation alone),
each relative to 8 workers.
"""

from __future__ import annotations

from typing import Any

from common import best_interleaved, parse_args, ps_scenario

from simdist.runtime import engine

WORKERS = (8, 16, 32, 64)


def run(repeat: int = 3, quick: bool = False, gradients: int = 2048) -> list[dict[str, Any]]:
    """One row per worker count."""
    gradients = gradients // 4 if quick else gradients
    rows = []
    for workers in WORKERS:
        full = ps_scenario(workers, gradients)
        timing = ps_scenario(workers, gradients, numerics=False)
        engine.run(full)
        engine.run(timing)
        best = best_interleaved(
            {
                "full": lambda s=full: engine.run(s),
                "timing": lambda s=timing: engine.run(s),
            },
            repeat,
        )
        rows.append(
            {
                "workers": workers,
                "updates": best["full"][1].summary["applied_updates"],
                "full_us_per_update": best["full"][0] / gradients * 1e6,
                "timing_us_per_update": best["timing"][0] / gradients * 1e6,
            }
        )
    for row in rows:
        row["full_vs_8"] = row["full_us_per_update"] / rows[0]["full_us_per_update"]
        row["timing_vs_8"] = row["timing_us_per_update"] / rows[0]["timing_us_per_update"]
    return rows


def main() -> None:
    args = parse_args(__doc__)
    for row in run(args.repeat, args.quick):
        print(
            f"{row['workers']:>3} workers: full {row['full_us_per_update']:.0f} µs/update "
            f"(×{row['full_vs_8']:.2f} of 8 workers), timing-only "
            f"{row['timing_us_per_update']:.0f} µs/update (×{row['timing_vs_8']:.2f})"
        )


if __name__ == "__main__":
    main()
