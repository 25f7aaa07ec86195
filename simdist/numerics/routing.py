"""A mixture-of-experts layer's routing, as pure JAX functions: capacity, the router's top-k
decisions and queue places, the dispatch into experts' slots and the combine back, the
load-balancing loss (Switch Transformer, Fedus et al. 2021, arXiv:2101.03961, Sec. 2;
GShard, Lepikhin et al. 2020, arXiv:2006.16668, Algorithm 1; the rules are stated in
:mod:`simdist.numerics.moe`, which trains with them, and the full-size gpt's MoE layers,
:mod:`simdist.numerics.fullsize.transformer`, route with them too).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "Routing",
    "balance_loss",
    "capacity",
    "combine",
    "dispatch",
    "kept_counts",
    "route",
    "slot_index",
]


def capacity(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Slots per expert: ``ceil(top_k · tokens / experts · factor)`` (Switch eq. 3; GShard)."""
    return max(1, math.ceil(top_k * tokens / experts * factor))


class Routing(NamedTuple):
    """The router's decisions for ``n`` tokens: each token's ``top_k`` experts ``[n, k]``,
    their gates, the token's place in each one's queue, whether it is kept (place <
    capacity), the router's probabilities ``[n, E]`` and the tokens sent to each expert as
    each choice ``[k, E]`` (before any is dropped)."""

    expert: jax.Array
    gate: jax.Array
    position: jax.Array
    kept: jax.Array
    probs: jax.Array
    counts: jax.Array


def route(
    logits: jax.Array,
    top_k: int,
    slots: int,
    gather: Callable[[jax.Array], jax.Array] | None = None,
    index: Any = 0,
) -> Routing:
    """Route ``n`` tokens by their router ``logits [n, E]`` into ``slots`` places per expert.

    ``gather(counts)`` stacks every device's ``[k, E]`` counts ``[G, k, E]`` (an all-gather)
    and ``index`` is this device's place among the G: its tokens queue after those of the
    devices before it. None: one device, the whole batch.
    """
    experts = logits.shape[-1]
    probs = jax.nn.softmax(logits, axis=-1)
    top, expert = jax.lax.top_k(probs, top_k)
    gate = top if top_k == 1 else top / top.sum(axis=-1, keepdims=True)
    onehot = jax.nn.one_hot(expert, experts, dtype=jnp.int32)  # [n, k, E]
    counts = onehot.sum(axis=0)  # [k, E]
    if gather is None:
        before, totals = jnp.zeros_like(counts), counts
    else:
        every = gather(counts)  # [G, k, E]
        earlier = (jnp.arange(every.shape[0]) < index)[:, None, None]
        before, totals = jnp.where(earlier, every, 0).sum(axis=0), every.sum(axis=0)
    # Every first choice queues before any second (GShard), each in batch order.
    first_of_choice = jnp.cumsum(totals, axis=0) - totals
    place = jnp.cumsum(onehot, axis=0) - onehot + (before + first_of_choice)[None]
    position = (place * onehot).sum(axis=-1)  # [n, k]
    return Routing(expert, gate, position, position < slots, probs, counts)


def slot_index(r: Routing, experts: int, slots: int) -> jax.Array:
    """Each choice's row in the flattened ``[E · C]`` buffer; a dropped one the spare row
    ``E · C`` past the end."""
    return jnp.where(r.kept, r.expert * slots + r.position, experts * slots)


def dispatch(h: jax.Array, r: Routing, experts: int, slots: int) -> jax.Array:
    """The tokens ``h [n, d]`` in their experts' slots ``[E, C, d]`` (empty slots zero): a
    scatter, GShard's one-hot dispatch einsum without its n · E · C products."""
    d = h.shape[1]
    rows = slot_index(r, experts, slots).reshape(-1)
    buffer = (
        jnp.zeros((experts * slots + 1, d), h.dtype)
        .at[rows]
        .add(jnp.repeat(h, r.expert.shape[1], axis=0))
    )
    return buffer[:-1].reshape((experts, slots, d))


def combine(out: jax.Array, r: Routing, experts: int, slots: int) -> jax.Array:
    """Each token's experts' outputs ``out [E, C, d]`` weighted by its gates ``[n, d]`` (a
    dropped choice adds nothing): the gather undoing :func:`dispatch`."""
    d = out.shape[-1]
    rows = jnp.concatenate([out.reshape((experts * slots, d)), jnp.zeros((1, d), out.dtype)])
    picked = rows[slot_index(r, experts, slots)]  # [n, k, d]
    return (picked * (r.gate * r.kept)[..., None]).sum(axis=1)


def balance_loss(
    r: Routing, total_tokens: int, psum: Callable[[jax.Array], jax.Array] = lambda v: v
) -> jax.Array:
    """Switch's load-balancing loss without its weight: ``E · Σ_i f_i · P_i`` (eq. 4–6),
    ``f`` from the first choices, over ``total_tokens`` (``psum`` adds up the devices')."""
    experts = r.probs.shape[-1]
    f = psum(r.counts[0].astype(jnp.float32)) / total_tokens
    p = psum(r.probs.sum(axis=0)) / total_tokens
    return experts * jnp.sum(f * p)


def kept_counts(r: Routing, experts: int) -> jax.Array:
    """Tokens kept per expert ``[E]`` (every choice counted)."""
    onehot = jax.nn.one_hot(r.expert, experts, dtype=jnp.int32)
    return (onehot * r.kept[..., None]).sum(axis=(0, 1))
