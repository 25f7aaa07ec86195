"""The configurable gpt's shape: its five sizes and its layout and mixture-of-experts options.

:meth:`simdist.scenario.workload.ModelSpec.gpt_shape` builds one from a scenario's model,
the catalog's defaults filled in; what counts a gpt — its parameters, FLOPs and layers
(:mod:`simdist.model_size`), its stored tensors (:mod:`simdist.activation_memory`), its
full-size Flax layers (:mod:`simdist.numerics.fullsize.transformer`) — takes it whole instead
of the same nineteen keywords each. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GptShape:
    """A gpt of ``layers`` blocks of width ``hidden`` with ``heads`` heads, over ``seq_len``
    positions and ``vocab`` tokens.

    The layout options are :data:`~simdist.catalog.GPT_LAYOUT_DEFAULTS`'s (GPT-2's when left
    out; ``kv_heads`` None: as many as ``heads``, ``ffn_hidden`` None: 4 × ``hidden``), the
    mixture-of-experts options ``GPT_MOE_DEFAULTS``'s (``experts`` None: a dense gpt).
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    norm: str = "layernorm"
    mlp: str = "gelu"
    positions: str = "learned"
    rope_theta: float | None = None
    tied_embeddings: bool = True
    bias: bool = True
    dropout: bool = True
    experts: int | None = None
    top_k: int = 2
    capacity_factor: float = 1.25
    moe_every: int = 1
