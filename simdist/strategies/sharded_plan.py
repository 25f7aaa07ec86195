"""What sharded data parallelism moves in one step, and when: ZeRO 1/2/3 and FSDP as a plan.

A step is a :class:`~simdist.strategies.steps.Plan`: a *program* of typed steps in the order
one device issues its work (compute a layer, issue a collective, wait for one), which the
walker (:func:`simdist.strategies.steps.walk`) runs on the clock; collectives of the data
group run one at a time in the order they were issued, so the issue order decides what
overlaps with what. The network prices each collective.

What each stage moves (Rajbhandari et al. 2020, "ZeRO", Sec. 5 and 7):

* stage 1 (optimizer state sharded): backward's gradients are all-reduced in buckets; each
  device updates its 1/N of the parameters; the updated parameters are all-gathered in
  buckets after the step (DeepSpeed's ``allgather_bucket_size``);
* stage 2 (+ gradients): the buckets are reduce-scattered instead, the rest as stage 1;
* stage 3 (+ parameters): each layer's parameters are all-gathered before its forward and,
  when resharded after forward, again before its backward; each bucket of gradients
  is reduce-scattered; nothing is gathered after the step.

Buckets: gradients in the order backward produces them, a bucket closed when the next
gradient would take it past ``reduce_bucket_nbytes`` (DeepSpeed's ``reduce_bucket_size``;
FSDP reduces each unit, a layer here, on its own: a cap of one byte). With ``overlap_comm``
a bucket's reduction runs while backward goes on; without it backward waits for it
(DeepSpeed reduces on the compute stream then).

Prefetching the next layer's all-gather (stage 3):

* forward: with ``forward_prefetch`` the all-gather of the next layer with parameters is
  issued when the current one's forward begins, so it overlaps with that forward (FSDP's
  implicit forward prefetching, always on — PyTorch docs, "FSDP Notes: FSDP Prefetch
  Nuances" — and DeepSpeed's prefetching with ``stage3_prefetch_bucket_size`` > 0);
  without it, when the compute reaches the layer;
* backward (``torch.distributed.fsdp.BackwardPrefetch``): ``backward_pre`` issues the next
  layer's all-gather before the current layer's gradient computation, ``backward_post``
  after it but before its reduce-scatter, ``none`` when the compute reaches the next
  layer, behind the current reduce-scatter.

Pure: no SimPy, no JAX.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from simdist.step_costs import LayerCost
from simdist.strategies.steps import Collective, Compute, Issue, Plan, Step, Wait

BACKWARD_PREFETCH: tuple[str, ...] = ("backward_pre", "backward_post", "none")


@dataclass(frozen=True)
class ShardingPlanOptions:
    """How one step of sharded data parallelism moves its bytes (see the module docstring)."""

    stage: int
    overlap_comm: bool = True
    reduce_bucket_nbytes: int = 1
    allgather_bucket_nbytes: int = 1
    forward_prefetch: bool = True
    backward_prefetch: str = "backward_pre"
    reshard_after_forward: bool = True

    def __post_init__(self) -> None:
        if self.stage not in (1, 2, 3):
            raise ValueError(f"stage must be 1, 2 or 3; got {self.stage!r}")
        if self.backward_prefetch not in BACKWARD_PREFETCH:
            raise ValueError(f"backward_prefetch must be one of {BACKWARD_PREFETCH}")


def byte_buckets(nbytes: int, cap_nbytes: int) -> list[int]:
    """``nbytes`` cut into buckets of ``cap_nbytes`` (the last one holds the rest)."""
    if nbytes <= cap_nbytes:
        return [nbytes]
    full, rest = divmod(nbytes, cap_nbytes)
    return [cap_nbytes] * full + ([rest] if rest else [])


def reduce_buckets(layers: Sequence[LayerCost], cap_nbytes: int) -> list[tuple[int, int]]:
    """The gradient buckets in backward order: ``(layer whose backward closes it, bytes)``.

    Gradients join the bucket in progress in the order backward produces them; a bucket is
    closed when the next gradient would take it past ``cap_nbytes`` (so a cap of one byte
    gives every layer with parameters its own bucket, as FSDP's units); it is reduced as
    soon as the backward of its last layer ends.
    """
    buckets: list[tuple[int, int]] = []
    last, nbytes = -1, 0
    for i in reversed(range(len(layers))):
        size = layers[i].grad_nbytes
        if not size:
            continue
        if nbytes and nbytes + size > cap_nbytes:
            buckets.append((last, nbytes))
            nbytes = 0
        last, nbytes = i, nbytes + size
    if nbytes:
        buckets.append((last, nbytes))
    return buckets


class _Builder:
    """Appends collectives and program steps."""

    def __init__(self) -> None:
        self.collectives: list[Collective] = []
        self.program: list[Step] = []

    def collective(self, op: str, nbytes: int, detail: str) -> int:
        self.collectives.append(Collective(op, nbytes, detail))
        return len(self.collectives) - 1

    def issue(self, op: str, nbytes: int, detail: str) -> int:
        index = self.collective(op, nbytes, detail)
        self.program.append(Issue(index))
        return index


def _gather_layers(
    b: _Builder,
    layers: Sequence[LayerCost],
    order: Sequence[int],
    phase: str,
    prefetch: str,
    reduce: dict[int, int] | None = None,
    overlap_comm: bool = True,
) -> list[int]:
    """Compute ``layers`` in ``order``, each layer with parameters all-gathered first.

    ``prefetch``: ``pre`` (the next layer's all-gather issued when this one's compute
    begins), ``post`` (when it ends, before its reduction) or ``none`` (when the compute
    reaches the next layer). ``reduce`` maps a layer to the bucket bytes its end closes
    (backward). Returns the reductions' collective indices.
    """
    gathered = [i for i in order if layers[i].param_nbytes > 0]
    following = dict(pairwise(gathered))
    rank = {i: k + 1 for k, i in enumerate(gathered)}
    issued: dict[int, int] = {}
    reductions: list[int] = []
    reduce = reduce or {}

    def gather(i: int) -> None:
        detail = f"all-gather {phase} {rank[i]}/{len(gathered)}"
        issued[i] = b.issue("all_gather", layers[i].param_nbytes, detail)

    for i in order:
        if i in rank:
            if i not in issued:
                gather(i)
            b.program.append(Wait(issued[i]))
            if prefetch == "pre" and i in following:
                gather(following[i])
        b.program.append(Compute(i, phase))
        if prefetch == "post" and i in following:
            gather(following[i])
        if i in reduce:
            reductions.append(_reduction(b, "reduce_scatter", reduce[i], len(reductions)))
            if not overlap_comm:
                b.program.append(Wait(reductions[-1]))
    return reductions


def _reduction(b: _Builder, op: str, nbytes: int, k: int) -> int:
    name = "all-reduce" if op == "allreduce" else "reduce-scatter"
    return b.issue(op, nbytes, f"{name} bucket {k + 1}")


def plan_step(layers: Sequence[LayerCost], options: ShardingPlanOptions) -> Plan:
    """The collectives and program of one step over ``layers`` (forward order)."""
    b = _Builder()
    forward, backward = range(len(layers)), range(len(layers) - 1, -1, -1)
    buckets = reduce_buckets(layers, options.reduce_bucket_nbytes)
    closes = dict(buckets)
    if options.stage == 3:
        _gather_layers(b, layers, forward, "forward", "pre" if options.forward_prefetch else "none")
        if options.reshard_after_forward:
            prefetch = {"backward_pre": "pre", "backward_post": "post", "none": "none"}
            reductions = _gather_layers(
                b,
                layers,
                backward,
                "backward",
                prefetch[options.backward_prefetch],
                closes,
                options.overlap_comm,
            )
        else:
            reductions = _compute_and_reduce(b, backward, closes, "reduce_scatter", options)
        if reductions:
            b.program.append(Wait(reductions[-1]))
        return Plan(b.collectives, b.program)
    b.program.extend(Compute(i, "forward") for i in forward)
    op = "allreduce" if options.stage == 1 else "reduce_scatter"
    reductions = _compute_and_reduce(b, backward, closes, op, options)
    if reductions:
        b.program.append(Wait(reductions[-1]))
    param_nbytes = sum(layer.param_nbytes for layer in layers)
    if param_nbytes:  # the updated shards, gathered back into every device's parameters
        sizes = byte_buckets(param_nbytes, options.allgather_bucket_nbytes)
        for k, nbytes in enumerate(sizes):
            last = b.issue("all_gather", nbytes, f"all-gather parameters {k + 1}/{len(sizes)}")
        b.program.append(Wait(last))
    return Plan(b.collectives, b.program)


def _compute_and_reduce(
    b: _Builder,
    order: Sequence[int],
    closes: dict[int, int],
    op: str,
    options: ShardingPlanOptions,
) -> list[int]:
    """Backward over ``order`` without gathering, each closed bucket reduced by ``op``."""
    reductions: list[int] = []
    for i in order:
        b.program.append(Compute(i, "backward"))
        if i in closes:
            reductions.append(_reduction(b, op, closes[i], len(reductions)))
            if not options.overlap_comm:
                b.program.append(Wait(reductions[-1]))
    return reductions
