"""Activation memory: the tensors each layer stores for its backward pass, and what a step
keeps of them under tensor and sequence parallelism, flash attention and recomputation.

Pure arithmetic (no SimPy, no JAX). A layer is described by the tensors it stores
(:class:`Stored`, per example), not by a per-model constant: the memory model adds them up
at the training precision. For a transformer block this reproduces Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198, Sec. 4
and Table 2) term by term, for s positions, b examples, h hidden, a heads, t the tensor
group, 16-bit activations and 1-byte dropout masks:

* attention, 11·sbh + 5·as²b: the QKV matmul's input (2sbh), Q and K (4sbh), the softmax
  output (2as²b), its dropout mask (as²b), the dropout's output and V (2as²b + 2sbh), the
  output projection's input (2sbh), the dropout mask after it (sbh);
* MLP, 19·sbh: the first linear's input (2sbh), the GeLU's input and output (8sbh each),
  the dropout mask (sbh);
* two LayerNorms, 4·sbh: their inputs.

In all sbh·(34 + 5as/h) per layer. Megatron's tensor parallelism splits the tensors inside
the attention core and the MLP (Q, K, V, the scores, the projection's input, GeLU's input
and output: 24·sbh + 5as²b) over t and keeps the rest whole: sbh·(10 + 24/t + 5as/(ht));
sequence parallelism splits those 10·sbh too: sbh·(34/t + 5as/(ht)). Flash attention
(Dao et al. 2022) stores no s×s tensor: the 5as²b term goes. Selective recomputation
(Korthikanti Sec. 5) recomputes the attention core: 34·sbh/t kept. Full recomputation keeps
each checkpoint's input (2sbh, /t with sequence parallelism) and recomputes the rest of its
layers in the backward pass, where one checkpoint's activations exist again at a time.

Llama's layout (Dubey et al. 2024, arXiv:2407.21783, Sec. 3.2; the options of
:func:`gpt_layer_tensors`) changes the terms one tensor at a time, by the same rule: with k
key/value heads of d = h/a (grouped-query attention) K and V are s·b·k·d each, not sbh;
RMSNorm stores its input as LayerNorm does (sbh); a SwiGLU MLP of width f stores its first
linear's input (sbh, once: the gate and up matrices read the same input), the gate's output
(the SiLU's input), the SiLU's output and the up matrix's output (the product's two inputs)
and the product (the down matrix's input): 4·sbf, split over t (a fused SwiGLU that
recomputes the SiLU, as Megatron-Core's, keeps 3·sbf); rotary positions rotate Q and K in
place, and the rotation's backward needs no stored tensor (its sines and cosines are
constants): Q and K are counted once. Without dropout (Llama has none) the masks go, and the
softmax output is what multiplies V: as²b, not 5as²b.

A model without a tensor-level description (a profile file, a zoo model costed by XLA) is
described by each layer's stored input (the previous layer's output, or the example) and the
last layer's output: what a layer-by-layer backward keeps at least.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from simdist.gpt_shape import GptShape
from simdist.model_size import is_moe_block
from simdist.sharding import Sharding

__all__ = [
    "INPUTS",
    "MASKS",
    "SCORES",
    "ActivationTable",
    "Activations",
    "LayerTensors",
    "LinearGemms",
    "Stored",
    "activations",
    "gpt_layer_tensors",
    "layer_tensors_of_outputs",
    "stored_nbytes",
]

#: Kinds of stored tensors, as summary.json breaks activations down.
INPUTS, SCORES, MASKS = "stored_inputs", "attention_scores", "masks"
#: Bytes of a dropout mask's element (Korthikanti Sec. 4.1: masks are one byte).
MASK_NBYTES = 1


@dataclass(frozen=True)
class Stored:
    """One tensor a layer keeps for its backward pass, for one example.

    ``kind``: :data:`INPUTS`, :data:`SCORES` (the attention core's s×s tensors, which flash
    attention does not store and selective recomputation recomputes) or :data:`MASKS`.
    ``split``: Megatron's tensor parallelism splits it over the tensor group.
    ``element_nbytes``: fixed bytes per element (a mask's 1, int32 token ids, float32
    logits); 0: the training precision's activation element. ``gemm_input``: the input of
    a linear layer's GEMM, kept in FP8 under an FP8 recipe (``gemm_input_nbytes`` of
    :func:`stored_nbytes`).
    """

    name: str
    elements: float
    kind: str = INPUTS
    split: bool = False
    element_nbytes: int = 0
    gemm_input: bool = False


@dataclass(frozen=True)
class LayerTensors:
    """What one layer stores, per example: its tensors, and what recomputation needs.

    ``block``: the index of the recomputation unit it belongs to (a transformer block: its
    attention and MLP layers; each layer of a model without blocks), None for a layer that
    is never recomputed. ``input``: the layer's input, what a checkpoint keeps.
    ``core_flops``: forward FLOPs of the attention core, what selective recomputation
    computes again (4·s²·h per example: Q·Kᵀ and scores·V). ``linear``: its linear layers'
    GEMMs, what an FP8 recipe runs in FP8 (:mod:`simdist.hardware.fp8`).
    """

    name: str
    stored: tuple[Stored, ...]
    input: Stored
    block: int | None = None
    core_flops: float = 0.0
    linear: LinearGemms | None = None


@dataclass(frozen=True)
class LinearGemms:
    """A layer's linear GEMMs from its shapes: forward FLOPs and the elements of their
    inputs and outputs per example, and their weights' elements."""

    flops: float
    inputs: float
    outputs: float
    weights: float

    def scaled(self, rows: float, weights: float = 1.0) -> LinearGemms:
        """The same GEMMs over ``rows`` × the rows of each example (an MoE layer's
        slots), with ``weights`` × the weights (its experts)."""
        return LinearGemms(
            self.flops * rows, self.inputs * rows, self.outputs * rows, self.weights * weights
        )


