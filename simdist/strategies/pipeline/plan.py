"""Pipeline plans as pure functions: schedules, the auto partition, memory per stage.

No SimPy, no JAX: what :mod:`simdist.strategies.pipeline` runs on the clock and
:mod:`simdist.numerics.stages` replays, and what tests check against brute force.

* :func:`stage_ops` — the order in which each stage runs the forward (``F``) and backward
  (``B``) of each micro-batch. gpipe (Huang et al. 2019, "GPipe: efficient training of giant
  neural networks using pipeline parallelism"): all forwards, then all backwards in reverse,
  then a flush. 1f1b (PipeDream-Flush; Narayanan et al. 2021, "Memory-efficient
  pipeline-parallel DNN training", and Megatron-LM's schedule): stage ``s`` of ``S`` warms up
  with ``S − s − 1`` forwards, then alternates one forward and one backward, then drains; so
  at most ``S − s`` micro-batches are in flight on it. pipedream (Narayanan et al. 2019): the
  same one-forward-one-backward order over the whole run's stream of micro-batches, no flush.
* :func:`interleaved_ops` — Megatron's interleaved 1F1B (Narayanan et al. 2021, "Efficient
  large-scale language model training on GPU clusters using Megatron-LM", Sec. 2.2.2 and
  Fig. 4): each device holds ``v`` model chunks, the order of their passes as
  ``forward_backward_pipelining_with_interleaving`` runs them.
* :func:`stage_plan` — a stage's passes as typed steps (receive, compute, send), which
  :func:`simdist.strategies.steps.walk` runs on the clock.
* :func:`partition_auto` — GPipe's partitioning: contiguous layers over ``S`` stages
  minimising the slowest stage, each stage fitting its device; dynamic programming, exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from simdist.errors import SimdistError
from simdist.layers import stage_bounds as bounds
from simdist.strategies.steps import Compute, Plan, Receive, Send, Step

Schedule = Literal["gpipe", "1f1b", "pipedream", "interleaved"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "pipedream", "interleaved")
#: One pass of a micro-batch through a stage: ``("F", m)`` or ``("B", m)`` for micro-batch ``m``.
Pass = tuple[str, int]
#: One pass of the interleaved schedule: ``(kind, m, j)``, micro-batch ``m`` through model
#: chunk ``j`` (of ``S·v``; chunk ``j`` lives on device ``j mod S``).
ChunkPass = tuple[str, int, int]


def stage_ops(schedule: str, stages: int, micro_batches: int) -> list[list[Pass]]:
    """Each stage's ops for ``micro_batches`` micro-batches (0-based), in the order it runs them.

    For pipedream ``micro_batches`` is the whole run's stream (steps × micro-batches per step).
    """
    S, M = int(stages), int(micro_batches)
    if schedule == "gpipe":
        one = [("F", m) for m in range(M)] + [("B", m) for m in reversed(range(M))]
        return [list(one) for _ in range(S)]
    if schedule not in ("1f1b", "pipedream"):
        raise SimdistError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")
    plans = []
    for s in range(S):
        warmup = min(S - s - 1, M)
        ops: list[Pass] = [("F", m) for m in range(warmup)]
        for i in range(M - warmup):
            ops += [("F", warmup + i), ("B", i)]
        ops += [("B", m) for m in range(M - warmup, M)]
        plans.append(ops)
    return plans


def interleaved_ops(stages: int, virtual_stages: int, micro_batches: int) -> list[list[ChunkPass]]:
    """Each device's passes of one step under the interleaved 1F1B schedule, in its order.

    Device ``d`` of ``S`` holds model chunks ``k·S + d`` for ``k < v``. As Megatron-LM's
    ``forward_backward_pipelining_with_interleaving`` (NVIDIA/Megatron-LM,
    megatron/core/pipeline_parallel/schedules.py at 00611e6, ``get_pp_rank_microbatches``
    and ``get_schedule_table``, with ``microbatch_group_size_per_vp_stage`` at its default
    ``S``, megatron/core/model_parallel_config.py): the ``M·v`` virtual micro-batches are
    numbered group by group, a group being S micro-batches through chunk 0, then the same
    S through chunk 1, and so on; virtual micro-batch ``i``'s forward runs its micro-batch
    through the device's chunk ``k`` and its backward through chunk ``v − 1 − k``. The
    device warms up with ``(S − d − 1)·2 + (v − 1)·S`` forwards (all ``M·v`` if fewer),
    then alternates forward ``i + warm-up`` and backward ``i``, then drains the backwards.
    ``micro_batches`` must be a multiple of ``S`` (the spec refuses others).
    """
    S, v, M = int(stages), int(virtual_stages), int(micro_batches)
    table = [(m, k) for group in range(0, M, S) for k in range(v) for m in range(group, group + S)]
    total = M * v
    plans = []
    for d in range(S):
        warmup = min((S - d - 1) * 2 + (v - 1) * S, total)

        def forward(i: int, d: int = d) -> ChunkPass:
            m, k = table[i]
            return ("F", m, k * S + d)

        def backward(i: int, d: int = d) -> ChunkPass:
            m, k = table[i]
            return ("B", m, (v - 1 - k) * S + d)

        ops = [forward(i) for i in range(warmup)]
        for i in range(total - warmup):
            ops += [forward(warmup + i), backward(i)]
        ops += [backward(i) for i in range(total - warmup, total)]
        plans.append(ops)
    return plans


def chunks_at_peak(ops: Sequence[ChunkPass], weight: Callable[[int], float]) -> dict[int, int]:
    """Micro-batches of each chunk a device holds when the activations it holds weigh most
    (``weight(j)``: one micro-batch's activations through chunk ``j``); the earliest such
    moment. An empty dict for no passes."""
    held: dict[int, int] = {}
    best, peak = -1.0, {}
    for kind, _, j in ops:
        held[j] = held.get(j, 0) + (1 if kind == "F" else -1)
        total = sum(n * weight(c) for c, n in held.items())
        if total > best:
            best, peak = total, {c: n for c, n in held.items() if n}
    return peak


def stage_plan(
    passes: Sequence[Pass],
    stage: int,
    stages: int,
    micro_batches: int,
    send_nbytes: Sequence[int],
    rematerialization: bool = False,
) -> Plan:
    """Stage ``stage``'s ``passes`` as typed steps: a forward waits for its activation
    (stages after the first), computes (``Compute(m, "F")``, labelled ``F<m>`` with ``m``
    counted within its step) and sends its output on; a backward waits for its gradient
    (stages before the last), recomputes its forward with ``rematerialization``
    (``Compute(m, "R")``), computes (``Compute(m, "B")``) and sends its input's gradient
    back. Messages are tagged with the pass that receives them; ``send_nbytes[s]`` is what
    crosses the boundary after stage ``s``."""
    s, last = stage, stage == stages - 1
    program: list[Step] = []
    for kind, m in passes:
        local = m % micro_batches
        if (kind == "F" and s > 0) or (kind == "B" and not last):
            program.append(Receive((kind, m)))
        if kind == "F":
            program.append(Compute(m, "F", detail=f"F{local}"))
            if not last:
                program.append(Send(s + 1, ("F", m), send_nbytes[s], f"A{local}"))
            continue
        if rematerialization:
            program.append(Compute(m, "R", detail=f"R{local}"))
        program.append(Compute(m, "B", detail=f"B{local}"))
        if s > 0:
            program.append(Send(s - 1, ("B", m), send_nbytes[s - 1], f"G{local}"))
    return Plan([], program)


def in_flight(ops: Sequence[Pass] | Sequence[ChunkPass]) -> list[int]:
    """Micro-batches whose activations a stage holds after each of its ``ops`` (interleaved:
    passes through its chunks, each chunk's micro-batch counted once)."""
    held, out = 0, []
    for kind, *_ in ops:
        held += 1 if kind == "F" else -1
        out.append(held)
    return out


def peak_in_flight(ops: Sequence[Pass] | Sequence[ChunkPass]) -> int:
    """The most micro-batches a stage holds at once (its stashed activations)."""
    return max(in_flight(ops), default=0)


def ideal_bubble(stages: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """GPipe's bubble: ``(S − 1) / (M + S − 1)`` of the time for equal stages, free links;
    with ``v`` chunks per device (interleaved) ``(S − 1) / (v·M + S − 1)``, Narayanan et
    al. 2021's bubble ``(S − 1) / (v·M)`` of the ideal time (Sec. 2.2.2) as a share of the
    step."""
    return (stages - 1) / (virtual_stages * micro_batches + stages - 1)


def partition_auto(
    n_layers: int,
    stages: int,
    cost: Callable[[int, int, int], float],
    fits: Callable[[int, int, int], bool] = lambda s, first, stop: True,
) -> tuple[int, ...]:
    """Layer counts of ``stages`` contiguous, non-empty stages minimising the slowest stage.

    ``cost(s, first, stop)`` is stage ``s``'s time with layers ``[first, stop)`` (GPipe: its
    forward + backward compute, plus sending its boundary activation); ``fits(s, first,
    stop)`` whether its device holds it. Dynamic programming over (stages, layers): exact,
    ``O(S·L²)``; of equally good partitions the one with the earliest cuts. Raises
    :class:`SimdistError` when there are fewer layers than stages or nothing fits.
    """
    L, S = int(n_layers), int(stages)
    if S < 1 or L < S:
        raise SimdistError(f"{L} layers cannot fill {S} pipeline stages (one layer at least each)")
    inf = math.inf
    # best[s][j]: the slowest of stages 0..s-1 holding layers [0, j); cut[s][j]: where s-1 starts.
    best = [[inf] * (L + 1) for _ in range(S + 1)]
    cut = [[-1] * (L + 1) for _ in range(S + 1)]
    best[0][0] = -inf
    for s in range(1, S + 1):
        for j in range(s, L - (S - s) + 1):
            for i in range(s - 1, j):
                if best[s - 1][i] == inf or not fits(s - 1, i, j):
                    continue
                value = max(best[s - 1][i], cost(s - 1, i, j))
                if value < best[s][j]:
                    best[s][j], cut[s][j] = value, i
    if best[S][L] == inf:
        raise SimdistError(
            f"no partition of the model's {L} layers into {S} stages fits in device memory"
        )
    counts, j = [], L
    for s in range(S, 0, -1):
        i = cut[s][j]
        counts.append(j - i)
        j = i
    return tuple(reversed(counts))


def slowest_stage(counts: Sequence[int], cost: Callable[[int, int, int], float]) -> float:
    """The largest ``cost`` of a partition's stages (what :func:`partition_auto` minimises)."""
    return max(cost(s, a, b) for s, (a, b) in enumerate(bounds(counts)))
