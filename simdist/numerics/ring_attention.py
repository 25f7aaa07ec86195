"""Ring attention for real: context parallelism's attention on emulated JAX devices.

Liu, Zaharia & Abbeel 2023 ("Ring Attention with Blockwise Transformers for Near-Infinite
Context", arXiv:2310.01889, Sec. 3): the sequence is split over the ``context`` axis of
CP devices; each keeps its queries and passes its key/value block to the next device of
the ring (``jax.lax.ppermute``), CP steps in all, so that every query meets every key
once. The softmax is accumulated blockwise as FlashAttention does (Dao et al. 2022,
"online softmax"): a running maximum ``m``, a running denominator ``l`` and an unnormalised
output ``o``, each rescaled by ``exp(m_old - m_new)`` when a block raises the maximum; the
output is ``o / l`` after the last block. JAX's autodiff of the ``shard_map`` runs the
backward ring: the transpose of a ``ppermute`` is the ``ppermute`` the other way, so the
key/value gradients travel back to their owners.

Causal masking with Megatron-LM's load balancing (``get_batch_on_this_cp_rank``,
megatron/training/utils.py in 2024's releases, and TransformerEngine's
``AttnFuncWithCPAndKVP2P``): the sequence is cut into 2·CP chunks and device i holds
chunks i and 2·CP − 1 − i, so every device has as many earlier keys to attend to as any
other (:func:`chunk_order`). Each device carries the global positions of its queries and
of the key block it holds; a query attends to the keys at its position or before.

Grouped-query attention (Ainslie et al. 2023): ``k`` and ``v`` may have fewer heads than
``q`` (a divisor); each key/value head serves ``heads / kv_heads`` query heads, and only
the ``kv_heads`` heads travel the ring.

The mesh comes from :class:`simdist.hardware.mesh.Mesh` (:func:`context_mesh`), as every
numerics module lays its devices out by that one rule.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.numerics.device_allreduce import device_shortfall, replica_backend, replica_devices

CONTEXT = "context"


def context_mesh(context: int) -> jax.sharding.Mesh:
    """The first CP JAX devices as a ``context`` mesh."""
    devices = replica_devices()
    shortfall = device_shortfall(replica_backend(), len(devices), context)
    if shortfall is not None:
        raise SimdistError(f"ring attention: {shortfall}")
    return Mesh(devices[:context], [(CONTEXT, context)]).to_jax()


def chunk_order(seq_len: int, context: int) -> np.ndarray:
    """The positions of a sequence of ``seq_len`` in the order the CP devices hold them:
    2·CP chunks, device i chunks i and 2·CP − 1 − i (module docstring), device 0 first."""
    if seq_len % (2 * context):
        raise SimdistError(
            f"ring attention: seq_len {seq_len} must split into 2 x context = {2 * context} "
            "equal chunks"
        )
    chunk = seq_len // (2 * context)
    chunks = [c for i in range(context) for c in (i, 2 * context - 1 - i)]
    return np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in chunks])


def _grouped(k: jax.Array, heads: int) -> jax.Array:
    """Key or value heads repeated to serve ``heads`` query heads (GQA)."""
    return jnp.repeat(k, heads // k.shape[2], axis=2)


def full_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = True) -> jax.Array:
    """Softmax attention on one device, the reference: ``q`` of shape (batch, seq, heads,
    head_dim), ``k`` and ``v`` (batch, seq, kv_heads, head_dim)."""
    heads, head_dim = q.shape[2], q.shape[3]
    k, v = _grouped(k, heads), _grouped(v, heads)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
    if causal:
        s = q.shape[1]
        allowed = jnp.arange(s)[None, :] <= jnp.arange(s)[:, None]
        scores = jnp.where(allowed, scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def _ring_local(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_pos: jax.Array,
    k_pos: jax.Array,
    *,
    context: int,
    causal: bool,
) -> jax.Array:
    """One device's queries against every key/value block, one block per ring step."""
    heads, head_dim = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(head_dim)
    batch, rows = q.shape[0], q.shape[1]
    m = jnp.full((batch, heads, rows), -jnp.inf, q.dtype)
    denominator = jnp.zeros((batch, heads, rows), q.dtype)
    out = jnp.zeros((batch, heads, rows, head_dim), q.dtype)
    ring = [(i, (i + 1) % context) for i in range(context)]
    for step in range(context):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, _grouped(k, heads)) * scale
        if causal:
            scores = jnp.where(k_pos[None, :] <= q_pos[:, None], scores, -jnp.inf)
        new_m = jnp.maximum(m, scores.max(axis=-1))
        # Rows that have met no allowed key yet keep m = -inf: shift them by 0, not by -inf.
        shift = jnp.where(jnp.isfinite(new_m), new_m, 0.0)
        p = jnp.exp(scores - shift[..., None])
        rescale = jnp.exp(m - shift)
        denominator = denominator * rescale + p.sum(axis=-1)
        out = out * rescale[..., None] + jnp.einsum("bhqk,bkhd->bhqd", p, _grouped(v, heads))
        m = new_m
        if step < context - 1:
            k, v, k_pos = (jax.lax.ppermute(x, CONTEXT, ring) for x in (k, v, k_pos))
    return jnp.einsum("bhqd->bqhd", out / denominator[..., None])


def ring_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mesh: jax.sharding.Mesh,
    causal: bool = True,
) -> jax.Array:
    """Attention of the whole sequence computed by ring attention over ``mesh``'s
    ``context`` axis (shapes as :func:`full_attention`'s; the output in sequence order)."""
    context = mesh.shape[CONTEXT]
    order = chunk_order(q.shape[1], context)
    positions = jnp.asarray(order, dtype=jnp.int32)

    def local(q: jax.Array, k: jax.Array, v: jax.Array, pos: jax.Array) -> jax.Array:
        return _ring_local(q, k, v, pos, pos, context=context, causal=causal)

    seq = P(None, CONTEXT)
    mapped = jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(seq, seq, seq, P(CONTEXT)), out_specs=seq)
    )
    out = mapped(q[:, order], k[:, order], v[:, order], positions)
    return out[:, np.argsort(order)]
