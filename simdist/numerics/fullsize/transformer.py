"""BERT-base and GPT-2 as sequences of layers.

* BERT-base: Devlin et al. 2019 (L=12, H=768, A=12), post-LayerNorm, pooler included;
* GPT-2 124M: Radford et al. 2019, pre-LayerNorm, output projection tied to the token embedding;
* gpt: the same layout at any size, as Megatron-LM's GPT models (Narayanan et al. 2021,
  arXiv:2104.04473, Sec. 5.1 and Table 1): learned positions, MLP of 4 × hidden, tied head.
  Its parameters are 12·l·h² + 13·l·h + (V + s)·h, their formula, plus the final
  LayerNorm's 2·h which the formula leaves out. Llama's options (Touvron et al. 2023,
  Sec. 2.2; Dubey et al. 2024, arXiv:2407.21783, Sec. 3.2) replace its parts: RMSNorm
  (Zhang & Sennrich 2019), a SwiGLU MLP (Shazeer 2020) of its own width, rotary positions
  (Su et al. 2021) instead of learned ones, grouped-query attention (Ainslie et al. 2023:
  fewer key/value heads, each shared by heads / kv_heads query heads), no biases, and an
  output head of its own (:class:`LMHead`); :mod:`simdist.model_size` counts them.
  With ``experts``, every ``moe_every``-th block's MLP is a mixture-of-experts layer
  (:class:`MoEFeedForward`: GShard, Lepikhin et al. 2020; Mixtral, Jiang et al. 2024), each
  expert the block's MLP, routed as the zoo's ``moe`` routes (:mod:`simdist.numerics.routing`).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from simdist.gpt_shape import GptShape
from simdist.model_size import is_moe_block
from simdist.numerics.fullsize.blocks import DenseLayer
from simdist.numerics.fullsize.layered import Layer
from simdist.numerics.routing import capacity, combine, dispatch, route

__all__ = [
    "FeedForward",
    "LMHead",
    "MoEFeedForward",
    "Pooler",
    "SelfAttention",
    "TiedLMHead",
    "TokenEmbeddings",
    "apply_rotary",
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
    learned_positions: bool = True  # False: rotary positions, applied in the attention

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        positions = jnp.arange(ids.shape[1])
        x = nn.Embed(self.vocab, self.hidden, name="word_embeddings")(ids)
        if self.learned_positions:
            embed = nn.Embed(self.max_positions, self.hidden, name="position_embeddings")
            x = x + embed(positions)[None]
        if self.token_types:
            types = jnp.zeros_like(ids)
            x = x + nn.Embed(self.token_types, self.hidden, name="token_type_embeddings")(types)
        if self.layer_norm_epsilon is not None:
            x = nn.LayerNorm(epsilon=self.layer_norm_epsilon)(x)
        return x


def apply_rotary(x: jax.Array, theta: float) -> jax.Array:
    """Rotary position embedding (Su et al. 2021, RoFormer, Eq. 34) of ``x`` (batch,
    sequence, heads, head width): each pair of features (i, i + d/2) of position m turned by
    the angle m·θ^(−2i/d), as Hugging Face's ``rotate_half`` pairs them (Meta's reference
    pairs neighbours; the same operations)."""
    seq, width = x.shape[1], x.shape[-1]
    half = width // 2
    inverse = theta ** (-jnp.arange(half, dtype=jnp.float32) * 2.0 / width)
    angles = jnp.arange(seq, dtype=jnp.float32)[:, None] * inverse[None, :]
    cos = jnp.cos(angles)[None, :, None, :]
    sin = jnp.sin(angles)[None, :, None, :]
    first, second = x[..., :half], x[..., half:]
    return jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)


def _norm(rms: bool, epsilon: float, name: str | None = None) -> nn.Module:
    return (
        nn.RMSNorm(epsilon=epsilon, name=name) if rms else nn.LayerNorm(epsilon=epsilon, name=name)
    )


class SelfAttention(nn.Module):
    """Multi-head self-attention with its residual; post-LN (BERT) or pre-LN (GPT-2).

    Llama's options: ``kv_heads`` key/value heads (grouped-query attention; None: ``heads``),
    ``rms_norm``, ``rope_theta`` (rotary positions on Q and K; None: none) and ``use_bias``.
    """

    heads: int
    causal: bool = False
    pre_layer_norm: bool = False
    epsilon: float = 1e-12
    kv_heads: int | None = None
    rms_norm: bool = False
    rope_theta: float | None = None
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, hidden = x.shape
        head_dim = hidden // self.heads
        kv = self.heads if self.kv_heads is None else self.kv_heads
        h = _norm(self.rms_norm, self.epsilon)(x) if self.pre_layer_norm else x

        def heads(name: str, n: int) -> jax.Array:
            dense = nn.Dense(n * head_dim, use_bias=self.use_bias, name=name)
            return dense(h).reshape((batch, seq, n, head_dim))

        q, k, v = heads("query", self.heads), heads("key", kv), heads("value", kv)
        if self.rope_theta is not None:
            q, k = apply_rotary(q, self.rope_theta), apply_rotary(k, self.rope_theta)
        if kv == self.heads:
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(head_dim)
        else:  # each key/value head serves heads / kv query heads (Ainslie et al. 2023)
            q = q.reshape((batch, seq, kv, self.heads // kv, head_dim))
            logits = jnp.einsum("bqngd,bknd->bngqk", q, k) / math.sqrt(head_dim)
        if self.causal:
            mask = jnp.tril(jnp.ones((seq, seq), bool))
            mask = mask[None, None] if kv == self.heads else mask[None, None, None]
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits, axis=-1)
        if kv == self.heads:
            out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        else:
            out = jnp.einsum("bngqk,bknd->bqngd", weights, v)
        out = out.reshape((batch, seq, hidden))
        y = x + nn.Dense(hidden, use_bias=self.use_bias, name="output")(out)
        return y if self.pre_layer_norm else nn.LayerNorm(epsilon=self.epsilon)(y)


class FeedForward(nn.Module):
    """Dense (4×) + GELU + Dense with its residual; post-LN (BERT) or pre-LN (GPT-2).

    ``swiglu`` (Shazeer 2020; Llama): the first dense layer is the gate and up matrices side
    by side (2 × ``inner`` columns, as Megatron-Core's fused ``linear_fc1``) and the output
    is SiLU(gate) · up; ``rms_norm`` and ``use_bias`` as :class:`SelfAttention`'s.
    """

    inner: int
    pre_layer_norm: bool = False
    epsilon: float = 1e-12
    approximate_gelu: bool = False  # BERT: exact erf GELU; GPT-2: the tanh approximation
    swiglu: bool = False
    rms_norm: bool = False
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = _norm(self.rms_norm, self.epsilon)(x) if self.pre_layer_norm else x
        if self.swiglu:
            up = nn.Dense(2 * self.inner, use_bias=self.use_bias, name="intermediate")(h)
            h = nn.silu(up[..., : self.inner]) * up[..., self.inner :]
        else:
            inner = nn.Dense(self.inner, use_bias=self.use_bias, name="intermediate")(h)
            h = nn.gelu(inner, self.approximate_gelu)
        y = x + nn.Dense(x.shape[-1], use_bias=self.use_bias, name="output")(h)
        return y if self.pre_layer_norm else nn.LayerNorm(epsilon=self.epsilon)(y)


class GptExperts(nn.Module):
    """``experts`` copies of :class:`FeedForward`'s matrices (without its norm and residual),
    stacked on axis 0, each on its own slots ``[E, C, d]``."""

    experts: int
    inner: int
    swiglu: bool = False
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        e, d = self.experts, x.shape[-1]
        up_width = 2 * self.inner if self.swiglu else self.inner
        init = nn.initializers.lecun_normal(batch_axis=(0,))
        up = jnp.einsum("esd,edf->esf", x, self.param("intermediate", init, (e, d, up_width)))
        if self.use_bias:
            up = up + self.param("intermediate_bias", nn.initializers.zeros, (e, up_width))[:, None]
        if self.swiglu:
            h = nn.silu(up[..., : self.inner]) * up[..., self.inner :]
        else:
            h = nn.gelu(up, approximate=True)
        out = jnp.einsum("esf,efd->esd", h, self.param("output", init, (e, self.inner, d)))
        if self.use_bias:
            out = out + self.param("output_bias", nn.initializers.zeros, (e, d))[:, None]
        return out


class MoEFeedForward(nn.Module):
    """A block's mixture-of-experts MLP with its residual (pre-norm): a router (no bias),
    each token's ``top_k`` experts within ``capacity_factor``
    (:func:`simdist.numerics.routing.route` over the layer's batch), :class:`GptExperts` on
    their slots, the gated outputs combined.
    Parameters: the norm, the router's ``h · experts`` and the experts (``experts`` ×
    the MLP's matrices and biases), as :mod:`simdist.model_size` counts them."""

    inner: int
    experts: int
    top_k: int = 2
    capacity_factor: float = 1.25
    epsilon: float = 1e-5
    swiglu: bool = False
    rms_norm: bool = False
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq, d = x.shape
        h = _norm(self.rms_norm, self.epsilon)(x).reshape((batch * seq, d))
        logits = nn.Dense(self.experts, use_bias=False, name="router")(h)
        slots = capacity(batch * seq, self.experts, self.top_k, self.capacity_factor)
        r = route(logits, self.top_k, slots)
        experts = GptExperts(self.experts, self.inner, self.swiglu, self.use_bias, name="experts")
        out = experts(dispatch(h, r, self.experts, slots))
        return x + combine(out, r, self.experts, slots).reshape((batch, seq, d))


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
    rms_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        wte = self.param("wte", nn.initializers.normal(0.02), (self.vocab, x.shape[-1]))
        return _norm(self.rms_norm, self.epsilon, "ln_f")(x) @ wte.T


class LMHead(nn.Module):
    """An untied output head (Llama): the final norm and logits over the vocabulary with a
    matrix of its own, without bias (Megatron's and Llama's output layers have none)."""

    vocab: int
    epsilon: float = 1e-5
    rms_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = _norm(self.rms_norm, self.epsilon, "ln_f")(x)
        return nn.Dense(self.vocab, use_bias=False, name="output_embeddings")(h)


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
    return gpt_layers(GptShape(layers=12, hidden=768, heads=12, seq_len=1024, vocab=50257))


def gpt_layers(shape: GptShape) -> list[Layer]:
    """Gpt ``shape``'s embeddings (``vocab`` tokens, ``seq_len`` positions), ``layers`` blocks of
    width ``hidden`` (attention of ``heads`` heads and an MLP of ``ffn_hidden``, default
    4 × ``hidden``, each one layer) and the LM head, tied to the token embedding unless
    ``tied_embeddings`` is false. The layout options are
    :data:`~simdist.catalog.GPT_LAYOUT_DEFAULTS`'s (``dropout`` is left out of every
    full-size model: it changes no FLOP count). With ``experts``, every ``moe_every``-th
    block's MLP is a :class:`MoEFeedForward` layer named ``h.<i>.moe`` of as many experts,
    each the MLP.

    Every block is the same module, so the profile lowers one attention and one MLP (and one
    MoE layer).
    """
    layers, hidden, heads, seq_len = shape.layers, shape.hidden, shape.heads, shape.seq_len
    vocab, kv_heads, ffn_hidden, norm = shape.vocab, shape.kv_heads, shape.ffn_hidden, shape.norm
    mlp, positions, rope_theta, bias = shape.mlp, shape.positions, shape.rope_theta, shape.bias
    tied_embeddings, experts, top_k = shape.tied_embeddings, shape.experts, shape.top_k
    capacity_factor, moe_every = shape.capacity_factor, shape.moe_every
    rms = norm == "rmsnorm"
    rotary = positions == "rotary"
    theta = (10_000.0 if rope_theta is None else rope_theta) if rotary else None
    out = [
        Layer("embeddings", TokenEmbeddings(vocab, seq_len, hidden, learned_positions=not rotary))
    ]
    attention = SelfAttention(
        heads,
        causal=True,
        pre_layer_norm=True,
        epsilon=1e-5,
        kv_heads=None if kv_heads == heads else kv_heads,
        rms_norm=rms,
        rope_theta=theta,
        use_bias=bias,
    )
    mlp_layer = FeedForward(
        4 * hidden if ffn_hidden is None else ffn_hidden,
        pre_layer_norm=True,
        epsilon=1e-5,
        approximate_gelu=True,
        swiglu=mlp == "swiglu",
        rms_norm=rms,
        use_bias=bias,
    )
    moe_layer = None
    if experts is not None:
        moe_layer = MoEFeedForward(
            4 * hidden if ffn_hidden is None else ffn_hidden,
            experts,
            top_k,
            capacity_factor,
            swiglu=mlp == "swiglu",
            rms_norm=rms,
            use_bias=bias,
        )
    for i in range(layers):
        out += [Layer(f"h.{i}.attention", attention)]
        if moe_layer is not None and is_moe_block(i, moe_every):
            out += [Layer(f"h.{i}.moe", moe_layer)]
        else:
            out += [Layer(f"h.{i}.mlp", mlp_layer)]
    if tied_embeddings:
        return [*out, Layer("lm_head", TiedLMHead(vocab, rms_norm=rms), tied=("wte",))]
    return [*out, Layer("lm_head", LMHead(vocab, rms_norm=rms))]
