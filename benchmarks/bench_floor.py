"""The floor of message-by-message simulation in plain Python, for benchmark 2's PS rows.

Benchmark 2 asks for 300,000 timing-only rows per second; parameter_server records 7 rows
per gradient (a comm row per message on the PS side, the worker's pull and push phases, its
compute), so the target leaves about 23 µs per gradient. How much of that does Python itself
take? This loop is the asynchronous PS pattern reduced to what any message-by-message
engine must do: ``workers`` workers and 2 PS tasks; a worker pulls a shard from each PS,
computes, pushes a shard to each, and starts again when both have arrived; every message is
serialised on its PS's link (fifo: a link is busy until its last message has left) and
arrives a latency later; one heap of ``(time, seq, function, argument)`` tuples orders the
events; the 7 rows are tuples appended to a list. No SimPy, no object per message, no fair
sharing, no failures, no tables: a lower bound on an engine that simulates each message,
not a model to trust for timings.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from common import best_interleaved, parse_args

GRADIENTS = 28_571  # benchmark 2's parameter_server rows: 200,000 rows at 7 per gradient
SIZES = (64, 1024)


def simulate(
    workers: int,
    gradients: int,
    *,
    ps: int = 2,
    nbytes: float = 4e5,
    bandwidth_Bps: float = 1.25e9,
    latency_s: float = 1e-5,
    compute_s: float = 2e-4,
) -> tuple[int, int]:
    """Run the loop of the module docstring; return (gradients applied, rows recorded)."""
    heap: list[tuple[float, int, Callable[[Any, float], None], Any]] = []
    seq = 0
    rows: list[tuple[Any, ...]] = []
    record = rows.append
    link_free = [[0.0] * ps, [0.0] * ps]  # each PS's link out (pulls) and in (pushes)
    wire_s = nbytes / bandwidth_Bps
    waiting = [0] * workers  # messages of the worker's phase not arrived yet
    clock = [0] * workers
    claimed = applied = 0

    def schedule(t: float, fn: Callable[[Any, float], None], arg: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, fn, arg))

    def send(w: int, now: float, way: int, detail: str, then: Callable[[Any, float], None]) -> None:
        waiting[w] = ps
        for p in range(ps):
            start = max(now, link_free[way][p])
            link_free[way][p] = start + wire_s
            record((start, start + wire_s, "ps", p, "comm", nbytes, clock[w], detail, ""))
            schedule(start + wire_s + latency_s, then, w)

    def begin(w: int, now: float) -> None:
        nonlocal claimed
        if claimed < gradients:
            claimed += 1
            send(w, now, 0, "pull", pulled)

    def pulled(w: int, now: float) -> None:
        waiting[w] -= 1
        if not waiting[w]:
            record((now, now, "w", w, "comm", nbytes, clock[w], "pull", ""))
            record((now, now + compute_s, "w", w, "compute", 0, clock[w], "", ""))
            schedule(now + compute_s, computed, w)

    def computed(w: int, now: float) -> None:
        send(w, now, 1, "push", pushed)

    def pushed(w: int, now: float) -> None:
        nonlocal applied
        waiting[w] -= 1
        if not waiting[w]:
            applied += 1
            record((now, now, "w", w, "comm", nbytes, clock[w], "push", ""))
            clock[w] += 1
            begin(w, now)

    for w in range(workers):
        begin(w, 0.0)
    while heap:
        now, _, fn, arg = heapq.heappop(heap)
        fn(arg, now)
    return applied, len(rows)


def run(repeat: int = 3, quick: bool = False) -> list[dict[str, Any]]:
    """Gradients and rows per second of the loop at each size, best of ``repeat``."""
    gradients = GRADIENTS // 4 if quick else GRADIENTS
    out = []
    for workers in SIZES:
        sides = {"floor": lambda workers=workers: simulate(workers, gradients)}
        best, (applied, rows) = best_interleaved(sides, repeat)["floor"]
        out.append(
            {
                "workers": workers,
                "gradients": applied,
                "rows": rows,
                "wall_s": best,
                "us_per_gradient": best / applied * 1e6,
                "rows_per_s": rows / best,
            }
        )
    return out


def main() -> None:
    args = parse_args(__doc__)
    for row in run(args.repeat, args.quick):
        print(
            f"{row['workers']:>5} workers: {row['us_per_gradient']:.1f} µs per gradient, "
            f"{row['rows_per_s']:,.0f} rows/s"
        )


if __name__ == "__main__":
    main()
