"""Context parallelism's ring: what an attention layer's key/value blocks move, step by step.

Pure (no SimPy, no JAX): the tensor-parallel plan builder
(:func:`simdist.strategies.tensor_parallel.plan.phase_plans`) lays a layer's ring steps out
as typed steps, the hybrid strategy walks them on the clock, the tests by hand.

With a ``context`` axis of CP devices each device holds s/CP positions of every sequence
(Megatron-LM's load-balanced causal split: 2·CP chunks, device i chunks i and 2·CP − 1 − i,
``get_batch_on_this_cp_rank``, megatron/training/utils.py in 2024's releases), so every
layer's work and activations on a device are 1/CP of the sequence's. Attention alone needs the other
devices' keys and values: ring attention (Liu et al. 2023, arXiv:2310.01889; Megatron-Core
runs TransformerEngine's ``AttnFuncWithCPAndKVP2P``,
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py) computes
the attention core in CP steps, one key/value block at a time, while the block it holds
goes to the next device of the ring:

* forward: CP steps; in each of the first CP − 1 the device sends its current K and V block
  to the next device and receives the previous device's, overlapped with the step's
  attention on the block it holds; the last step sends nothing;
* backward (TransformerEngine's backward loop over ``range(cp_size)``): CP steps, each
  overlapped with its block's attention backward; the first sends the K/V block only, the
  last the accumulated dK/dV only (back to the block's owner), the ones between both
  (``p2p_comm_buffers`` holds ``[kv, dkv]``): 2·(CP − 1) blocks in all.

A step waits for the slower of its compute and its transfer. The K/V block of one device,
for one micro-batch of b sequences: 2 · (s/CP) · b · (kv_heads/T) · head_dim bytes per
element — K and V, the device's positions, its tensor rank's key/value heads (heads with
grouped-query attention's fewer kv_heads, Ainslie et al. 2023).

Which part of an attention layer's time the ring divides: the attention core (Q·Kᵀ and
scores·V, 4·s²·h FLOPs per sequence, as :func:`simdist.activation_memory.gpt_layer_tensors`
counts it); the projections (Q and the output: 2·s·h² each; K and V: 2·s·h·kv_heads·head_dim
each) run before the ring in forward and after it in backward. Its share of the layer's time
is taken as its share of the layer's FLOPs (:func:`core_share`).
"""

from __future__ import annotations

import math
from typing import NamedTuple


def core_share(seq_len: int, hidden: int, heads: int, kv_heads: int) -> float:
    """The attention core's share of an attention layer's FLOPs (module docstring)."""
    head_dim = hidden // heads
    core = 4.0 * seq_len * seq_len * hidden
    projections = 2.0 * seq_len * hidden * (2 * hidden + 2 * kv_heads * head_dim)
    return core / (core + projections)


def kv_block_nbytes(
    seq_len: int,
    context: int,
    micro_batch: float,
    kv_heads: int,
    head_dim: int,
    tensor: int,
    element_nbytes: int,
) -> int:
    """Bytes of one device's K and V block for one micro-batch (module docstring)."""
    return math.ceil(
        2 * (seq_len / context) * micro_batch * (kv_heads / tensor) * head_dim * element_nbytes
    )


class ContextRing(NamedTuple):
    """The ring of a ``context`` axis of ``context`` devices: ``kv_nbytes`` a device's K/V
    block, ``share`` the part of an attention layer's time its steps divide."""

    context: int
    kv_nbytes: int
    share: float

    def sends(self, phase: str) -> list[int]:
        """Bytes a device sends in each ring step of ``phase`` (``forward`` or
        ``backward``), 0 where it sends nothing (module docstring)."""
        kv, n = self.kv_nbytes, self.context
        if phase == "forward":
            return [kv] * (n - 1) + [0]
        return [kv] + [2 * kv] * (n - 2) + [kv]

    def split(self, seconds: float, launch_s: float) -> tuple[float, float]:
        """An attention layer's ``seconds`` on a device as (outside the ring, one ring step):
        the launch and the projections' share, and the core's share / CP."""
        core = (seconds - launch_s) * self.share
        return seconds - core, core / self.context
