"""hybrid's expert axis: a mixture-of-experts gpt's experts over groups of X devices carved
out of the data-parallel ranks, its tokens moved by all-to-alls inside each group.

Megatron-Core lays it out so (megatron/core/parallel_state.py, ``initialize_model_parallel``,
NVIDIA/Megatron-LM@00caa53): the dense layers see the mesh as tensor × context × data ×
pipeline, the MoE layers as expert-tensor × expert × expert-data × pipeline over the same
ranks and the same pipeline groups, with ``expert_data_parallel_size = world_size /
(expert_tensor_parallel_size × expert_model_parallel_size × pipeline_model_parallel_size)``
and the order ``tp-cp-ep-dp-pp`` (innermost first): an expert group is X consecutive ranks of
a stage's data × context ranks, context innermost (its README, megatron/core/transformer/moe/
README.md@022bcb5, "MoE Parallel Folding": "The EPxTP group in MoE is a sub-group of DPxCPxTP
in Attention"). So X divides data × context (the spec refuses otherwise), each device of a
group holds E / X experts (expert ``e`` on column ``e // (E / X)``), and the expert-data
group, the data × context / X devices holding the same experts, reduces their gradients
(ZeRO shards their state over it). The expert tensor split (``expert_tensor_parallel_size``)
is not built: the spec refuses a tensor group with an expert axis.

Each MoE layer (``h.<i>.moe``) of a stage's pass (:func:`stage_passes`): the layers before it,
then the dispatch all-to-all (each token to its experts' devices), each device's experts on
the tokens it received, the combine all-to-all (back to the tokens' devices), the layers
after; backward the combine's gradient (the dispatch's way), the experts' backward, the
dispatch's gradient (back) — :data:`simdist.strategies.expert_parallel.plan.EXCHANGES`; with
``recompute: full`` the recomputed forward's dispatch and combine first (Megatron recomputes
the whole layer, its token dispatcher included). Every all-to-all is on the critical path, a
message per pair of devices with the tokens one keeps for the other's experts
(:class:`ExpertAxis`, ``exchange``): it starts once every copy of the group's block has
reached it, so the combine after the experts waits for the busiest expert. Under
``schedule: interleaved`` the passes are each model chunk's (its layer range's plan), the
copies meet per chunk, and a device's expert-data reduction and optimizer share add up all
its chunks' experts.

Routing (timing-only, as hybrid's gpt runs are) is drawn per MoE layer and micro-batch at the
start of each step on the named stream ``moe_routing`` with
:func:`~simdist.strategies.expert_parallel.plan.draw_routing` (one draw of every token holder
of a stage, as expert_parallel's timing-only gpt draws its step's; with one micro-batch the
same draws in the same order), kept within each group's capacity
(:func:`~simdist.strategies.expert_parallel.plan.keep_in_capacity`, the capacity of the
group's tokens); a device's experts compute in proportion to the tokens they received
(:func:`~simdist.strategies.expert_parallel.plan.expert_seconds`).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from simdist.seeds import rng
from simdist.step_costs import LayerCost
from simdist.strategies.expert_parallel.plan import (
    EXCHANGES,
    draw_routing,
    exchange_tokens,
    expert_seconds,
    keep_in_capacity,
    routing_figures,
    routing_key_numbers,
    routing_record,
    routing_weights,
)
from simdist.strategies.hybrid.plan import StagePlans, data_collectives, stage_plans
from simdist.strategies.hybrid.spec import attention_shape
from simdist.strategies.steps import Collective, Compute, Issue, Plan, Step, Wait, issue_and_wait

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.strategies.context_ring import ContextRing


class PassRunner(Protocol):
    """What :class:`ExpertAxis` needs of the runner of a stage's pass (hybrid's
    ``TensorGroup``): its step, devices, row label, and where busy time is counted."""

    step: int
    group: Sequence[Device]
    label: str

    def computed(self, seconds: float) -> None: ...


#: How a gpt's MoE layers end their names (simdist/numerics/fullsize/transformer.py).
MOE_SUFFIX = ".moe"
#: A parameter leaf of an expert (the gpt's ``GptExperts`` module).
EXPERT_LEAF = "/experts/"
#: The all-to-alls of a recomputed forward, before the backward's (:data:`EXCHANGES`).
RECOMPUTED: tuple[tuple[str, bool], ...] = (
    ("dispatch recomputed", True),
    ("combine recomputed", False),
)


class StagePass(NamedTuple):
    """A stage's micro-batch pass (forward or backward) with its MoE layers: the plan, the
    MoE layer each expert span computes (``{unit: layer}``) and each all-to-all's layer and
    direction (``{collective index: (layer, the dispatch's way)}``)."""

    plan: Plan
    experts: dict[int, int]
    exchanges: dict[int, tuple[int, bool]]


class _Joined:
    """Plans appended one after another into one, compute units and collectives renumbered."""

    def __init__(self) -> None:
        self.collectives: list[Collective] = []
        self.program: list[Step] = []
        self.units = 0
        self.experts: dict[int, int] = {}
        self.exchanges: dict[int, tuple[int, bool]] = {}

    def plan(self, piece: Plan) -> None:
        shift = len(self.collectives)
        self.collectives += piece.collectives
        for op in piece.program:
            if isinstance(op, Compute):
                self.program.append(op._replace(unit=self.units))
                self.units += 1
            elif isinstance(op, Issue | Wait):
                self.program.append(op._replace(index=op.index + shift))
            else:
                self.program.append(op)

    def exchange(self, label: str, layer: int, dispatch_way: bool, name: str) -> None:
        self.exchanges[len(self.collectives)] = (layer, dispatch_way)
        issue_and_wait(
            self.program, self.collectives, Collective("all_to_all", 0, f"{label} {name}")
        )

    def experts_span(self, layer: int, phase: str, seconds: float, name: str) -> None:
        self.experts[self.units] = layer
        self.program.append(Compute(self.units, phase, seconds, f"{phase} {name}"))
        self.units += 1

    def done(self) -> StagePass:
        return StagePass(Plan(self.collectives, self.program), self.experts, self.exchanges)


def stage_passes(
    layers: Sequence[LayerCost],
    roles: Sequence[str],
    first: int,
    stop: int,
    ring: ContextRing | None,
    recompute: bool,
) -> tuple[StagePass, StagePass]:
    """A micro-batch's forward and backward through layers ``[first, stop)`` of ``layers``
    (micro-batch costs, one device of a tensor group of 1) with their MoE layers' all-to-alls
    (module docstring): the runs of layers between MoE layers as
    :func:`~simdist.strategies.hybrid.plan.stage_plans` makes them (a context ring's steps
    included), each MoE layer its exchanges around its experts' span; ``recompute``: the
    backward recomputes each MoE layer's forward, all-to-alls included."""
    moe = [i for i in range(first, stop) if layers[i].name.endswith(MOE_SUFFIX)]
    bounds = [first - 1, *moe, stop]
    runs = [(a + 1, b) for a, b in pairwise(bounds) if b > a + 1]
    plans = {a: stage_plans(layers, roles, a, b, 1, False, True, ring) for a, b in runs}
    forward = _Joined()
    for i in range(first, stop):
        if i in plans:
            forward.plan(plans[i][0])
        if i in moe:
            name = layers[i].name
            (dispatch, way), (combine, back) = EXCHANGES[:2]
            forward.exchange(dispatch, i, way, name)
            forward.experts_span(i, "forward", layers[i].forward_s, name)
            forward.exchange(combine, i, back, name)
    return forward.done(), _backward(layers, plans, moe, first, stop, recompute)


def _backward(
    layers: Sequence[LayerCost],
    plans: dict[int, tuple[Plan, Plan]],
    moe: Sequence[int],
    first: int,
    stop: int,
    recompute: bool,
) -> StagePass:
    """:func:`stage_passes`' backward: from the last layer, each run's backward plan, each MoE
    layer's exchanges around its experts' backward."""
    ends = {}  # the run ending at layer i (inclusive) starts at ends[i]
    for a in plans:
        b = min([m for m in moe if m > a] + [stop])
        ends[b - 1] = a
    backward = _Joined()
    for i in reversed(range(first, stop)):
        if i in ends:
            backward.plan(plans[ends[i]][1])
        if i in moe:
            name = layers[i].name
            for label, way in RECOMPUTED if recompute else ():
                backward.exchange(label, i, way, name)
            (combine, way), (dispatch, back) = EXCHANGES[2:]
            backward.exchange(combine, i, way, name)
            backward.experts_span(i, "backward", layers[i].backward_s, name)
            backward.exchange(dispatch, i, back, name)
    return backward.done()


def group_tokens(kept: np.ndarray, expert: int) -> np.ndarray:
    """``[groups, X, X]``: in each expert group (X consecutive token holders), the tokens
    column ``i`` sends column ``j`` from the tokens each holder keeps per expert ``[G, E]``."""
    return exchange_tokens(kept, kept.shape[0] // expert, expert)


def crossing_tokens(tokens: np.ndarray) -> int:
    """Tokens of ``[groups, X, X]`` that move to another device (the diagonals stay)."""
    return int(tokens.sum() - np.trace(tokens, axis1=1, axis2=2).sum())


class ExpertAxis:
    """The expert axis of a :class:`~simdist.strategies.hybrid.strategy.HybridStrategy`
    (module docstring): the stages' passes with their all-to-alls, each step's routing, the
    experts' compute per device, the exchanges, the experts' gradient reduction."""

    def __init__(self, h: Any, expert: int) -> None:
        """``h``: the hybrid strategy (its mesh groups, layer costs, network, recorder)."""
        from simdist.numerics.routing import capacity

        self.h, self.env, self.X = h, h.env, expert
        spec = h.scenario.strategy
        model = h.scenario.workload.clock_model
        self.E, self.k = int(model.experts), int(model.top_k)
        self.C, self.T, self.M = h.C, h.T, h.M
        self.G = h.D * h.C  # the token holders of a stage (tensor 1)
        self.groups = self.G // expert
        #: Copies whose passes meet at each all-to-all: the fewest whose token holders are
        #: whole expert groups.
        self.block = expert // math.gcd(expert, self.C)
        factor = float(model.capacity_factor)
        shape = attention_shape(h.scenario.workload)
        assert shape is not None  # the spec refuses an expert axis on anything but a gpt
        per_copy = int(h.scenario.workload.batch_size) * shape.seq_len
        self.tokens_per_device = per_copy // (self.M * self.C)  # a micro-batch's, a holder's
        self.slots = capacity(self.tokens_per_device * expert, self.E, self.k, factor)
        #: The slots the MoE layer was costed for: one copy's batch on all E experts.
        self.profiled_slots = self.E * capacity(per_copy, self.E, self.k, factor)
        self.token_nbytes = shape.hidden * h.costs.element_nbytes
        self.recompute = spec.recompute == "full"
        routing = spec.routing
        zipf = None if routing in (None, "uniform") else routing.zipf
        self.weights = routing_weights(self.E, zipf)
        self.rng = rng(h.scenario.seed, "moe_routing")
        names = [layer.name for layer in h.costs.layers]
        self.moe = [i for i, n in enumerate(names) if n.endswith(MOE_SUFFIX)]
        self.ordinal = {i: n for n, i in enumerate(self.moe)}
        self.passes: dict[tuple[int, int], tuple[StagePass, StagePass]] = {}
        self.tokens: dict[tuple[int, int], np.ndarray] = {}  # (layer, micro): [groups, X, X]
        self.received: dict[tuple[int, int], np.ndarray] = {}  # (layer, micro): [G]
        self.meetings: dict[tuple, list[Any]] = {}
        self.step_nbytes = 0
        self.step_stats: list[tuple[float, float]] = []
        leaves = {path: nbytes for path, _, nbytes in h.costs.param_leaves}
        self.expert_leaf_nbytes = [
            sum(leaves.get(p, 0) for p in layer.param_paths if EXPERT_LEAF in f"/{p}/")
            for layer in h.costs.layers
        ]

    # -- the plan ------------------------------------------------------------

    def stage_walk(self, first: int, stop: int) -> StagePlans:
        """A micro-batch's forward and backward plans of layers [first, stop); no backward
        spans, as the overlapped reduction they feed is refused with an expert axis."""
        key = (first, stop)
        if key not in self.passes:
            h = self.h
            self.passes[key] = stage_passes(h.micro, h.roles, first, stop, h.ring, self.recompute)
        forward, backward = self.passes[key]
        return StagePlans(forward.plan, backward.plan, [])

    def holder(self, s: int, index: int) -> Device:
        """Token holder ``index`` of stage ``s`` (data-major, context innermost)."""
        return self.h.groups[index // self.C][s][(index % self.C) * self.T]

    def grad_nbytes(self, first: int, stop: int) -> int:
        """Gradient bytes of the experts of layers [first, stop), all E of each layer."""
        return sum(self.expert_leaf_nbytes[first:stop])

    def stage_grad_nbytes(self, s: int) -> int:
        """Gradient bytes of the experts stage ``s``'s devices hold a share of: its model
        chunks' (interleaved; its own layers' otherwise), all E of each layer."""
        h = self.h
        return sum(self.grad_nbytes(*h.bounds[j]) for j in h.chunks_of(s))

    def reductions(self, s: int, zero: int) -> list[Collective]:
        """What stage ``s``'s expert-data groups move after the flush: their E / X experts'
        gradients of every model chunk of the stage at once (as Megatron-Core's distributed
        optimizer reduces a device's chunks' buffers together), reduced (or ZeRO's
        collectives) over data x context / X devices."""
        if self.G // self.X == 1:
            return []
        shard = LayerCost(f"stage {s}", 0.0, 0.0, self.stage_grad_nbytes(s) // self.X)
        return data_collectives(shard, zero, f"stage {s} experts")

    def data_groups(self, s: int) -> list[list[Device]]:
        """Stage ``s``'s expert-data groups: the holders of each column's experts."""
        return [[self.holder(s, g * self.X + i) for g in range(self.groups)] for i in range(self.X)]

    def update_share(self, s: int, whole: float, dense_shards: int) -> float:
        """A device of stage ``s``'s share of the whole optimizer step: over each of its
        model chunks (its stage's layers without interleaving), the dense parameters over
        ``dense_shards``, the experts over X (and the expert-data group with ZeRO)."""
        return sum(
            self.chunk_share(*self.h.bounds[j], whole, dense_shards) for j in self.h.chunks_of(s)
        )

    def chunk_share(self, first: int, stop: int, whole: float, dense_shards: int) -> float:
        """:meth:`update_share` of layers [first, stop)."""
        if whole <= 0:
            return 0.0
        h = self.h
        params = sum(x.param_nbytes for x in h.costs.layers[first:stop])
        experts = (
            self.grad_nbytes(first, stop)
            * params
            / max(1, sum(x.grad_nbytes for x in h.costs.layers[first:stop]))
        )
        spec = h.scenario.strategy
        expert_shards = spec.expert_sharding(h.scenario.cluster).optimizer
        return ((params - experts) / dense_shards + experts / expert_shards) / whole

    # -- the routing ---------------------------------------------------------

    def route(self, step: int) -> None:
        """Draw step ``step``'s routing, per MoE layer then micro-batch, and record it."""
        layers = []
        nbytes = 0
        exchanges = len(EXCHANGES) + (len(RECOMPUTED) if self.recompute else 0)
        for i in self.moe:
            routed = np.zeros((self.G, self.E), dtype=np.int64)
            kept_all = np.zeros((self.G, self.E), dtype=np.int64)
            for m in range(self.M):
                drawn = draw_routing(self.rng, self.weights, self.G, self.tokens_per_device, self.k)
                kept = np.concatenate(
                    [
                        keep_in_capacity(drawn[g * self.X : (g + 1) * self.X], self.slots)
                        for g in range(self.groups)
                    ]
                )
                tokens = group_tokens(kept, self.X)
                self.tokens[(i, m)] = tokens
                self.received[(i, m)] = tokens.sum(axis=1).reshape(-1)
                nbytes += exchanges * crossing_tokens(tokens) * self.token_nbytes
                routed += drawn.sum(axis=1)
                kept_all += kept
            layers.append((routed, kept_all))
        self.step_nbytes = nbytes
        per = self.E // self.X
        holders = [self.holder(0, e // per).name for e in range(self.E)]
        record = routing_record(step, layers, holders, nbytes)
        for row in record.rows:
            self.h.recorder.row("moe_routing", **row)
        self.step_stats.append((record.imbalance, record.dropped))
        self.h.recorder.row("moe_steps", **record.step)

    # -- the clock -----------------------------------------------------------

    def pass_of(self, s: int, phase: str) -> StagePass:
        """Stage ``s``'s forward (``F``) or backward pass; interleaved, ``s`` is a model
        chunk (hybrid's ``bounds`` and ``groups`` are per chunk then)."""
        forward, backward = self.passes[self.h.bounds[s]]
        return forward if phase == "F" else backward

    def owns(self, where: tuple[int, int, int, str], op: Compute) -> bool:
        """Whether ``op`` of the pass at ``where`` (copy, stage or model chunk, micro-batch,
        phase) is an expert span."""
        return op.unit in self.pass_of(where[1], where[3]).experts

    def compute(
        self, runner: PassRunner, op: Compute, where: tuple[int, int, int, str]
    ) -> Generator[Any, Any, None]:
        """Each device of ``runner``'s group computes its experts on the tokens it received
        (its class's layer time in proportion); the group goes on with the slowest."""
        h, env, step = self.h, self.env, runner.step
        r, s, m, phase = where
        i = self.pass_of(s, phase).experts[op.unit]
        layer = h.costs.layers[i]
        seconds = layer.forward_s if op.phase == "forward" else layer.backward_s
        received = self.received[(i, m)]
        plan = [
            (
                d,
                expert_seconds(
                    seconds,
                    layer.launch_s,
                    int(received[r * self.C + c // self.T]),
                    self.profiled_slots,
                ),
                h.pace(d, step),
                h.slowdown(d, step),
            )
            for c, d in enumerate(runner.group)
        ]
        longest = max(t * (pace * factor) for _, t, pace, factor in plan)
        if longest <= 0:
            return
        start = env.now
        detail = f"{runner.label} {op.detail}"
        yield env.timeout(longest)
        for d, t, pace, factor in plan:
            done = h.record_scaled(d, start, t, factor, step, detail, pace)
            runner.computed(t * (pace * factor))
            if done < start + longest:
                h.recorder.event(done, start + longest, d.host, d.name, "idle", 0, step, "barrier")

    def exchange(
        self, runner: PassRunner, index: int, c: Collective, where: tuple[int, int, int, str]
    ) -> Any:
        """All-to-all ``index`` of the pass at ``where``: an event that fires once every copy
        of the block has reached it and every message of its groups has arrived (a meeting
        per model chunk: two chunks of a stage exchange apart)."""
        r, s, m, phase = where
        block = r // self.block
        key = (runner.step, s, block, m, phase, index)
        meeting = self.meetings.setdefault(key, [0, self.env.event()])
        meeting[0] += 1
        if meeting[0] < self.block:
            return meeting[1]
        del self.meetings[key]
        i, dispatch_way = self.pass_of(s, phase).exchanges[index]
        tokens = self.tokens[(i, m)]
        per_block = self.block * self.C // self.X  # expert groups in a block
        net = self.h.net
        moves = []
        for g in range(block * per_block, (block + 1) * per_block):
            t = tokens[g] if dispatch_way else tokens[g].T
            for a in range(self.X):
                for b in range(self.X):
                    if a != b and t[a, b] > 0:
                        src, dst = self.holder(s, g * self.X + a), self.holder(s, g * self.X + b)
                        nbytes = int(t[a, b]) * self.token_nbytes
                        moves.append(net.send(src, dst, nbytes, step=runner.step, detail=c.detail))
        done = meeting[1]
        if not moves:
            return done.succeed()
        net.join(moves).callbacks.append(lambda _: done.succeed())
        return done

    # -- what summary.json says ----------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The expert axis, its groups and the routing over the run (expert_parallel's
        keys and report rows)."""
        stats = np.array(self.step_stats) if self.step_stats else np.zeros((0, 2))
        from simdist.strategies.expert_parallel.strategy import ROUTING_FIGURE

        return {
            "experts": {
                "expert": self.X,
                "expert_data": self.G // self.X,
                "experts": self.E,
                "top_k": self.k,
                "expert_capacity": self.slots,
                "tokens_per_device_per_micro_batch": self.tokens_per_device,
                "all_to_all_nbytes_per_step": self.step_nbytes,
                # what each stage's expert-data groups move after the flush, per device
                "data_nbytes_per_device_per_step": [
                    {
                        op: sum(c.nbytes for c in moves if c.op == op)
                        for op in ("allreduce", "reduce_scatter", "all_gather")
                    }
                    for moves in (self.reductions(s, self.h.zero) for s in range(self.h.S))
                ],
            },
            **routing_figures(stats),
            "moe_routing": "drawn",
            "key_numbers": routing_key_numbers(
                [
                    f"experts over {self.X} devices (each one's capacity a micro-batch)",
                    "experts.expert_capacity",
                    f"{self.E} ({{}} tokens)",
                ]
            ),
            "table_figures": [ROUTING_FIGURE],
            "table_notes": {
                "moe_routing.csv": "per step and expert: tokens routed to it (every MoE layer "
                "and micro-batch), kept within capacity, dropped, and the device holding it "
                "(stage 0, expert group 0)",
                "moe_steps.csv": "per step: tokens routed, kept, dropped share, imbalance "
                "(busiest expert / mean, the most imbalanced layer), bytes of the step's "
                "all-to-alls across devices",
            },
        }
