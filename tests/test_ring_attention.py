"""Ring attention over the ``context`` axis ≡ attention on one device (outputs and gradients)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simdist.errors import SimdistError
from simdist.numerics.ring_attention import (
    chunk_order,
    context_mesh,
    full_attention,
    ring_attention,
)


def test_chunk_order_is_megatrons_load_balanced_split():
    # 2·CP = 8 chunks of 2 positions; device i holds chunks i and 7 − i.
    assert chunk_order(16, 4).tolist() == [0, 1, 14, 15, 2, 3, 12, 13, 4, 5, 10, 11, 6, 7, 8, 9]


def test_chunk_order_refuses_a_sequence_that_does_not_split():
    with pytest.raises(SimdistError, match="seq_len 12 must split into 2 x context = 8"):
        chunk_order(12, 4)


def _qkv(heads: int, kv_heads: int, seq: int = 32):
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (2, seq, heads, 8))
    k = jax.random.normal(keys[1], (2, seq, kv_heads, 8))
    v = jax.random.normal(keys[2], (2, seq, kv_heads, 8))
    cotangent = jax.random.normal(keys[3], (2, seq, heads, 8))
    return q, k, v, cotangent


@pytest.mark.parametrize(
    ("context", "heads", "kv_heads", "causal"),
    [(4, 4, 4, True), (2, 4, 2, True), (8, 4, 1, True), (4, 4, 4, False)],
)
def test_ring_attention_equals_full_attention(context, heads, kv_heads, causal):
    q, k, v, cotangent = _qkv(heads, kv_heads)
    mesh = context_mesh(context)

    def loss(attend):
        return lambda q, k, v: jnp.sum(attend(q, k, v) * cotangent)

    ring = lambda q, k, v: ring_attention(q, k, v, mesh, causal)  # noqa: E731
    full = lambda q, k, v: full_attention(q, k, v, causal)  # noqa: E731
    np.testing.assert_allclose(ring(q, k, v), full(q, k, v), rtol=0, atol=1e-5)
    ring_grads = jax.jit(jax.grad(loss(ring), argnums=(0, 1, 2)))(q, k, v)
    full_grads = jax.jit(jax.grad(loss(full), argnums=(0, 1, 2)))(q, k, v)
    for got, want in zip(ring_grads, full_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # The mask matters: causal and full attention differ on these inputs.
    assert not np.allclose(full_attention(q, k, v, True), full_attention(q, k, v, False))
