"""A model's size from its configuration alone: parameters, activations and FLOPs, no JAX.

Building a model to read its size (Flax's ``init`` on shapes, XLA's cost analysis) takes
time and memory that grow with the model: a gpt of 10^6 layers never finished building, one
of 10^12 layers exhausted the memory, and a sequence of 10^9 positions overflowed XLA's
shape arithmetic. The configurable ``gpt`` has a closed form, so its size is known in
microseconds from its five numbers, and a model past the caps of
:mod:`simdist.scenario.fields` is refused when the scenario loads, before anything is built.

gpt (the layout of :mod:`simdist.numerics.fullsize.transformer`), for l layers of width h,
a heads of width d = h/a, s positions, a vocabulary of V and t input tokens. GPT-2's layout
(the defaults: learned positions, pre-LayerNorm blocks of attention and a 4h GELU MLP, biases,
the LM head tied to the token embedding):

* parameters: (V + s)·h for the embeddings, 12·h² + 13·h per block (attention 4h² + 6h with
  its LayerNorm, MLP 8h² + 7h) and 2·h for the final LayerNorm: Narayanan et al. 2021
  (arXiv:2104.04473, Sec. 5.1) count 12·l·h² + 13·l·h + (V + s)·h, the final LayerNorm
  left out;
* activations of one example, float32, as the memory check counts them (each layer's output,
  :class:`~simdist.numerics.memory.Footprint`): t·h per embedding and block output, t·V for
  the logits, and the t int32 token ids of the input;
* FLOPs of one example's forward: 24·t·l·h²·(1 + t/(6h) + V/(12·l·h)), the matrix products
  of Narayanan et al. 2021 Sec. 5.1 (their 72 for forward and backward, 96 with
  recomputation); training is three times the forward. XLA's count of the built model is
  within a few percent (softmax, LayerNorm and GELU are left out here; tests/test_gpt_model.py).

Llama's layout options (Touvron et al. 2023; Dubey et al. 2024, arXiv:2407.21783, Sec. 3.2)
change the terms, not the shape of the count. With k key/value heads (grouped-query
attention, Ainslie et al. 2023) the keys and values are k·d wide: attention 2h² + 2h·k·d
(+ 2h + 2k·d of biases); a SwiGLU MLP (Shazeer 2020) of width f has three matrices, 3h·f
(+ 2f + h of biases), a GELU MLP two, 2h·f (+ f + h); RMSNorm has a scale (h), LayerNorm a
scale and a bias (2h); rotary positions (Su et al. 2021) have no parameters, learned ones
s·h; an untied output head adds its own V·h (without bias, as Megatron's and Llama's). The
forward's matrix products are 2·t per matrix parameter of the blocks and the head, plus the
attention core's 4·t²·h (Q·Kᵀ and the scores times V, counted whole as Narayanan et al. do).

Model FLOPs per token as the Llama 3 paper counts them: its compute budget is 6·N·D (3.8e25
FLOPs for 405B parameters on 15.6T tokens, Sec. 3.2.1 and Sec. 1), and its MFU (Sec. 3.3.2,
Table 4) is Chowdhery et al. 2022's (PaLM, arXiv:2204.02311, Appendix B): 6·N + 12·l·h·s
per token of a sequence of s, N the parameters that multiply (the lookup tables of the
token and position embeddings left out, as Meta's torchtitan counts them in
``get_num_flop_per_token``; a tied matrix counts once, as the head) and the attention core
counted whole, without recomputation: :func:`gpt_model_flops_per_token`.

Mixture-of-experts blocks (``experts`` E, ``top_k`` k, every ``moe_every``-th block: GShard,
Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021; Mixtral, Jiang et al. 2024):
the block's MLP is replaced by its norm, a router of h·E (no bias) and E experts, each the
block's MLP without its norm (matrices and biases as above). Each token runs k experts and
the router: its forward's matrix products are 2·t·(h·E + k·MLP matrices) in that block, and
the model FLOPs count the k experts it runs, not the E it holds (6·N with N the parameters a
token multiplies, as Megatron-Core's MoE MFU counts them, ``num_experts_routed_to``).
Capacity padding and dropped tokens are left out of these counts; the clock's routing has them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simdist.gpt_shape import GptShape

__all__ = [
    "FLOAT32_NBYTES",
    "TOKEN_NBYTES",
    "GptLayer",
    "ModelSize",
    "gpt_expert_params",
    "gpt_layers",
    "gpt_model_flops_per_token",
    "gpt_size",
    "is_moe_block",
]

FLOAT32_NBYTES = 4
TOKEN_NBYTES = 4  # int32 token ids


@dataclass(frozen=True)
class ModelSize:
    """What a model is, counted: ``params``; for one example, ``activation_nbytes`` (every
    layer's output and the input, float32) and ``train_flops`` (forward and backward)."""

    params: int
    activation_nbytes: int
    train_flops: float

    @property
    def param_nbytes(self) -> int:
        """The parameters in float32."""
        return self.params * FLOAT32_NBYTES


@dataclass(frozen=True)
class GptLayer:
    """One layer of a gpt's sequence: its name, parameters and output elements per example."""

    name: str
    params: int
    output_elements: int


@dataclass(frozen=True)
class _Counts:
    """A gpt's parameters by part: embeddings (lookup tables), one block's attention and MLP,
    the head (its norm, and its own matrix when untied), and one block's matrix parameters."""

    embeddings: int
    attention: int
    mlp: int
    head: int
    block_matrices: int
    expert: int = 0  # one expert: the MLP without its norm
    expert_matrices: int = 0
    moe: int = 0  # a MoE block's MLP: its norm, router and experts
    router: int = 0


def is_moe_block(index: int, moe_every: int | None) -> bool:
    """Whether block ``index`` (from 0) has experts: every ``moe_every``-th, the last of each
    run (GShard's every other block: 1, 3, 5, ...); None: a dense gpt."""
    return moe_every is not None and (index + 1) % moe_every == 0


def _moe_blocks(layers: int, experts: int | None, moe_every: int | None) -> int:
    return 0 if experts is None else sum(is_moe_block(i, moe_every) for i in range(layers))


def _check(shape: GptShape) -> None:
    layers, hidden, heads = shape.layers, shape.hidden, shape.heads
    seq_len, vocab = shape.seq_len, shape.vocab
    if min(layers, hidden, heads, seq_len, vocab) < 1:
        raise ValueError(
            f"gpt sizes must be >= 1, got layers {layers}, hidden {hidden}, heads {heads}, "
            f"seq_len {seq_len}, vocab {vocab}"
        )


def _counts(shape: GptShape) -> _Counts:
    h, heads, kv_heads, ffn_hidden = shape.hidden, shape.heads, shape.kv_heads, shape.ffn_hidden
    norm, mlp, bias, vocab = shape.norm, shape.mlp, shape.bias, shape.vocab
    kv = h // heads * (heads if kv_heads is None else kv_heads)
    f = 4 * h if ffn_hidden is None else ffn_hidden
    norm_params = 2 * h if norm == "layernorm" else h
    matrices = 3 if mlp == "swiglu" else 2
    attention_matrices = 2 * h * h + 2 * h * kv
    mlp_matrices = matrices * h * f
    attention = attention_matrices + norm_params + (2 * h + 2 * kv if bias else 0)
    mlp_params = mlp_matrices + norm_params + ((matrices - 1) * f + h if bias else 0)
    embeddings = vocab * h + (shape.seq_len * h if shape.positions == "learned" else 0)
    head = norm_params + (0 if shape.tied_embeddings else vocab * h)
    e = shape.experts or 0
    expert = mlp_params - norm_params
    moe = norm_params + h * e + e * expert
    return _Counts(
        embeddings,
        attention,
        mlp_params,
        head,
        attention_matrices + mlp_matrices,
        expert,
        mlp_matrices,
        moe,
        h * e,
    )


def gpt_size(shape: GptShape, tokens: int | None = None) -> ModelSize:
    """The :class:`ModelSize` of gpt ``shape`` (see the module's formulas) fed ``tokens``
    positions (default: all ``seq_len``); ``rope_theta``, ``dropout`` and ``capacity_factor``
    change no count. Exact Python integers: no overflow at any size."""
    _check(shape)
    layers, top_k = shape.layers, shape.top_k
    t = shape.seq_len if tokens is None else tokens
    h, v = shape.hidden, shape.vocab
    c = _counts(shape)
    m = _moe_blocks(layers, shape.experts, shape.moe_every)
    params = c.embeddings + layers * c.attention + (layers - m) * c.mlp + m * c.moe + c.head
    activations = FLOAT32_NBYTES * (t * h * (2 * layers + 1) + t * v) + TOKEN_NBYTES * t
    moe_matrices = m * (c.router + top_k * c.expert_matrices - c.expert_matrices)
    matrices = layers * c.block_matrices + moe_matrices
    forward = 2 * t * matrices + 4 * t * t * layers * h + 2 * t * h * v
    return ModelSize(params, activations, 3.0 * forward)


def gpt_expert_params(shape: GptShape) -> int:
    """The parameters of a gpt's experts, every MoE block's: what expert parallelism divides
    over its ``expert`` axis; 0 for a dense gpt."""
    _check(shape)
    c = _counts(shape)
    blocks = _moe_blocks(shape.layers, shape.experts, shape.moe_every)
    return blocks * int(shape.experts or 0) * c.expert


def gpt_model_flops_per_token(shape: GptShape) -> int:
    """Training FLOPs per token of sequences of ``seq_len``, as the Llama 3 paper's MFU counts
    them (module doc): 6·N + 12·l·h·s, N the parameters that multiply (a MoE block's: its
    router and the ``top_k`` experts a token runs)."""
    _check(shape)
    layers, hidden, experts = shape.layers, shape.hidden, shape.experts
    c = _counts(shape)
    # A tied embedding matrix is the head's: it multiplies, once.
    lookups = c.embeddings - (shape.vocab * hidden if shape.tied_embeddings else 0)
    m = _moe_blocks(layers, experts, shape.moe_every)
    active_moe = c.moe - (int(experts or 0) - shape.top_k) * c.expert
    blocks = layers * c.attention + (layers - m) * c.mlp + m * active_moe
    multiplying = c.embeddings + blocks + c.head - lookups
    return 6 * multiplying + 12 * layers * hidden * shape.seq_len


def gpt_layers(shape: GptShape, tokens: int | None = None) -> list[GptLayer]:
    """The gpt's layers in forward order, named as the built model names them (embeddings,
    ``h.<i>.attention``, ``h.<i>.mlp`` or ``h.<i>.moe``, lm_head), each with its parameters
    and its output elements for one example of ``tokens`` positions (default: all
    ``seq_len``)."""
    _check(shape)
    h, t = shape.hidden, shape.seq_len if tokens is None else tokens
    c = _counts(shape)
    out = [GptLayer("embeddings", c.embeddings, t * h)]
    for i in range(shape.layers):
        out += [GptLayer(f"h.{i}.attention", c.attention, t * h)]
        if shape.experts is not None and is_moe_block(i, shape.moe_every):
            out += [GptLayer(f"h.{i}.moe", c.moe, t * h)]
        else:
            out += [GptLayer(f"h.{i}.mlp", c.mlp, t * h)]
    return [*out, GptLayer("lm_head", c.head, t * shape.vocab)]
