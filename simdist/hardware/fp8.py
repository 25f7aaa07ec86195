"""FP8 training as TransformerEngine runs it: which work runs in FP8, and what the casts cost.

``precision: fp8`` is the recipe NeMo / Megatron-Core (through TransformerEngine) and
TorchTitan's Float8 linears train with on an H100 (TransformerEngine user guide, "Using FP8
with Transformer Engine", and ``transformer_engine.common.recipe.DelayedScaling``, whose
default ``Format.HYBRID`` keeps forward tensors in E4M3 and gradients in E5M2; Micikevicius
et al. 2022, "FP8 Formats for Deep Learning", arXiv:2209.05433, Sec. 4, train the same way):

* the GEMMs of the transformer's linear layers (QKV and attention projection, the MLP's, an
  MoE layer's experts) run in FP8, forward and backward (input and weight gradient);
* everything else runs in BF16: the attention core (QKᵀ, softmax, AV: FlashAttention or
  cuDNN in BF16), norms, embeddings, the output head, elementwise work;
* parameters, gradients and optimizer state are those of BF16 mixed precision (2 / 2 / 12
  bytes a parameter), activations are stored in BF16 and collectives move BF16 bytes
  (:data:`simdist.hardware.profiles.ELEMENT_NBYTES`), but the input a linear layer keeps
  for its weight gradient is its FP8 copy, 1 byte an element (TransformerEngine v1.8,
  commit 3ec998e9: transformer_engine/pytorch/module/linear.py saves ``inputmat``, FP8
  under ``fp8``, and layernorm_linear.py / layernorm_mlp.py the FP8 ``ln_out``; the norms'
  inputs stay BF16);
* every FP8 GEMM input is quantised first by a kernel of its own: it reads the BF16 tensor
  (2 bytes an element) and writes the FP8 one (1 byte), and records the tensor's amax as it
  goes (the delayed-scaling recipe reduces it into its history once a step: a few floats a
  tensor, not counted). The forward casts each linear's input activation and weight, the
  backward its output gradient (the input's FP8 copy and the weight's are reused by the
  weight and input gradients). The casts are memory-bound and run in series with the GEMMs,
  at the device's achieved memory bandwidth.

Pure data and arithmetic: the roofline (:mod:`simdist.hardware.roofline`) prices a layer's
:class:`Fp8Gemms` at the device's ``fp8`` peak and the rest of its work at ``bf16``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CAST_NBYTES_PER_ELEMENT", "Fp8Gemms", "fp8_gemms", "gemm_input_nbytes"]

#: DRAM bytes of quantising one element to FP8: a BF16 read and an FP8 write.
CAST_NBYTES_PER_ELEMENT = 2 + 1
#: FLOPs of a linear layer's backward GEMMs per forward FLOP: input and weight gradient.
BACKWARD_PER_FORWARD = 2


def gemm_input_nbytes(precision: str) -> int:
    """Bytes of an element of a linear GEMM's stored input at ``precision``: 1 at fp8 (its
    FP8 copy), 0 (the precision's activation element) otherwise."""
    return 1 if precision == "fp8" else 0


@dataclass(frozen=True)
class Fp8Gemms:
    """The FP8 part of one layer's forward and backward pass over the whole batch.

    ``forward_flops`` / ``backward_flops``: FLOPs of its linear GEMMs; ``forward_cast_nbytes``
    / ``backward_cast_nbytes``: DRAM bytes of the casts to FP8 that feed them."""

    forward_flops: float
    backward_flops: float
    forward_cast_nbytes: float
    backward_cast_nbytes: float


def fp8_gemms(
    linear_flops: float,
    linear_inputs: float,
    linear_outputs: float,
    linear_weights: float,
    examples: int,
) -> Fp8Gemms | None:
    """A layer's :class:`Fp8Gemms` for ``examples`` examples, from its linear GEMMs per
    example: forward FLOPs, input elements (cast in the forward), output elements (their
    gradients are cast in the backward), and its weights' elements (cast once a forward).
    None for a layer without linear GEMMs."""
    if linear_flops <= 0:
        return None
    return Fp8Gemms(
        forward_flops=linear_flops * examples,
        backward_flops=BACKWARD_PER_FORWARD * linear_flops * examples,
        forward_cast_nbytes=CAST_NBYTES_PER_ELEMENT * (linear_inputs * examples + linear_weights),
        backward_cast_nbytes=CAST_NBYTES_PER_ELEMENT * linear_outputs * examples,
    )