@dataclass(frozen=True)
class Activations:
    """Bytes of activations one device holds at its peak, by kind, and what recomputation
    freed (stored tensors it drops and computes again)."""

    stored_inputs: int = 0
    attention_scores: int = 0
    masks: int = 0
    recompute_working_set: int = 0
    freed_by_recompute: int = 0

    @property
    def total(self) -> int:
        """What the device holds at the peak."""
        return self.stored_inputs + self.attention_scores + self.masks + self.recompute_working_set

    def as_dict(self) -> dict[str, int]:
        """summary.json's ``activations_by_kind``."""
        return {
            INPUTS: self.stored_inputs,
            SCORES: self.attention_scores,
            MASKS: self.masks,
            "recompute_working_set": self.recompute_working_set,
            "freed_by_recompute": self.freed_by_recompute,
        }


def gpt_layer_tensors(shape: GptShape, tokens: int | None = None) -> list[LayerTensors]:
    """Gpt ``shape``'s layers (as :func:`simdist.model_size.gpt_layers` names them) with the
    tensors each stores for one example of ``tokens`` positions (module doc; Korthikanti
    et al. 2022 Sec. 4.1). The embeddings keep the token ids (int32) and the embedding
    dropout's mask; the LM head its norm's and projection's inputs and the float32
    logits the cross-entropy reads (split by the vocabulary over the tensor group, as
    Megatron's vocabulary-parallel output layer).

    The layout options are :data:`~simdist.catalog.GPT_LAYOUT_DEFAULTS`'s: ``kv_heads``
    (K and V), ``ffn_hidden`` and ``mlp`` (the MLP's tensors), ``norm`` (the norms' names),
    ``dropout`` (the masks; without them the softmax output alone is stored); positions,
    tied embeddings and biases change no stored tensor. A mixture-of-experts block
    (``experts``, every ``moe_every``-th) stores its MLP's tensors for its experts' slots,
    top_k × capacity_factor per token (the dispatched buffer instead of the fc1 input)."""
    layers, hidden, heads, vocab = shape.layers, shape.hidden, shape.heads, shape.vocab
    kv_heads, ffn_hidden, norm, mlp = shape.kv_heads, shape.ffn_hidden, shape.norm, shape.mlp
    dropout, experts, moe_every = shape.dropout, shape.experts, shape.moe_every
    top_k, capacity_factor = shape.top_k, shape.capacity_factor
    s, h, a = shape.seq_len if tokens is None else tokens, hidden, heads
    sh = s * h
    skv = sh // a * (a if kv_heads is None else kv_heads)
    sf = s * (4 * h if ffn_hidden is None else ffn_hidden)
    norm_input = f"{norm} input"
    token_ids = Stored("token ids", s, element_nbytes=4)
    embedding: tuple[Stored, ...] = (token_ids,)
    if dropout:
        mask = Stored("embedding dropout mask", sh, MASKS, element_nbytes=MASK_NBYTES)
        embedding = (token_ids, mask)
    out = [LayerTensors("embeddings", embedding, token_ids)]
    block_input = Stored("block input", sh)
    q_and_k = (
        (Stored("q and k", 2 * sh, split=True),)
        if skv == sh
        else (Stored("q", sh, split=True), Stored("k", skv, split=True))
    )
    scores = [Stored("softmax output", a * s * s, SCORES, split=True)]
    if dropout:
        scores += [
            Stored(
                "softmax dropout mask", a * s * s, SCORES, split=True, element_nbytes=MASK_NBYTES
            ),
            Stored("softmax dropout output", a * s * s, SCORES, split=True),
        ]
    attention: tuple[Stored, ...] = (
        Stored(norm_input, sh),
        Stored("qkv input", sh, gemm_input=True),
        *q_and_k,
        *scores,
        Stored("v", skv, split=True),
        Stored("projection input", sh, split=True, gemm_input=True),
    )

    def mlp_stored(slots: float) -> tuple[Stored, ...]:
        """The MLP's tensors for ``slots`` rows per token (1: dense; an MoE block's
        top_k × capacity_factor)."""
        f = int(sf * slots)
        if mlp == "swiglu":
            inner: tuple[Stored, ...] = (
                Stored("gate output", f, split=True),
                Stored("silu output", f, split=True),
                Stored("up output", f, split=True),
                Stored("down input", f, split=True, gemm_input=True),
            )
        else:
            inner = (
                Stored("gelu input", f, split=True),
                Stored("fc2 input", f, split=True, gemm_input=True),
            )
        fc1_input = Stored("fc1 input", int(sh * slots), gemm_input=True)
        tensors = (Stored(norm_input, sh), fc1_input, *inner)
        if dropout:
            tensors += (Stored("mlp dropout mask", sh, MASKS, element_nbytes=MASK_NBYTES),)
        return tensors

    mlp_tensors = mlp_stored(1.0)
    moe_tensors = mlp_stored(top_k * capacity_factor) if experts is not None else ()
    if dropout:
        attention += (Stored("attention dropout mask", sh, MASKS, element_nbytes=MASK_NBYTES),)
    core = 4.0 * s * s * h
    # The linear GEMMs: QKV (h → h + 2·kv width) and the projection (h → h); the MLP's fc1
    # (h → f, gate and up for SwiGLU: Megatron's fused linear_fc1) and fc2 (f → h); an MoE
    # block's experts over its slots (its router stays out: a BF16 GEMM in Megatron-Core).
    qkv = sh + 2 * skv
    attention_linear = LinearGemms(2.0 * h * (qkv + sh), 2.0 * sh, qkv + sh, h * (qkv // s + h))
    f = sf // s
    fc1 = 2 * f if mlp == "swiglu" else f
    mlp_linear = LinearGemms(2.0 * sh * (fc1 + f), sh + sf, s * fc1 + sh, h * (fc1 + f))
    slots = top_k * capacity_factor
    moe_linear = mlp_linear.scaled(slots, experts or 1)
    for i in range(layers):
        out.append(
            LayerTensors(f"h.{i}.attention", attention, block_input, i, core, attention_linear)
        )
        if experts is not None and is_moe_block(i, moe_every):
            out.append(
                LayerTensors(f"h.{i}.moe", moe_tensors, Stored("mlp input", sh), i, 0.0, moe_linear)
            )
        else:
            out.append(
                LayerTensors(f"h.{i}.mlp", mlp_tensors, Stored("mlp input", sh), i, 0.0, mlp_linear)
            )
    head = (
        Stored(f"final {norm} input", sh),
        Stored("output projection input", sh),
        Stored("logits", s * vocab, split=True, element_nbytes=4),
    )
    return [*out, LayerTensors("lm_head", head, Stored("head input", sh))]


def layer_tensors_of_outputs(
    output_elements: Sequence[float], input_elements: float, input_nbytes: int = 0
) -> list[LayerTensors]:
    """Layers known only by their outputs: each stores its input (the previous output, the
    first the example), the last its output too; each is its own recomputation unit.

    ``input_nbytes``: the example's element size (0: the training precision's)."""
    out: list[LayerTensors] = []
    n = len(output_elements)
    for i, elements in enumerate(output_elements):
        if i == 0:
            x = Stored("input", input_elements, element_nbytes=input_nbytes)
        else:
            x = Stored("input", output_elements[i - 1])
        stored = (x, Stored("output", elements)) if i == n - 1 else (x,)
        out.append(LayerTensors(f"layer {i}", stored, x, i))
    return out


def stored_nbytes(
    tensor: Stored, act_nbytes: int, sharding: Sharding, gemm_input_nbytes: int = 0
) -> float:
    """Bytes of ``tensor`` for one example on one device of the tensor group (and of the
    context group, which holds 1/CP of the sequence: of every tensor, the s×s scores
    included, each device's queries meeting every key). ``gemm_input_nbytes``: the element
    of a GEMM's input when the precision keeps it apart (fp8: 1; 0: ``act_nbytes``)."""
    own = gemm_input_nbytes if tensor.gemm_input else 0
    per = tensor.element_nbytes or own or act_nbytes
    split = max(sharding.activations, sharding.tensor if tensor.split else 1)
    if sharding.context > 1:
        split *= sharding.context
    return tensor.elements * per / split


class ActivationTable:
    """Each layer's kept bytes per example by kind, what recomputation frees of it and the
    working set it needs again, under one precision, sharding and ``recompute``; any run of
    layers (a pipeline stage) is then summed from running totals (:meth:`span`).

    ``recompute``: ``none``; ``selective`` (the attention core's tensors are recomputed:
    each is freed, one layer's exist again while it is recomputed); ``full`` (each group of
    ``recompute_layers`` consecutive blocks keeps its first layer's input and frees the
    rest; one group's activations but that input exist again while it is recomputed for
    its backward).
    """

    def __init__(
        self,
        layers: Sequence[LayerTensors],
        *,
        act_nbytes: int,
        sharding: Sharding,
        flash: bool = False,
        recompute: str = "none",
        recompute_layers: int = 1,
        gemm_input_nbytes: int = 0,
    ) -> None:
        kept: dict[str, list[float]] = {INPUTS: [], SCORES: [], MASKS: []}
        freed, work, group_of = [], [], []
        group_total: dict[int, float] = {}
        group_kept: dict[int, float] = {}
        seen: dict[int, dict[str, float]] = {}  # a transformer's blocks share their tuples
        for layer in layers:
            known = seen.get(id(layer.stored))
            if known is None:
                known = {INPUTS: 0.0, SCORES: 0.0, MASKS: 0.0}
                for tensor in layer.stored:
                    if tensor.kind == SCORES and flash:
                        continue
                    known[tensor.kind] += stored_nbytes(
                        tensor, act_nbytes, sharding, gemm_input_nbytes
                    )
                seen[id(layer.stored)] = known
            own = dict(known)
            total = sum(own.values())
            group = None
            if recompute == "full" and layer.block is not None:
                group = layer.block // max(1, recompute_layers)
                first = group not in group_total
                group_total[group] = group_total.get(group, 0.0) + total
                keep = stored_nbytes(layer.input, act_nbytes, sharding) if first else 0.0
                group_kept[group] = group_kept.get(group, 0.0) + keep
                own = {INPUTS: keep, SCORES: 0.0, MASKS: 0.0}
                freed.append(total - keep)
                work.append(0.0)
            elif recompute == "selective" and own[SCORES]:
                freed.append(own[SCORES])
                work.append(own[SCORES])
                own[SCORES] = 0.0
            else:
                freed.append(0.0)
                work.append(0.0)
            group_of.append(group)
            for kind, value in own.items():
                kept[kind].append(value)
        for i, group in enumerate(group_of):
            if group is not None:  # its input is kept already: the rest comes back
                work[i] = max(0.0, group_total[group] - group_kept[group])
        self._running = {
            kind: list(accumulate(values, initial=0.0)) for kind, values in kept.items()
        }
        self._freed = list(accumulate(freed, initial=0.0))
        self._work = work
        self.layers = len(work)

    def span(
        self, first: int = 0, stop: int | None = None, *, examples: float, in_flight: int = 1
    ) -> Activations:
        """Peak bytes of layers ``[first, stop)`` on ``examples`` examples (a micro-batch),
        ``in_flight`` of them stashed at once; the working set once."""
        stop = self.layers if stop is None else stop
        scale = examples * in_flight

        def ran(values: list[float]) -> float:
            return values[stop] - values[first]

        working = max(self._work[first:stop], default=0.0)
        return Activations(
            stored_inputs=math.ceil(ran(self._running[INPUTS]) * scale),
            attention_scores=math.ceil(ran(self._running[SCORES]) * scale),
            masks=math.ceil(ran(self._running[MASKS]) * scale),
            recompute_working_set=math.ceil(working * examples),
            freed_by_recompute=math.ceil(ran(self._freed) * scale),
        )


def activations(
    layers: Sequence[LayerTensors],
    *,
    examples: float,
    act_nbytes: int,
    sharding: Sharding,
    flash: bool = False,
    recompute: str = "none",
    recompute_layers: int = 1,
    in_flight: int = 1,
) -> Activations:
    """Peak activation bytes one device holds for ``layers`` on ``examples`` examples,
    ``in_flight`` of them stashed at once, at ``act_nbytes`` per activation element
    (:class:`ActivationTable`; the module doc for the rules)."""
    table = ActivationTable(
        layers,
        act_nbytes=act_nbytes,
        sharding=sharding,
        flash=flash,
        recompute=recompute,
        recompute_layers=recompute_layers,
    )
    return table.span(examples=examples, in_flight=in_flight)
