"""BERT-base and GPT-2 as sequences of layers.

* BERT-base: Devlin et al. 2019 (L=12, H=768, A=12), post-LayerNorm, pooler included;
* GPT-2 124M: Radford et al. 2019, pre-LayerNorm, output projection tied to the token embedding;
* gpt: the same layout at any size, as Megatron-LM's GPT models (Narayanan et al. 2021,
  arXiv:2104.04473, Sec. 5.1 and Table 1): learned positions, MLP of 4 × hidden, tied head.
  Its parameters are 12·l·h² + 13·l·h + (V + s)·h, their formula, plus the final
  LayerNorm's 2·h which the formula leaves out.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.numerics.fullsize.blocks import DenseLayer
from simdist.numerics.fullsize.layered import Layer

__all__ = [
    "FeedForward",
    "Pooler",
    "SelfAttention",
    "TiedLMHead",
    "TokenEmbeddings",
    "bert_base_layers",
    "gpt2_layers",
    "gpt_layers",
]


class TokenEmbeddings(nn.Module):
    """Token + learned position (+ BERT's token-type) embeddings, LayerNorm for BERT.

    Inputs are token ids ``(batch, sequence)``; positions are 0..sequence-1 and every token
    has type 0.
    """

    vocab: int
    max_positions: int
    hidden: int
    token_types: int = 0  # BERT: 2; GPT-2: none
    layer_norm_epsilon: float | None = None  # BERT: 1e-12 after the sum; GPT-2: none

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        positions = jnp.arange(ids.shape[1])
        x = nn.Embed(self.vocab, self.hidden, name="word_embeddings")(ids)
        x = (
            x
            + nn.Embed(self.max_positions, self.hidden, name="position_embeddings")(positions)[None]
        )
        if self.token_types:
            types = jnp.zeros_like(ids)
            x = x + nn.Embed(self.token_types, self.hidden, name="token_type_embeddings")(types)
        if self.layer_norm_epsilon is not None:
            x = nn.LayerNorm(epsilon=self.layer_norm_epsilon)(x)
        return x


class SelfAttention(nn.Module):
    """Multi-head self-attention with its residual; post-LN (BERT) or pre-LN (GPT-2)."""

    heads: int
    causal: bool = False
    pre_layer_norm: bool = False
    epsilon: float = 1e-12

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, hidden = x.shape
        head_dim = hidden // self.heads
        h = nn.LayerNorm(epsilon=self.epsilon)(x) if self.pre_layer_norm else x

        def heads(name: str) -> jax.Array:
            return nn.Dense(hidden, name=name)(h).reshape((batch, seq, self.heads, head_dim))

        q, k, v = heads("query"), heads("key"), heads("value")
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
        if self.causal:
            mask = jnp.tril(jnp.ones((seq, seq), bool))[None, None]
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits, axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape((batch, seq, hidden))
        y = x + nn.Dense(hidden, name="output")(out)
        return y if self.pre_layer_norm else nn.LayerNorm(epsilon=self.epsilon)(y)


class FeedForward(nn.Module):
    """Dense (4×) + GELU + Dense with its residual; post-LN (BERT) or pre-LN (GPT-2)."""

    inner: int
    pre_layer_norm: bool = False
    epsilon: float = 1e-12
    approximate_gelu: bool = False  # BERT: exact erf GELU; GPT-2: the tanh approximation

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.LayerNorm(epsilon=self.epsilon)(x) if self.pre_layer_norm else x
        h = nn.gelu(nn.Dense(self.inner, name="intermediate")(h), self.approximate_gelu)
        y = x + nn.Dense(x.shape[-1], name="output")(h)
        return y if self.pre_layer_norm else nn.LayerNorm(epsilon=self.epsilon)(y)


class Pooler(nn.Module):
    """BERT's pooler: dense + tanh on the first token."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(nn.Dense(x.shape[-1])(x[:, 0]))


class TiedLMHead(nn.Module):
    """GPT-2's final LayerNorm and logits over the vocabulary with the token embedding matrix.

    ``wte`` is the embedding layer's matrix (tied): its gradient is summed into that layer's.
    """

    vocab: int
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        wte = self.param("wte", nn.initializers.normal(0.02), (self.vocab, x.shape[-1]))
        return nn.LayerNorm(epsilon=self.epsilon, name="ln_f")(x) @ wte.T


def bert_base_layers(n_outputs: int | None) -> list[Layer]:
    """BERT-base's embeddings, 12 encoder layers (attention and feed-forward each one layer)
    and pooler, plus a classifier of ``n_outputs`` when it is given."""
    layers = [Layer("embeddings", TokenEmbeddings(30522, 512, 768, 2, 1e-12))]
    for i in range(12):
        layers.append(Layer(f"encoder.{i}.attention", SelfAttention(12)))
        layers.append(Layer(f"encoder.{i}.ffn", FeedForward(3072)))
    layers.append(Layer("pooler", Pooler()))
    if n_outputs is not None:
        layers.append(Layer("classifier", DenseLayer(n_outputs, relu=False)))
    return layers


def gpt2_layers() -> list[Layer]:
    """GPT-2 124M's embeddings, 12 blocks (attention and MLP each one layer) and the LM head
    tied to the token embedding."""
    return gpt_layers(layers=12, hidden=768, heads=12, seq_len=1024, vocab=50257)


def gpt_layers(layers: int, hidden: int, heads: int, seq_len: int, vocab: int) -> list[Layer]:
    """A GPT's embeddings (``vocab`` tokens, ``seq_len`` positions), ``layers`` blocks of
    width ``hidden`` (attention of ``heads`` heads and a 4 × ``hidden`` MLP, each one layer)
    and the LM head tied to the token embedding.

    Every block is the same module, so the profile lowers one attention and one MLP.
    """
    out = [Layer("embeddings", TokenEmbeddings(vocab, seq_len, hidden))]
    attention = SelfAttention(heads, causal=True, pre_layer_norm=True, epsilon=1e-5)
    mlp = FeedForward(4 * hidden, pre_layer_norm=True, epsilon=1e-5, approximate_gelu=True)
    for i in range(layers):
        out += [Layer(f"h.{i}.attention", attention), Layer(f"h.{i}.mlp", mlp)]
    return [*out, Layer("lm_head", TiedLMHead(vocab), tied=("wte",))]
