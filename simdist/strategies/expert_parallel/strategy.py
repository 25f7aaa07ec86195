"""The expert_parallel strategy: a mixture-of-experts model, its experts over the ``expert``
axis of a ``data`` × ``expert`` mesh, its tokens moved by all-to-alls the router sizes.

Every step starts from the routing: with numerics, the model's own — the step is computed
first (:meth:`~simdist.numerics.moe.ExpertParallelTrainer.prepare`) and its tokens per
device and expert read back; timing-only, drawn from ``strategy.routing`` on the named
stream ``moe_routing``. Each data row of X devices then walks its step
(:func:`.plan.step_plan`): compute, then the all-to-alls, each a message per pair of
devices with the tokens one sends the other (``net.send``: the network prices and shares
them; links.csv carries their exact bytes), each device's experts computing for the tokens
they received. The rows walk concurrently; then the gradients are all-reduced: the dense
parameters' over every device, the experts' over each data group (the D copies of the
same experts; none for D = 1), after backward, not overlapped.

Each step's routing is recorded in two tables (``moe_routing``: per expert; ``moe_steps``:
per step, imbalance and dropped share) and summed up in summary.json.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from functools import cached_property
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.seeds import rng
from simdist.strategies.expert_parallel.plan import (
    EXCHANGES,
    draw_routing,
    exchange_layer,
    exchange_tokens,
    expert_seconds,
    keep_in_capacity,
    received_tokens,
    routing_figures,
    routing_key_numbers,
    routing_record,
    routing_weights,
    spans,
    step_plan,
)
from simdist.strategies.steps import Collective, Compute, GroupRunner, walk
from simdist.strategies.sync import SynchronousStrategy, SyncState

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device

#: The profile layer that is the experts (simdist/numerics/moe.py's ``MoE``).
EXPERTS_LAYER = "experts"
#: How a gpt's MoE layers end their names (simdist/numerics/fullsize/transformer.py).
MOE_LAYER_SUFFIX = ".moe"
#: The routing figure (simdist.report.table_figures draws it from the two tables).
ROUTING_FIGURE: dict[str, Any] = {
    "file": "moe_routing.png",
    "title": "MoE routing per step",
    "caption": "Tokens each expert was sent per step (`moe_routing.csv`), the imbalance "
    "(most tokens of an expert / the mean) and the share of tokens dropped past capacity "
    "(`moe_steps.csv`).",
    "panels": [
        {
            "table": "moe_routing",
            "x": "step",
            "y": "tokens",
            "series": "expert",
            "ylabel": "tokens",
        },
        {"table": "moe_steps", "x": "step", "y": ["imbalance"], "ylabel": "max / mean"},
        {"table": "moe_steps", "x": "step", "y": ["dropped_fraction"], "ylabel": "share dropped"},
    ],
}


class ExpertParallelStrategy(SynchronousStrategy):
    """Experts divided over X devices, × D data-parallel copies; all-to-alls sized by the
    router's real decisions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        self.X: int = spec.expert_size(self.scenario.cluster)
        self.D: int = spec.data
        self.algo: str = spec.all_reduce
        model = self.scenario.workload.clock_model
        self.E, self.k = int(model.experts), int(model.top_k)
        self.width = int(model.hidden[0])
        from simdist.numerics.moe import capacity as slots_for

        tokens = model.seq_len if model.name == "gpt" else model.tokens
        per_device = self.scenario.workload.batch_size * int(tokens or 0)
        self.tokens_per_device = per_device
        factor = float(model.capacity_factor)
        self.slots = slots_for(per_device * self.D * self.X, self.E, self.k, factor)
        #: The slots the experts layer was costed for: one device's batch on all E experts.
        self.profiled_slots = self.E * slots_for(per_device, self.E, self.k, factor)
        names = [layer.name for layer in self.costs.layers]
        #: The MoE layers' places in the model's layers, in order.
        self.moe_indices = [
            i for i, n in enumerate(names) if n == EXPERTS_LAYER or n.endswith(MOE_LAYER_SUFFIX)
        ]
        if not self.moe_indices:
            raise SimdistError(
                f"{self.scenario.name}: strategy expert_parallel needs the model's per-layer "
                "costs (its MoE layers); this run has none"
            )
        self.moe_names = [names[i] for i in self.moe_indices]
        self.spans = spans(len(self.moe_indices))
        self.token_nbytes = self.width * self.costs.element_nbytes
        leaves = self.costs.param_leaves
        self.expert_grad_nbytes = sum(n for path, _, n in leaves if "/experts/" in f"/{path}/")
        self.dense_grad_nbytes = self.costs.grad_nbytes - self.expert_grad_nbytes
        self.expert_rows = [list(g) for g in self.mesh.groups("expert")]
        self.data_groups = [list(g) for g in self.mesh.groups("data")]
        routing = spec.routing
        self.weights = routing_weights(self.E, None if routing == "uniform" else routing.zipf)
        self.rng = rng(self.scenario.seed, "moe_routing")
        self.trainer_routes = False
        if self.workload is not None:
            from simdist.numerics.moe import ExpertParallelTrainer

            self.trainer = ExpertParallelTrainer(
                self.workload, self.D, self.X, self.scenario.workload.batch_size, SyncState
            )
            self.state = self.trainer.init()
            self.trainer_routes = True
        self._around: dict[str, list[tuple[float, float]]] = {}
        self.step_stats: list[tuple[float, float]] = []  # (imbalance, dropped share) per step

    def optimizer_step_s(
        self, device: Device, share: float = 1.0, shards: int | None = None
    ) -> float:
        """A device updates its dense parameters and its E / X experts only."""
        held = self.dense_grad_nbytes + self.expert_grad_nbytes // self.X
        whole = max(1, self.costs.grad_nbytes)
        return super().optimizer_step_s(device, share * held / whole, shards)

    def requested_execution(self) -> str:
        """The data-parallel trainer the base class builds is replaced by the expert-parallel
        one; ``batched`` keeps it from asking for devices."""
        return "batched"

    def build_mesh(self) -> Mesh[Device]:
        """D copies × X devices, expert innermost: an expert row is consecutive devices."""
        return Mesh.of(
            self.cluster.devices, {"data": self.D, "expert": self.X}, order=("data", "expert")
        )

    @cached_property
    def training_devices(self) -> list[Device]:
        """Every device of the mesh computes."""
        return list(self.mesh.devices)

    # -- the routing ---------------------------------------------------------

    def routing(self, step: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Step ``step``'s tokens routed and kept per device and expert ``[G, E]``, one pair
        per MoE layer: the model's (the step computed now), or drawn (timing-only: each
        layer its own draw, in layer order)."""
        if self.trainer_routes and self.state is not None and not self.defer:
            routed = self.trainer.prepare(self.state, self.trainer.batch(step))
            return [(routed.routed, routed.kept)]
        out = []
        for _ in self.moe_indices:
            drawn = draw_routing(
                self.rng, self.weights, self.D * self.X, self.tokens_per_device, self.k
            )
            out.append((drawn.sum(axis=1), keep_in_capacity(drawn, self.slots)))
        return out

    def record_routing(self, step: int, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """The step's rows of ``moe_routing`` (per expert, its MoE layers summed) and
        ``moe_steps`` (the imbalance of its most imbalanced layer): :func:`.plan.routing_record`."""
        holders = [self.expert_rows[0][e // (self.E // self.X)].name for e in range(self.E)]
        nbytes = sum(self.step_nbytes(k) for _, k in layers)
        record = routing_record(step, layers, holders, nbytes)
        for row in record.rows:
            self.recorder.row("moe_routing", **row)
        self.step_stats.append((record.imbalance, record.dropped))
        self.recorder.row("moe_steps", **record.step)

    def step_nbytes(self, kept: np.ndarray) -> int:
        """Bytes a MoE layer's four all-to-alls move across devices in a step."""
        tokens = exchange_tokens(kept, self.D, self.X)
        crossing = int(tokens.sum() - np.trace(tokens, axis1=1, axis2=2).sum())
        return len(EXCHANGES) * crossing * self.token_nbytes

    # -- the clock -----------------------------------------------------------

    def compute(self, step: int) -> Generator[Any, Any, None]:
        """Route, then each data row walks its step; the all-reduces wait for all rows."""
        layers = self.routing(step)
        self.record_routing(step, layers)
        tokens = np.stack([exchange_tokens(kept, self.D, self.X) for _, kept in layers])
        walks = [
            self.env.process(self.walk_row(row, step, tokens[:, d]))
            for d, row in enumerate(self.expert_rows)
        ]
        yield self.env.all_of(walks)
        now = self.env.now
        for row, done in zip(self.expert_rows, walks, strict=True):
            if done.value < now:
                self.record_devices(row, done.value, now, "idle", step, "barrier")

    def walk_row(
        self, row: list[Device], step: int, tokens: np.ndarray
    ) -> Generator[Any, Any, float]:
        """One data row's step on ``tokens[m, i, j]`` (MoE layer m, column i sends column
        j); returns when it ended."""
        dense = self.dense_s(self.costs.layers)
        m = len(self.moe_indices)
        crossing = [int(t.sum() - np.trace(t)) for t in tokens]
        exchanged = [crossing[exchange_layer(k, m)] * self.token_nbytes for k in range(4 * m)]
        plan = step_plan(dense, exchanged, self.moe_names)
        yield from walk(plan, ExpertRow(self, row, step, tokens))
        return self.env.now

    def dense_s(self, layers: Sequence[Any]) -> list[tuple[float, float]]:
        """(forward, backward) seconds of each run of layers between the MoE layers (before
        the first, ..., after the last)."""
        bounds = [-1, *self.moe_indices, len(layers)]
        runs = [layers[a + 1 : b] for a, b in pairwise(bounds)]
        return [(sum(x.forward_s for x in run), sum(x.backward_s for x in run)) for run in runs]

    def span_s(self, device: Device, unit: int, tokens: int) -> float:
        """``device``'s span ``unit`` of the step (:func:`.plan.spans`) on its class's layer
        times: a MoE layer's experts for the ``tokens`` they received, or a run of layers."""
        span = self.spans[unit]
        if span.part == "experts":
            return self.expert_span_s(device, span.index, tokens, span.phase)
        label = device.profile if self.costs.per_profile else ""
        if label not in self._around:
            self._around[label] = self.dense_s(self.device_costs(device).layers)
        return self._around[label][span.index][span.phase == "backward"]

    def expert_span_s(self, device: Device, moe: int, tokens: int, phase: str) -> float:
        """``device``'s experts of MoE layer ``moe`` computing ``tokens`` in ``phase`` (its
        class's layer time)."""
        layer = self.device_costs(device).layers[self.moe_indices[moe]]
        seconds = layer.forward_s if phase == "forward" else layer.backward_s
        return expert_seconds(seconds, layer.launch_s, tokens, self.profiled_slots)

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        """The dense gradients all-reduced over every device, then the experts' over each
        data group (D copies of the same experts), all groups at once."""
        devices = self.training_devices
        if len(devices) > 1 and self.dense_grad_nbytes > 0:
            yield self.net.collective(
                "allreduce",
                devices,
                self.dense_grad_nbytes,
                self.algo,
                step=step,
                detail="dense all-reduce",
            )
        if self.D > 1 and self.expert_grad_nbytes > 0:
            share = self.expert_grad_nbytes // self.X
            moves = [
                self.net.collective(
                    "allreduce", group, share, self.algo, step=step, detail="experts all-reduce"
                )
                for group in self.data_groups
            ]
            yield self.env.all_of(moves)

    def summary(self) -> dict[str, Any]:
        """The layout and the routing over the run."""
        stats = np.array(self.step_stats) if self.step_stats else np.zeros((0, 2))
        return {
            "expert": self.X,
            "data": self.D,
            "experts": self.E,
            "top_k": self.k,
            "expert_capacity": self.slots,
            **routing_figures(stats),
            "moe_routing": "model" if self.trainer_routes else "drawn",
            # What report.md and the figures show (simdist.report.table_figures' contract).
            "key_numbers": routing_key_numbers(
                [
                    "experts (each one's capacity)",
                    "expert_capacity",
                    f"{self.E} ({{}} tokens a step)",
                ]
            ),
            "table_figures": [ROUTING_FIGURE],
            "table_notes": {
                "moe_routing.csv": "per step and expert: tokens routed to it, kept within "
                "capacity, dropped, and the device holding it (data row 0)",
                "moe_steps.csv": "per step: tokens routed, kept, dropped share, imbalance "
                "(busiest expert / mean), bytes of the four all-to-alls across devices",
            },
        }


