"""The layer-by-layer step's sums: forward in layer order, backward in reverse, and when
each group of gradients is ready to be handed to communication.

Three paths time a step layer by layer, each as a plan of typed steps run by the one walker
(:mod:`.steps`):

* the synchronous all-reduce strategies (:meth:`~.sync.SynchronousStrategy.overlapped_step`):
  backward's gradients fill buckets, all-reduced one after another while backward goes on
  (PyTorch DDP, Li et al. 2020, §3.2.3; or Horovod's fusion buffers, each at its cycle:
  :mod:`.tensor_fusion`);
* a parameter_server worker (``ParameterServerStrategy.overlapped``): each layer's forward
  waits for its variables, and each layer's gradient shards are pushed once its backward
  has ended (TensorFlow's per-variable sends);
* the pipeline (:mod:`.pipeline`): a stage is a span of consecutive layers, its micro-batch
  times the span's layer times.

They share this module: :func:`span_seconds` (a span of consecutive layers lasts the sum of
their times) and :func:`backward_ready` (when, into the backward pass, each layer's gradient
is ready). A float sum depends on its order, so each sum is taken term by term in layer
order, as every path did: a bucket's time is the sum of its own layers (then scaled), a
shard's ready time the running sum over the whole backward pass (then scaled).

Pure: no SimPy, no JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from simdist.step_costs import LayerCost


def span_seconds(
    layers: Sequence[LayerCost],
    spans: Iterable[tuple[int, int]],
    seconds: Callable[[LayerCost], float],
) -> list[float]:
    """Each span ``[first, stop)`` of ``layers``: the sum of its layers' ``seconds``, in order.

    ``layers`` may be in backward order (a bucket's layers) or forward order (a stage's).
    """
    return [float(sum(seconds(layer) for layer in layers[first:stop])) for first, stop in spans]


def forward_s(layer: LayerCost) -> float:
    """A layer's forward time on the per-replica batch."""
    return layer.forward_s


def backward_s(layer: LayerCost) -> float:
    """A layer's backward time on the per-replica batch."""
    return layer.backward_s


def backward_ready(
    layers: Sequence[LayerCost], moves: Sequence[bool]
) -> tuple[list[tuple[int, float]], float]:
    """Backward in reverse layer order: for each layer whose gradient moves (``moves[i]``),
    ``(i, seconds into backward when its gradient is ready)``, in backward order; and the
    whole backward pass's seconds. Ready times are the running sum of backward times."""
    ready: list[tuple[int, float]] = []
    elapsed = 0.0
    for i in reversed(range(len(layers))):
        elapsed += layers[i].backward_s
        if moves[i]:
            ready.append((i, elapsed))
    return ready, elapsed
