"""One hybrid stage's work, memory and data-axis reduction, from the pieces it composes.

Pure (no SimPy, no JAX): the strategy prices these on the clock, the tests by hand.

* A micro-batch's pass through a stage is the tensor-parallel walk of the stage's layers
  (:func:`simdist.strategies.tensor_parallel.plan.phase_plans`) on the micro-batch's layer
  costs (:func:`micro_layers`: each layer's work / M, its launch cost in full, as the
  pipeline strategy prices a micro-batch): compute spans of each device's 1/T share and
  the tensor all-reduces of each Megatron block on the critical path, forward and backward.
* With a ``context`` axis of CP devices (:mod:`simdist.strategies.context_ring`), every
  layer's work and output on a device are 1/CP of the micro-batch's
  (:func:`context_layers`), and each attention layer runs its ring steps, sending its
  key/value block to the next device of the context group while it computes.
* Between stages each device of a tensor group sends its peer in the next group the
  micro-batch's boundary activation (:func:`send_nbytes`): whole without sequence
  parallelism (every device of the group holds it after the block's all-reduce), 1/T of
  it with (each holds its slice of the sequence).
* After the pipeline flush each (stage, tensor rank) shard's gradient is reduced over the
  data axis (:func:`data_collectives`): an all-reduce without ZeRO, otherwise ZeRO's step
  plan (:func:`simdist.strategies.sharded_plan.plan_step`) over the shard, its
  collectives run back to back after the flush (none overlaps a backward that has ended).
  With ``overlap_grad_reduce`` the reduction overlaps the stage's last backward instead
  (:func:`overlapped_data_plan`): its gradients fill buckets in the order that backward
  makes them ready (:attr:`StagePlans.backward_spans`), and each bucket is reduced as soon as it
  is ready on every copy and the bucket before it is reduced.
* A device's memory: its stage's as the pipeline computes it
  (:class:`simdist.memory.accounting.StagedReplica`), with the spec's
  :class:`~simdist.sharding.Sharding` (T for the tensor split, D more per ZeRO stage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from simdist.step_costs import LayerCost
from simdist.strategies.context_ring import ContextRing
from simdist.strategies.sharded_plan import (
    ShardingPlanOptions,
    byte_buckets,
    plan_step,
    reduce_buckets,
)
from simdist.strategies.steps import Collective, Compute, Issue, Plan, Step, Wait
from simdist.strategies.tensor_parallel.plan import phase_plans, split_s

#: DeepSpeed's reduce_bucket_size and allgather_bucket_size default (5e8 elements,
#: deepspeed/runtime/zero/config.py) as float32 bytes — simdist.strategies.zero's default.
BUCKET_NBYTES = 500_000_000 * 4
#: Megatron-LM's data-parallel gradient bucket when the reduction overlaps the backward:
#: max(40M, 1M × data-parallel size) parameters (DistributedDataParallelConfig.bucket_size,
#: megatron/core/distributed/distributed_data_parallel_config.py).
MEGATRON_BUCKET_ELEMENTS = 40_000_000
MEGATRON_BUCKET_ELEMENTS_PER_COPY = 1_000_000


def micro_layers(layers: Sequence[LayerCost], micro_batches: int) -> tuple[LayerCost, ...]:
    """``layers`` on one of M micro-batches: work and output bytes / M, launch cost whole."""
    M = micro_batches

    def micro_s(seconds: float, launch_s: float) -> float:
        return (seconds - launch_s) / M + launch_s

    return tuple(
        replace(
            x,
            forward_s=micro_s(x.forward_s, x.launch_s),
            backward_s=micro_s(x.backward_s, x.launch_s),
            output_nbytes=round(x.output_nbytes / M),
        )
        for x in layers
    )


class StagePlans(NamedTuple):
    """A micro-batch's forward and backward through a stage (:func:`stage_plans`), and the
    layers (indices into the model's) each compute span of the backward computes, in
    program order (what the overlapped data reduction waits for:
    :func:`overlapped_data_plan`)."""

    forward: Plan
    backward: Plan
    backward_spans: list[tuple[int, ...]]

    @property
    def phases(self) -> tuple[Plan, Plan]:
        """The forward and the backward plan."""
        return self.forward, self.backward


def stage_plans(
    layers: Sequence[LayerCost],
    roles: Sequence[str],
    first: int,
    stop: int,
    tensor: int,
    sequence_parallel: bool,
    gather_whole: bool,
    ring: ContextRing | None = None,
) -> StagePlans:
    """A micro-batch's forward and backward through layers ``[first, stop)`` of
    ``layers`` (micro-batch costs) on a tensor group, with its tensor collectives (none on
    a group of one device: there is nothing to reduce, and nothing runs) and, with a
    context axis (``ring``), each attention layer's ring steps; and the layers each
    backward compute span computes."""
    forward, backward, spans = phase_plans(
        layers[first:stop],
        roles[first:stop],
        tensor,
        sequence_parallel,
        gather_whole=gather_whole,
        takes_data=first == 0,
        input_activation_nbytes=layers[first - 1].output_nbytes if first else 0,
        ring=ring,
    )
    spans = [tuple(first + i for i in span) for span in spans]
    if tensor > 1:
        return StagePlans(forward, backward, spans)
    return StagePlans(_computes(forward), _computes(backward), spans)


def context_layers(layers: Sequence[LayerCost], context: int) -> tuple[LayerCost, ...]:
    """``layers`` on one device of a context axis of ``context``: each holds 1/CP of every
    sequence (:mod:`simdist.strategies.context_ring`), so its work and its output bytes are
    1/CP of the layer's; the launch cost whole. ``layers`` as they are for CP = 1."""
    if context == 1:
        return tuple(layers)
    return tuple(
        replace(
            x,
            forward_s=split_s(x.forward_s, x.launch_s, context),
            backward_s=split_s(x.backward_s, x.launch_s, context),
            output_nbytes=math.ceil(x.output_nbytes / context),
        )
        for x in layers
    )


def _computes(plan: Plan) -> Plan:
    """``plan`` without its collectives."""
    return Plan([], [op for op in plan.program if not isinstance(op, Issue | Wait)])


def send_nbytes(boundary_nbytes: int, tensor: int, sequence_parallel: bool) -> int:
    """Bytes one device sends its peer in the next stage for one micro-batch."""
    return math.ceil(boundary_nbytes / tensor) if sequence_parallel else int(boundary_nbytes)


def data_collectives(shard: LayerCost, zero: int, label: str) -> list[Collective]:
    """What one (stage, tensor rank) data group moves after the flush: the all-reduce of
    its gradient shard (zero 0) or ZeRO's collectives over it (1: all-reduce + all-gather
    of the updated parameters; 2: reduce-scatter + all-gather; 3: the gathers of forward and
    backward and the reduce-scatter), in bucket order, labelled with ``label``."""
    if shard.grad_nbytes <= 0:
        return []
    if zero == 0:
        return [Collective("allreduce", shard.grad_nbytes, f"data all-reduce {label}")]
    options = ShardingPlanOptions(
        stage=zero,
        overlap_comm=False,
        reduce_bucket_nbytes=BUCKET_NBYTES,
        allgather_bucket_nbytes=BUCKET_NBYTES,
    )
    return [
        c._replace(detail=f"data {c.detail} {label}")
        for c in plan_step((shard,), options).collectives
    ]


def data_bucket_nbytes(zero: int, copies: int, grad_element_nbytes: int) -> int:
    """The cap of an overlapped data reduction's buckets: DeepSpeed's ``reduce_bucket_size``
    under ZeRO (:data:`BUCKET_NBYTES`), Megatron-LM's bucket of max(40M, 1M × D) gradient
    elements without."""
    if zero:
        return BUCKET_NBYTES
    elements = max(MEGATRON_BUCKET_ELEMENTS, MEGATRON_BUCKET_ELEMENTS_PER_COPY * copies)
    return elements * grad_element_nbytes


def overlapped_data_plan(
    span_nbytes: Sequence[int], zero: int, cap_nbytes: int, label: str
) -> tuple[Plan, dict[int, int]]:
    """One (stage, tensor rank) data group's reduction overlapping the stage's last backward
    (``overlap_grad_reduce``; DeepSpeed's ``overlap_comm``), and the bucket each backward
    span closes (``{span: bucket}``).

    ``span_nbytes``: the device's gradient bytes each compute span of the backward makes
    ready, in program order. They fill buckets in that order, a bucket closed when the next
    gradient would take it past ``cap_nbytes``
    (:func:`simdist.strategies.sharded_plan.reduce_buckets`, as DeepSpeed's
    ``reduce_bucket_size`` and Megatron-LM's buckets). ``Compute(b,
    "backward")``: bucket b's gradients are ready on every copy; its collective (an
    all-reduce, ZeRO-2's reduce-scatter) is issued then and once the one before it has
    ended (``Wait``): the data group's communicator runs them one at a time, each as soon
    as it can, while the backward goes on. ZeRO then all-gathers the updated parameters, as
    :func:`data_collectives`.
    """
    forward = [LayerCost("", 0.0, 0.0, n) for n in reversed(span_nbytes)]
    buckets = reduce_buckets(forward, cap_nbytes)  # (closing span, bytes), backward order
    last = len(span_nbytes) - 1
    op, name = ("reduce_scatter", "reduce-scatter") if zero >= 2 else ("allreduce", "all-reduce")
    collectives: list[Collective] = []
    program: list[Step] = []
    for b, (_, nbytes) in enumerate(buckets):
        program.append(Compute(b, "backward"))
        if b:
            program.append(Wait(b - 1))
        bucket = "" if len(buckets) == 1 and not zero else f" bucket {b + 1}"
        collectives.append(Collective(op, nbytes, f"data {name}{bucket} {label}"))
        program.append(Issue(b))
    if zero and buckets:
        program.append(Wait(len(buckets) - 1))
        sizes = byte_buckets(sum(span_nbytes), BUCKET_NBYTES)
        for k, nbytes in enumerate(sizes):
            detail = f"data all-gather parameters {k + 1}/{len(sizes)} {label}"
            collectives.append(Collective("all_gather", nbytes, detail))
            program.append(Issue(len(collectives) - 1))
    if collectives:
        program.append(Wait(len(collectives) - 1))
    return Plan(collectives, program), {last - i: b for b, (i, _) in enumerate(buckets)}
