"""A model's size from its configuration alone: parameters, activations and FLOPs, no JAX.

Building a model to read its size (Flax's ``init`` on shapes, XLA's cost analysis) takes
time and memory that grow with the model: a gpt of 10^6 layers never finished building, one
of 10^12 layers exhausted the memory, and a sequence of 10^9 positions overflowed XLA's
shape arithmetic. The configurable ``gpt`` has a closed form, so its size is known in
microseconds from its five numbers, and a model past the caps of
:mod:`simdist.scenario.fields` is refused when the scenario loads, before anything is built.

gpt (the layout of :mod:`simdist.numerics.fullsize.transformer`: learned positions,
pre-LayerNorm blocks of attention and a 4h MLP, the LM head tied to the token embedding), for
l layers of width h, a heads, s positions, a vocabulary of V and t input tokens:

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
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLOAT32_NBYTES", "TOKEN_NBYTES", "GptLayer", "ModelSize", "gpt_layers", "gpt_size"]

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


def _check(layers: int, hidden: int, heads: int, seq_len: int, vocab: int) -> None:
    if min(layers, hidden, heads, seq_len, vocab) < 1:
        raise ValueError(
            f"gpt sizes must be >= 1, got layers {layers}, hidden {hidden}, heads {heads}, "
            f"seq_len {seq_len}, vocab {vocab}"
        )


def gpt_size(
    layers: int, hidden: int, heads: int, seq_len: int, vocab: int, tokens: int | None = None
) -> ModelSize:
    """The :class:`ModelSize` of a gpt (see the module's formulas) fed ``tokens`` positions
    (default: all ``seq_len``). Exact Python integers: no overflow at any size."""
    _check(layers, hidden, heads, seq_len, vocab)
    t = seq_len if tokens is None else tokens
    h, v, s = hidden, vocab, seq_len
    params = (v + s) * h + layers * (12 * h * h + 13 * h) + 2 * h
    activations = FLOAT32_NBYTES * (t * h * (2 * layers + 1) + t * v) + TOKEN_NBYTES * t
    forward = 24 * t * layers * h * h + 4 * t * t * layers * h + 2 * t * h * v
    return ModelSize(params, activations, 3.0 * forward)


def gpt_layers(
    layers: int, hidden: int, heads: int, seq_len: int, vocab: int, tokens: int | None = None
) -> list[GptLayer]:
    """The gpt's layers in forward order, named as the built model names them (embeddings,
    ``h.<i>.attention``, ``h.<i>.mlp``, lm_head), each with its parameters and its output
    elements for one example of ``tokens`` positions (default: all ``seq_len``)."""
    _check(layers, hidden, heads, seq_len, vocab)
    h, t = hidden, seq_len if tokens is None else tokens
    out = [GptLayer("embeddings", (vocab + seq_len) * h, t * h)]
    attention, mlp = 4 * h * h + 6 * h, 8 * h * h + 7 * h
    for i in range(layers):
        out += [GptLayer(f"h.{i}.attention", attention, t * h)]
        out += [GptLayer(f"h.{i}.mlp", mlp, t * h)]
    return [*out, GptLayer("lm_head", 2 * h, t * vocab)]