class ExpertRow(GroupRunner):
    """A data row of X devices walking its step: the expert spans each device's own (in
    proportion to the tokens it received), the all-to-alls a message per pair."""

    def __init__(
        self, strategy: ExpertParallelStrategy, row: Sequence[Device], step: int, tokens: Any
    ) -> None:
        super().__init__(strategy, row, step, strategy.algo)
        self.ep = strategy
        self.tokens = tokens  # [M, X, X]
        self.received = received_tokens(tokens)  # [M, X]

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Every device computes ``op`` on its class's times (its experts: for the tokens it
        received); the next all-to-all waits for the slowest."""
        ep, step = self.ep, self.step
        start = self.env.now
        span = ep.spans[op.unit]
        received = self.received[span.index] if span.part == "experts" else [0] * len(self.group)
        plan = [
            (d, ep.span_s(d, op.unit, int(n)), ep.pace(d, step), ep.slowdown(d, step))
            for d, n in zip(self.group, received, strict=True)
        ]
        longest = max(seconds * (pace * factor) for _, seconds, pace, factor in plan)
        if longest <= 0:
            return
        yield self.env.timeout(longest)
        for d, seconds, pace, factor in plan:
            done = ep.record_scaled(d, start, seconds, factor, step, op.detail, pace)
            if done < start + longest:
                ep.recorder.event(done, start + longest, d.host, d.name, "idle", 0, step, "barrier")

    def start(self, index: int, c: Collective) -> Any:
        """All-to-all ``index`` of the step: a message per pair of devices with tokens to move."""
        layer = self.tokens[exchange_layer(index, len(self.ep.moe_indices))]
        tokens = layer if index % 2 == 0 else layer.T  # the dispatch's way, or back
        net, size = self.ep.net, self.ep.token_nbytes
        moves = [
            net.send(src, dst, int(tokens[i, j]) * size, step=self.step, detail=c.detail)
            for i, src in enumerate(self.group)
            for j, dst in enumerate(self.group)
            if i != j and tokens[i, j] > 0
        ]
        return net.join(moves)
