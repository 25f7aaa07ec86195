"""Horovod's tensor fusion: which gradients are all-reduced together, and when.

Sergeev & Del Balso 2018 ("Horovod: fast and easy distributed deep learning in TensorFlow",
arXiv:1802.05799, §4 "Tensor Fusion"); horovod docs/tensor-fusion.rst; the rule itself in
horovod/common/operations.cc (``RunLoopOnce``) and controller.cc (``FuseResponses``):

* A background thread runs one cycle every ``cycle_time`` (``RunLoopOnce`` sleeps until the
  last cycle's start + HOROVOD_CYCLE_TIME). In a cycle the ranks report the tensors they have
  ready; those ready on every rank are reduced in this cycle, the others wait for the next.
* ``FuseResponses``: in the order they became ready, a buffer takes tensors while its bytes
  plus the next tensor's stay within HOROVOD_FUSION_THRESHOLD; the first that does not fit
  opens the next buffer. A tensor larger than the threshold is a buffer of its own, and a
  threshold of 0 reduces every tensor alone (docs/tensor-fusion.rst: 0 disables fusion).
* The buffers are all-reduced one after another on one stream: a buffer starts at its
  cycle, or when the buffer before it has been reduced (the GPU ops are queued; the thread
  does not wait for them, so the cycles keep their pace).

In simdist one layer's gradient is one tensor (Horovod sees a kernel and a bias, which fuse
anyway unless the threshold falls between them); the cycles of a step start with it, at
step start + k·cycle_time (Horovod's thread runs at its own phase, so this costs the same
at most one cycle per step); the negotiation's own small messages are not priced. Pure: no
SimPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simdist.step_costs import LayerCost
from simdist.strategies.bucketing import Bucket


def tensor_spans(layers: Sequence[LayerCost]) -> list[Bucket]:
    """Backward order cut after each layer with a gradient: one span per gradient tensor.

    A span is the layers backward runs from the previous gradient to this one, so it ends
    when the tensor is ready; layers after the last gradient join the last span.
    """
    spans: list[Bucket] = []
    first = 0
    for i, layer in enumerate(reversed(layers)):
        if layer.grad_nbytes:
            spans.append(Bucket(first, i + 1, layer.grad_nbytes))
            first = i + 1
    if not spans:
        return [Bucket(0, len(layers), 0)]
    last = spans[-1]
    spans[-1] = Bucket(last.first, len(layers), last.nbytes)
    return spans


def cycle_start_s(ready_s: float, origin_s: float, cycle_s: float) -> float:
    """The start of the first cycle at or after ``ready_s``: ``origin_s + k·cycle_s``, k ≥ 0.

    A tensor ready exactly when a cycle starts is taken by it; ``cycle_s`` 0 takes every
    tensor as soon as it is ready.
    """
    if cycle_s == 0 or ready_s <= origin_s:
        return max(ready_s, origin_s)
    k = math.ceil((ready_s - origin_s) / cycle_s)
    while origin_s + k * cycle_s < ready_s:  # the division's rounding, either way
        k += 1
    while k > 0 and origin_s + (k - 1) * cycle_s >= ready_s:
        k -= 1
    return origin_s + k * cycle_s


@dataclass(frozen=True)
class TensorFusion:
    """Horovod's rule for one model: its gradient tensors, the threshold and the cycle."""

    tensors: tuple[Bucket, ...]
    threshold_nbytes: int
    cycle_s: float

    @classmethod
    def of(cls, layers: Sequence[LayerCost], threshold_nbytes: int, cycle_s: float) -> TensorFusion:
        """The rule for a model's layers (its tensors: :func:`tensor_spans`)."""
        return cls(tuple(tensor_spans(layers)), threshold_nbytes, cycle_s)

    def buffers(self, ready_s: Sequence[float], origin_s: float) -> list[tuple[Bucket, float]]:
        """The fused buffers of one step, in order, each with the start of its cycle.

        ``ready_s``: when each of :attr:`tensors` is ready on every replica (non-decreasing,
        as backward produces them); ``origin_s``: the step's start, the first cycle's.
        """
        fused: list[tuple[Bucket, float]] = []
        for tensor, ready in zip(self.tensors, ready_s, strict=True):
            cycle = cycle_start_s(ready, origin_s, self.cycle_s)
            if fused:
                last, last_cycle = fused[-1]
                if cycle == last_cycle and last.nbytes + tensor.nbytes <= self.threshold_nbytes:
                    nbytes = last.nbytes + tensor.nbytes
                    fused[-1] = (Bucket(last.first, tensor.stop, nbytes), cycle)
                    continue
            fused.append((tensor, cycle))
        return fused
