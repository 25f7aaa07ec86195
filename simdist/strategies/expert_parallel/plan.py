"""What one expert-parallel step moves and computes, from that step's routing (pure).

No SimPy, no JAX: arrays of token counts in, a :class:`~simdist.strategies.steps.Plan` and
its all-to-alls' per-pair sizes out, so that the tests check them by hand.

A step's routing is ``routed[G, k, E]``: the tokens device ``g`` of the ``data`` × ``expert``
mesh (row-major, G = D × X) sent to expert ``e`` as its ``k``-th choice. Each expert keeps
``slots`` of them, every first choice before any second and devices in mesh order
(:func:`keep_in_capacity`: the rule of :func:`simdist.numerics.routing.route`); the others are
dropped. Expert ``e`` lives on the device of column ``e // (E / X)`` of each data row, so a
device sends each device of its row the tokens it keeps for that device's experts
(:func:`exchange_tokens`), ``width × element bytes`` each — the sizes of Megatron-Core's
all-to-all token dispatcher, which moves exactly the routed tokens (``alltoall`` with split
sizes), not GShard's buffers padded to capacity. What a device keeps for its own experts
does not move.

One step of a data row's X devices (:func:`step_plan`), each all-to-all on the critical
path (GShard Sec. 3.2; DeepSpeed-MoE's and Megatron's MoE layers wait for it), for each MoE
layer of the model (the zoo's ``moe`` has one; a ``gpt`` with ``experts`` one per MoE
block), each with its own routing:

forward: the layers before the experts (embedding, router) → dispatch all-to-all → each
device's experts on the tokens it received → combine all-to-all (back to the tokens'
devices) → the layers up to the next MoE layer, and so on; backward: from the last layers
→ the combine's gradient (the dispatch's direction) → the experts' backward → the
dispatch's gradient (the combine's direction) → the layers before, and so on back to the
first. The experts' compute on a device is in proportion to the
tokens it received (:func:`expert_seconds`), so each all-to-all after it waits for the
busiest expert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from simdist.strategies.steps import Collective, Compute, Plan, Step, issue_and_wait

#: The all-to-alls around an expert span, in plan order, and whether each moves the dispatch's
#: way (token's device → expert's device) or back: forward, the dispatch then the combine;
#: backward, the combine's gradient (the dispatch's way) then the dispatch's (back).
EXCHANGES: tuple[tuple[str, bool], ...] = (
    ("dispatch forward", True),
    ("combine forward", False),
    ("combine backward", True),
    ("dispatch backward", False),
)


class Span(NamedTuple):
    """A compute span of a step: ``phase``, ``part`` (``dense``: the run of layers ``index``
    between MoE layers, 0 before the first; ``experts``: MoE layer ``index``'s experts)."""

    phase: str
    part: str
    index: int


def spans(moe_layers: int) -> list[Span]:
    """The step's compute spans in order for a model of ``moe_layers`` MoE layers: forward
    from the first layers, backward from the last."""
    m = moe_layers
    out = [Span("forward", "dense", 0)]
    for k in range(m):
        out += [Span("forward", "experts", k), Span("forward", "dense", k + 1)]
    out.append(Span("backward", "dense", m))
    for k in reversed(range(m)):
        out += [Span("backward", "experts", k), Span("backward", "dense", k)]
    return out


def exchange_layer(index: int, moe_layers: int) -> int:
    """The MoE layer of the step's all-to-all ``index`` (two per expert span, in plan order:
    forward layers 0, 1, ..., then backward from the last)."""
    span = index // 2
    return span if span < moe_layers else 2 * moe_layers - 1 - span


def span_label(span: Span, names: Sequence[str]) -> str:
    """How the compute rows name ``span``: the zoo's one MoE layer as before the experts,
    experts, after the experts; several by the MoE layers' ``names``."""
    m = len(names)
    if span.part == "experts":
        return "experts" if m == 1 else f"experts {names[span.index]}"
    if span.index == 0:
        return "before the experts"
    if span.index == m:
        return "after the experts"
    return f"between {names[span.index - 1]} and {names[span.index]}"


def keep_in_capacity(routed: np.ndarray, slots: int) -> np.ndarray:
    """Tokens each device keeps per expert ``[G, E]`` from ``routed[G, k, E]``: each expert
    takes ``slots``, every first choice before any second, devices in mesh order."""
    g, k, e = routed.shape
    queue = np.asarray(routed, dtype=np.int64).transpose(1, 0, 2).reshape(k * g, e)
    before = np.cumsum(queue, axis=0) - queue
    kept = np.clip(slots - before, 0, queue)
    return kept.reshape(k, g, e).sum(axis=0)


def exchange_tokens(kept: np.ndarray, data: int, expert: int) -> np.ndarray:
    """``[D, X, X]``: in each data row, the tokens device column ``i`` sends column ``j``
    (those it keeps for ``j``'s experts; the diagonal stays on the device)."""
    e = kept.shape[1]
    per_device = e // expert
    rows = np.asarray(kept, dtype=np.int64).reshape(data, expert, expert, per_device)
    return rows.sum(axis=-1)


def received_tokens(tokens: np.ndarray) -> np.ndarray:
    """``[D, X]``: the tokens each device's experts compute (its own included)."""
    return tokens.sum(axis=1)


def expert_seconds(seconds: float, launch_s: float, tokens: int, profiled_slots: int) -> float:
    """A device's expert compute for ``tokens``: the profiled layer's time without its
    launch, in proportion to the slots it was profiled with, plus the launch."""
    if profiled_slots <= 0:
        return seconds
    return launch_s + (seconds - launch_s) * tokens / profiled_slots


class RoutingRecord(NamedTuple):
    """One step's routing as the report keeps it: the ``moe_routing`` rows (per expert, the
    MoE layers summed), the ``moe_steps`` row, and the step's imbalance and dropped share."""

    rows: list[dict[str, Any]]
    step: dict[str, Any]
    imbalance: float
    dropped: float


def routing_record(
    step: int,
    layers: Sequence[tuple[np.ndarray, np.ndarray]],
    holders: Sequence[str],
    all_to_all_nbytes: int,
) -> RoutingRecord:
    """Step ``step``'s record from each MoE layer's tokens routed and kept per device and
    expert ``[G, E]``: per expert (``holders[e]`` the device holding it), and per step the
    imbalance of its most imbalanced layer (busiest expert / mean) and ``all_to_all_nbytes``
    (the step's all-to-alls, across devices)."""
    routed = sum(r for r, _ in layers)
    kept = sum(k for _, k in layers)
    per_expert, kept_expert = routed.sum(axis=0), kept.sum(axis=0)
    rows = [
        {
            "step": step,
            "expert": e,
            "device": holders[e],
            "tokens": int(per_expert[e]),
            "kept": int(kept_expert[e]),
            "dropped": int(per_expert[e] - kept_expert[e]),
        }
        for e in range(len(holders))
    ]
    total = int(per_expert.sum())
    imbalance = 1.0
    for r, _ in layers:
        layer = r.sum(axis=0)
        if layer.sum():
            imbalance = max(imbalance, float(layer.max() / layer.mean()))
    dropped = float(1.0 - kept_expert.sum() / total) if total else 0.0
    row = {
        "step": step,
        "tokens": total,
        "kept": int(kept_expert.sum()),
        "dropped_fraction": dropped,
        "imbalance": imbalance,
        "max_expert_tokens": int(max(r.sum(axis=0).max() for r, _ in layers)),
        "all_to_all_nbytes": all_to_all_nbytes,
    }
    return RoutingRecord(rows, row, imbalance, dropped)


def routing_figures(stats: np.ndarray) -> dict[str, float | None]:
    """A run's imbalance and dropped share from its steps' ``[imbalance, dropped]`` rows:
    the summary's ``moe_imbalance_mean`` / ``_max`` and ``moe_dropped_fraction_mean``."""
    some = len(stats) > 0
    return {
        "moe_imbalance_mean": float(stats[:, 0].mean()) if some else None,
        "moe_imbalance_max": float(stats[:, 0].max()) if some else None,
        "moe_dropped_fraction_mean": float(stats[:, 1].mean()) if some else None,
    }


def routing_key_numbers(capacity: list[str]) -> list[list[str]]:
    """report.md's MoE rows (:mod:`simdist.report.table_figures`' ``key_numbers``): the
    strategy's ``capacity`` row (label, summary key, format), then the figures of
    :func:`routing_figures`."""
    return [
        capacity,
        ["MoE imbalance, max / mean tokens (mean of steps)", "moe_imbalance_mean", "{:.3f}"],
        ["MoE imbalance, worst step", "moe_imbalance_max", "{:.3f}"],
        ["MoE dropped tokens (mean of steps)", "moe_dropped_fraction_mean", "{:.2%}"],
    ]


def draw_routing(
    rng: np.random.Generator, weights: Sequence[float], devices: int, tokens: int, top_k: int
) -> np.ndarray:
    """``routed[G, k, E]`` drawn for a timing-only step: each of a device's ``tokens``
    chooses ``top_k`` distinct experts with probabilities ∝ ``weights`` (Gumbel-top-k: the
    k largest of ``log w + Gumbel`` are a draw without replacement). With one choice a
    device's counts are a multinomial draw, the same distribution without a key per token
    and expert (a full-size model's 10^5 tokens × 128 experts a device)."""
    w = np.asarray(weights, dtype=np.float64)
    if top_k == 1:
        return rng.multinomial(tokens, w / w.sum(), size=devices)[:, None, :]
    keys = np.log(w / w.sum()) + rng.gumbel(size=(devices, tokens, w.size))
    top = np.argsort(-keys, axis=-1, kind="stable")[..., :top_k]  # [G, n, k]
    onehot = top[..., None] == np.arange(w.size)
    return onehot.sum(axis=1)


def routing_weights(experts: int, zipf: float | None) -> list[float]:
    """Expert ``i``'s weight: 1 (uniform), or ``1 / (i + 1)^s`` (Zipf)."""
    if zipf is None:
        return [1.0] * experts
    return [1.0 / (i + 1) ** zipf for i in range(experts)]


def step_plan(
    dense: Sequence[tuple[float, float]], exchange_nbytes: Sequence[int], names: Sequence[str]
) -> Plan:
    """A data row's step (module docstring) for MoE layers ``names``: ``dense[j]`` the
    (forward, backward) seconds of the layers between MoE layers j - 1 and j (``len(names)
    + 1`` runs); the experts' spans carry no time (each device's is its own:
    :func:`expert_seconds`); ``exchange_nbytes`` the bytes each all-to-all moves across
    devices, in plan order (:func:`exchange_layer`)."""
    m = len(names)
    collectives: list[Collective] = []
    program: list[Step] = []
    exchanges = iter(exchange_nbytes)
    count = 0

    def exchange() -> None:
        nonlocal count
        label = EXCHANGES[(count % 2) + (0 if count < 2 * m else 2)][0]
        label = label if m == 1 else f"{label} {names[exchange_layer(count, m)]}"
        issue_and_wait(program, collectives, Collective("all_to_all", next(exchanges), label))
        count += 1

    for unit, span in enumerate(spans(m)):
        if span.part == "experts":
            exchange()
        t = 0.0 if span.part == "experts" else dense[span.index][span.phase == "backward"]
        program.append(Compute(unit, span.phase, t, f"{span.phase} {span_label(span, names)}"))
        if span.part == "experts":
            exchange()
    return Plan(collectives, program)
