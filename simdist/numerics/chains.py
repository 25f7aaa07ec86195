"""Which runs of optimizer updates may be fused in one ``lax.scan`` bit for bit.

An asynchronous parameter server applies every gradient shard on arrival, one
optimizer step each. Replayed from the dataflow (``strategies/parameter_server/
replay.py``), the shards a PS applies between two gradient waves are known at
once, and a ``lax.scan`` over them applies up to :data:`CHAIN` in one call.

That equals one ``Workload.apply`` call per update only where XLA compiles the
update the same way inside a loop body: plain SGD and momentum with a constant
learning rate (checked on JAX 0.10.2, with learning-rate scales, by
tests/test_ps_dataflow.py). Adam, and any learning-rate schedule, evaluate a
power or a cosine of the step count, which XLA:CPU compiles differently in a
loop body (Adam: the last bit differs from the second step on). Unrolling the
steps instead is exact but compiles for 1–3 s per PS, more than a short run
takes; so those runs apply one standard update call per shard, as the
step-by-step loop did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simdist.scenario.workload import OptimizerSpec

#: Updates per chain call: the replay pads shorter runs (padded steps write to a scratch slot).
CHAIN = 8

#: Optimizers whose update is exact inside ``lax.scan`` (with a constant learning rate).
SCAN_EXACT = ("sgd", "momentum")


def scan_exact(optimizer_spec: OptimizerSpec) -> bool:
    """Whether ``optimizer_spec``'s updates may be fused in a ``lax.scan`` bit for bit."""
    schedule = optimizer_spec.schedule
    constant = schedule is None or schedule.kind == "constant"
    return optimizer_spec.name in SCAN_EXACT and constant
