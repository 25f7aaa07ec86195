"""What one expert-parallel step moves and computes, from that step's routing (pure).

No SimPy, no JAX: arrays of token counts in, a :class:`~simdist.strategies.steps.Plan` and
its all-to-alls' per-pair sizes out, so that the tests check them by hand.

A step's routing is ``routed[G, k, E]``: the tokens device ``g`` of the ``data`` × ``expert``
mesh (row-major, G = D × X) sent to expert ``e`` as its ``k``-th choice. Each expert keeps
``slots`` of them, every first choice before any second and devices in mesh order
(:func:`keep_in_capacity`: the rule of :func:`simdist.numerics.moe.route`); the others are
dropped. Expert ``e`` lives on the device of column ``e // (E / X)`` of each data row, so a
device sends each device of its row the tokens it keeps for that device's experts
(:func:`exchange_tokens`), ``width × element bytes`` each — the sizes of Megatron-Core's
all-to-all token dispatcher, which moves exactly the routed tokens (``alltoall`` with split
sizes), not GShard's buffers padded to capacity. What a device keeps for its own experts
does not move.

One step of a data row's X devices (:func:`step_plan`), each all-to-all on the critical
path (GShard Sec. 3.2; DeepSpeed-MoE's and Megatron's MoE layers wait for it):

forward: the layers before the experts (embedding, router) → dispatch all-to-all → each
device's experts on the tokens it received → combine all-to-all (back to the tokens'
devices) → the layers after; backward: those layers → the combine's gradient (the
dispatch's direction) → the experts' backward → the dispatch's gradient (the combine's
direction) → the first layers. The experts' compute on a device is in proportion to the
tokens it received (:func:`expert_seconds`), so each all-to-all after it waits for the
busiest expert.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simdist.strategies.steps import Collective, Compute, Plan, Step, issue_and_wait

#: The step's all-to-alls in order: their label and whether they move the dispatch's way
#: (token's device → expert's device) or back.
EXCHANGES: tuple[tuple[str, bool], ...] = (
    ("dispatch forward", True),
    ("combine forward", False),
    ("combine backward", True),
    ("dispatch backward", False),
)
#: The compute spans of a step: (unit, phase, part of the model).
SPANS: tuple[tuple[int, str, str], ...] = (
    (0, "forward", "before"),
    (1, "forward", "experts"),
    (2, "forward", "after"),
    (3, "backward", "after"),
    (4, "backward", "experts"),
    (5, "backward", "before"),
)

#: How the compute rows name each part.
PARTS: dict[str, str] = {
    "before": "before the experts",
    "experts": "experts",
    "after": "after the experts",
}


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


def draw_routing(
    rng: np.random.Generator, weights: Sequence[float], devices: int, tokens: int, top_k: int
) -> np.ndarray:
    """``routed[G, k, E]`` drawn for a timing-only step: each of a device's ``tokens``
    chooses ``top_k`` distinct experts with probabilities ∝ ``weights`` (Gumbel-top-k: the
    k largest of ``log w + Gumbel`` are a draw without replacement)."""
    w = np.asarray(weights, dtype=np.float64)
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
    before: tuple[float, float], after: tuple[float, float], exchange_nbytes: Sequence[int]
) -> Plan:
    """A data row's step (module docstring): ``before`` and ``after`` the (forward,
    backward) seconds of the layers around the experts; the experts' spans carry no time
    (each device's is its own: :func:`expert_seconds`); ``exchange_nbytes`` the bytes each
    all-to-all of :data:`EXCHANGES` moves across devices."""
    seconds = {"before": before, "after": after, "experts": (0.0, 0.0)}
    collectives: list[Collective] = []
    program: list[Step] = []
    exchanges = iter(zip(EXCHANGES, exchange_nbytes, strict=True))
    for unit, phase, part in SPANS:
        if part == "experts":
            (label, _), nbytes = next(exchanges)
            issue_and_wait(program, collectives, Collective("all_to_all", nbytes, label))
        t = seconds[part][0 if phase == "forward" else 1]
        program.append(Compute(unit, phase, t, f"{phase} {PARTS[part]}"))
        if part == "experts":
            (label, _), nbytes = next(exchanges)
            issue_and_wait(program, collectives, Collective("all_to_all", nbytes, label))
    return Plan(collectives, program)
