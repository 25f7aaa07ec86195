"""The hybrid strategy: D copies of a P-stage pipeline whose every stage is a tensor group.

The devices sit on the mesh (:mod:`simdist.hardware.mesh`, in ``placement`` order, tensor innermost
by default): device (d, p, t) is tensor rank t of stage p of data copy d. Each step runs
the pipeline's schedule (:func:`simdist.strategies.pipeline.plan.stage_ops`: gpipe or 1f1b,
a flush per step; or ``interleaved``,
:func:`~simdist.strategies.pipeline.plan.interleaved_ops`, each stage's tensor groups
holding V model chunks) with a tensor group in place of each stage's device: a micro-batch's
forward or backward on a stage is the tensor-parallel walk of its layers
(:func:`.plan.stage_plans`, run by :func:`~simdist.strategies.steps.walk`), every device of
the group computing its 1/T and every tensor collective on the critical path, holding the
group until the slowest device has joined (Megatron's synchronous NCCL calls). Activations
go to the next stage and their gradients back as T point-to-point sends, rank t to rank t
(:func:`.plan.send_nbytes`); a stage starts a micro-batch once all T have arrived. After
the flush, the data groups of every (stage, tensor rank) reduce their gradient shard at
once (:func:`.plan.data_collectives`), as Megatron-LM reduces after the pipeline flush
(``overlap_grad_reduce`` off by default,
megatron/core/distributed/distributed_data_parallel_config.py; DeepSpeed's
``overlap_comm`` is off for ZeRO 1 and 2 too, deepspeed/runtime/zero/config.py). With
``overlap_grad_reduce: true`` each data group instead reduces its stage's gradients in
buckets while the stage's last backward runs (:func:`.plan.overlapped_data_plan`, walked by
:class:`DataGroup`): a bucket goes once the span of layers that closes it has ended on
every copy, as DeepSpeed's ``overlap_comm`` and Megatron-LM's ``overlap_grad_reduce`` do.

The partition (``auto``) balances the stages' micro-batch time on the tensor group (their
compute shares and their tensor collectives' closed forms), keeping the mlp's
column/row pairs in one stage, among partitions whose every device fits its memory
(:func:`.plan.device_memory`); a stage that does not fit stops the run before its first
step, naming the device, its need and its capacity.

A context axis of CP devices (``mesh.context``) puts CP tensor groups on each stage of each
copy, walking its passes together: each device computes 1/CP of every layer
(:func:`.plan.context_layers`), each attention layer's ring steps send its key/value block
to the same tensor rank of the next context rank (:class:`TensorGroup`'s ``send``), and the
gradient shards are reduced over data × context.

An expert axis of X devices (``mesh.expert``, :mod:`.experts`) carves expert groups out of
each stage's data × context devices: a stage's passes put each MoE layer's dispatch and
combine all-to-alls around its experts' span (:class:`TensorGroup` asks the axis for both:
the all-to-all starts once every copy of the group has reached it, each device's experts
compute for the tokens they received), each step first draws its routing, and the experts'
gradients are reduced over their expert-data groups with the dense ones.

Numerics (the zoo's mlp): :class:`simdist.numerics.hybrid.HybridTrainer`, each stage's
tensor-parallel pairs on its own D × T emulated devices, ≡ one_device with the global
batch; transformers run timing-only. The clock prices worker 0's device class on every
device (mixed clusters are not modelled for hybrid yet).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.memory.accounting import FLOAT32_NBYTES
from simdist.network.lockstep import LockstepCopies
from simdist.step_costs import LayerCost
from simdist.strategies.base import Strategy
from simdist.strategies.context_ring import ContextRing, core_share, kv_block_nbytes
from simdist.strategies.hybrid.experts import ExpertAxis
from simdist.strategies.hybrid.plan import (
    StagePlans,
    context_layers,
    data_bucket_nbytes,
    data_collectives,
    micro_layers,
    overlapped_data_plan,
    send_nbytes,
    stage_plans,
)
from simdist.strategies.pipeline.plan import (
    bounds,
    ideal_bubble,
    partition_auto,
    peak_in_flight,
)
from simdist.strategies.pipeline.strategy import PipelineStrategy
from simdist.strategies.steps import (
    Collective,
    Compute,
    GroupRunner,
    Issue,
    Plan,
    Receive,
    Send,
    collectives_in_order,
    walk,
)
from simdist.strategies.tensor_parallel.plan import device_grad_nbytes, layer_roles

#: The collectives a data group runs after the flush.
OPS: tuple[str, ...] = ("allreduce", "reduce_scatter", "all_gather")

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.numerics.hybrid import HybridTrainer
    from simdist.strategies.sync import SyncState


class HybridStrategy(PipelineStrategy):
    """Data × pipeline × tensor parallelism with ZeRO over data."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Strategy.__init__(self, *args, **kwargs)
        spec = self.scenario.strategy
        sizes = spec.sizes
        self.D, self.T, self.S = sizes["data"], sizes["tensor"], sizes["pipeline"]
        self.C = sizes.get("context", 1)
        self.R, self.M = self.D, spec.micro_batches
        self.schedule: str = spec.schedule
        self.set_chunks(spec.virtual_stages or 1)
        self.remat = False
        self.zero: int = spec.zero
        self.sp: bool = spec.sequence_parallel
        self.sharding = spec.sharding(self.scenario.cluster)
        layers = self.costs.layers
        if len(layers) < self.chunks:
            raise SimdistError(
                f"{self.scenario.name}: strategy hybrid needs the model's per-layer costs and "
                f"at least {self.chunks} layers for {self.chunks} stages; got {len(layers)}"
            )
        model = self.scenario.workload.clock_model.name
        self.roles = layer_roles(model, [layer.name for layer in layers])
        self.gather_whole = model != "mlp"
        self.micro = context_layers(micro_layers(layers, self.M), self.C)
        self.ring = self._context_ring()
        # groups[d][p]: the devices of stage p of copy d, by context rank then tensor rank:
        # CP tensor groups (one without a context axis), tensor_groups[d][p] each apart.
        # Interleaved: p runs over the model chunks, chunk j on stage j mod S's devices.
        self.groups = self.chunk_grid(
            [
                [
                    [self._device(d, p, c, t) for c in range(self.C) for t in range(self.T)]
                    for p in range(self.S)
                ]
                for d in range(self.D)
            ]
        )
        self.tensor_groups = [
            [[group[c * self.T : (c + 1) * self.T] for c in range(self.C)] for group in copy]
            for copy in self.groups
        ]
        # Each device of a stage's group sends its key/value blocks to the device of the
        # next context rank with its tensor rank.
        self.ring_pairs = [
            [
                [
                    (group[c * self.T + t], group[(c + 1) % self.C * self.T + t])
                    for c in range(self.C)
                    for t in range(self.T)
                ]
                for group in copy
            ]
            for copy in self.groups
        ]
        self.grid = [[row[0] for row in copy] for copy in self.groups]
        self.experts = self._expert_axis(spec.mesh.ep)
        self.capacity = float(self.cluster.profile.memory_nbytes)
        self.capacities = [
            min(
                float(self.cluster.profile_of(x).memory_nbytes)
                for copy in self.groups
                for x in copy[s]
            )
            for s in range(self.chunks)
        ]
        self.steps_ops = self._ops()
        self.peaks = [peak_in_flight(ops) for ops in self.steps_ops]
        self.counts = self._partition(spec.partition)
        self.bounds = bounds(self.counts)
        self.memory = self.device_memories()
        self._check_memory()
        self.stage_walks = [self.stage_walk(a, b) for a, b in self.bounds]
        self.send_nbytes = [
            send_nbytes(self.boundary_nbytes(b), self.T, self.sp) for _, b in self.bounds
        ]
        leaves = {path: nbytes for path, _, nbytes in self.costs.param_leaves}
        chunk_shards = [
            device_grad_nbytes(layers[a:b], self.roles[a:b], self.T, leaves) for a, b in self.bounds
        ]
        if self.experts is not None:  # the experts' gradients reduce over their own groups
            chunk_shards = [
                n - self.experts.grad_nbytes(a, b)
                for n, (a, b) in zip(chunk_shards, self.bounds, strict=True)
            ]
        # each stage device's shard: its model chunks' (its stage's without interleaving)
        self.shard_nbytes = [sum(chunk_shards[j] for j in self.chunks_of(s)) for s in range(self.S)]
        self.reductions = [
            data_collectives(LayerCost(f"stage {s}", 0.0, 0.0, n), self.zero, f"stage {s}")
            if self.D * self.C > 1
            else []
            for s, n in enumerate(self.shard_nbytes)
        ]
        # The devices that reduce each (stage, tensor rank)'s gradient shard: its data
        # copies and context ranks (the parameters are replicated over both).
        self.data_groups = [
            [
                [copy[s][c * self.T + t] for copy in self.groups for c in range(self.C)]
                for t in range(self.T)
            ]
            for s in range(self.S)
        ]
        self.reduction_plans = [collectives_in_order(r) for r in self.reductions]
        self.overlap = bool(spec.overlap_grad_reduce) and self.D > 1
        # Under overlap: each stage's data plan and {backward span: the bucket it closes},
        # and the micro-batch of its last backward in a step.
        self.overlapped = [self._overlapped(s) for s in range(self.S)]
        self.last_backward = [
            next(op[1] for op in reversed(ops) if op[0] == "B") for ops in self.steps_ops
        ]
        self.bucket_ready: list[list[Any]] = []
        self.copies_left: list[list[int]] = []
        self.busy_s = 0.0
        self.ring_wait_s: dict[int, float] = {}  # by stage group: waiting for K/V blocks
        self.lockstep = self._lockstep()
        self.held = [[0] * self.S for _ in range(self.D)]
        self.peak_held = [[0] * self.S for _ in range(self.D)]
        self.trainer: HybridTrainer | None = None
        self.state: SyncState | None = None
        if self.workload is not None:
            from simdist.numerics.hybrid import HybridTrainer
            from simdist.strategies.sync import SyncState

            batch = self.scenario.workload.batch_size
            # Interleaved: the numerics cut the same layers into S contiguous stages of V
            # chunks each; the step's arithmetic (micro-batch gradients summed, one update)
            # depends on neither the cut nor the order.
            V = self.V
            stages = [sum(self.counts[k * V : (k + 1) * V]) for k in range(self.S)]
            self.trainer = HybridTrainer(self.workload, sizes, stages, self.M, batch, SyncState)
            self.state = self.trainer.init()

    # -- the plan ------------------------------------------------------------

    def _device(self, d: int, p: int, c: int, t: int) -> Device:
        """The device of the mesh at data ``d``, pipeline ``p``, context ``c``, tensor ``t``."""
        if self.C == 1:
            return self.mesh.at(data=d, pipeline=p, tensor=t)
        return self.mesh.at(data=d, pipeline=p, context=c, tensor=t)

    def _context_ring(self) -> ContextRing | None:
        """The context axis' ring (:mod:`simdist.strategies.context_ring`); None without one.
        A K/V block at the precision of worker 0's device class."""
        if self.C == 1:
            return None
        from simdist.hardware.profiles import ELEMENT_NBYTES
        from simdist.strategies.hybrid.spec import attention_shape

        shape = attention_shape(self.scenario.workload)
        assert shape is not None  # the spec's check refuses a context axis without one
        head_dim = shape.hidden // shape.heads
        element = ELEMENT_NBYTES.get(self.cluster.profile.precision, 4)
        batch = self.scenario.workload.batch_size / self.M
        kv = kv_block_nbytes(
            shape.seq_len, self.C, batch, shape.kv_heads, head_dim, self.T, element
        )
        share = core_share(shape.seq_len, shape.hidden, shape.heads, shape.kv_heads)
        return ContextRing(self.C, kv, share)

    def _expert_axis(self, expert: int) -> ExpertAxis | None:
        """The expert axis (:mod:`.experts`); None without one."""
        return None if expert == 1 else ExpertAxis(self, expert)

    def stage_walk(self, first: int, stop: int) -> StagePlans:
        """A micro-batch's forward and backward on the tensor group of layers [first, stop)
        (and its context ring, and its MoE layers' all-to-alls with an expert axis)."""
        if self.experts is not None:
            return self.experts.stage_walk(first, stop)
        return stage_plans(
            self.micro, self.roles, first, stop, self.T, self.sp, self.gather_whole, self.ring
        )

    def boundary_nbytes(self, stop: int) -> int:
        """Bytes of one micro-batch's activation leaving a stage that ends before layer
        ``stop``, on one context rank (1/CP of the sequence)."""
        return round(self.costs.layers[stop - 1].output_nbytes / (self.M * self.C))

    def _overlapped(self, s: int) -> tuple[Plan, dict[int, int]]:
        """Stage ``s``'s data reduction overlapping its last backward (none without
        ``overlap_grad_reduce``): each backward span's share of the device's gradient
        bytes, bucketed (:func:`.plan.overlapped_data_plan`)."""
        if not self.overlap:
            return Plan([], []), {}
        layers = self.costs.layers
        leaves = {path: nbytes for path, _, nbytes in self.costs.param_leaves}
        spans = self.stage_walks[s].backward_spans
        span_nbytes = [
            device_grad_nbytes(
                [layers[i] for i in span], [self.roles[i] for i in span], self.T, leaves
            )
            for span in spans
        ]
        spec = self.scenario.strategy
        grad_element = FLOAT32_NBYTES if spec.grad_reduce == "fp32" else self.costs.element_nbytes
        cap = data_bucket_nbytes(self.zero, self.D, grad_element)
        return overlapped_data_plan(span_nbytes, self.zero, cap, f"stage {s}")

    def span_ready(self, s: int, span: int, copies: int) -> None:
        """Backward span ``span`` of stage ``s``'s last micro-batch has ended on ``copies``
        more copies: the bucket it closes is ready once it has on every copy."""
        b = self.overlapped[s][1].get(span)
        if b is None:
            return
        self.copies_left[s][b] -= copies
        if self.copies_left[s][b] == 0:
            self.bucket_ready[s][b].succeed()

    def _partition(self, partition: Any) -> tuple[int, ...]:
        n = len(self.costs.layers)
        if partition == "auto":
            try:
                return partition_auto(n, self.chunks, self.stage_cost, self.fits)
            except SimdistError:  # nothing fits: the fastest one, refused naming a device
                return partition_auto(n, self.chunks, self.stage_cost, self.keeps_pairs_of)
        counts = tuple(int(k) for k in partition)
        if len(counts) != self.chunks or sum(counts) != n:
            raise SimdistError(
                f"{self.scenario.name}: strategy.partition {list(counts)} must give {self.chunks} "
                f"layer counts adding up to the model's {n} layers, e.g. partition: auto"
            )
        for s, (a, b) in enumerate(bounds(counts)):
            if not self.keeps_pairs(a, b):
                raise SimdistError(
                    f"{self.scenario.name}: strategy.partition {list(counts)} cuts a "
                    f"column/row-parallel pair at stage {s}'s edge; cut between pairs, e.g. "
                    "partition: auto"
                )
        return counts

    def keeps_pairs_of(self, s: int, first: int, stop: int) -> bool:
        """:meth:`keeps_pairs` for stage ``s`` (any stage)."""
        del s
        return self.keeps_pairs(first, stop)

    def keeps_pairs(self, first: int, stop: int) -> bool:
        """Whether layers [first, stop) hold whole column/row pairs (the mlp's)."""
        return self.roles[first] != "row" and self.roles[stop - 1] != "column"

    def stage_cost(self, s: int, first: int, stop: int) -> float:
        """A micro-batch's forward + backward on the tensor group (compute shares and tensor
        collectives' closed forms) + sending its boundary activation."""
        group = self.tensor_groups[0][s][0]
        forward, backward, _ = self.stage_walk(first, stop)
        total = 0.0
        for plan in (forward, backward):
            collectives = plan.collectives
            for op in plan.program:
                if isinstance(op, Compute):
                    total += op.seconds
                elif isinstance(op, Issue) and collectives[op.index].op != "all_to_all":
                    # (an expert axis's all-to-alls: sized by each step's routing, the same
                    # on every stage of as many MoE layers)
                    c = collectives[op.index]
                    total += self.net.collective_s(c.op, group, c.nbytes, self._algo(c.op))
        if s < self.chunks - 1:
            nbytes = send_nbytes(self.boundary_nbytes(stop), self.T, self.sp)
            total += self.send_s(s, nbytes)
        return total

    def stage_update_s(self, device: Device, s: int) -> float:
        """Seconds of ``device``'s optimizer step over stage ``s``'s parameters; with an
        expert axis its dense ones and its share of the experts (:mod:`.experts`)."""
        if self.experts is None:
            return super().stage_update_s(device, s)
        whole = self._layer_sum("param_nbytes", 0, len(self.costs.layers))
        shards = self.sharding.optimizer
        share = self.experts.update_share(s, whole, shards)
        return self.optimizer_step_s(device, share, 1)

    def send_s(self, s: int, nbytes: float) -> float:
        """Seconds to move ``nbytes`` from stage ``s`` to ``s + 1`` (rank 0 of copy 0)."""
        a, b = self.groups[0][s][0], self.groups[0][s + 1][0]
        links = self.scenario.cluster.links
        if a.host == b.host:
            return links.intra_host.latency_s + nbytes / links.intra_host.bandwidth_Bps
        return 2 * links.network.latency_s + nbytes / links.network.bandwidth_Bps

    def fits(self, s: int, first: int, stop: int) -> bool:
        """Whether layers [first, stop) keep the mlp's pairs and fit stage ``s``'s devices."""
        return self.keeps_pairs(first, stop) and super().fits(s, first, stop)

    _stage_label = "hybrid"
    _stage_holder = "each device of its tensor group"
    _memory_advice = (
        "more stages, a larger tensor group, zero: 1 or 2, fewer micro-batches in flight or "
        "a smaller batch"
    )

    def _stage_devices(self, s: int) -> list[Device]:
        """Every device of stage ``s``: its tensor group in every data-parallel copy."""
        return [x for copy in self.groups for x in copy[s]]

    def _algo(self, kind: str) -> str:
        return self.scenario.strategy.all_reduce if kind == "allreduce" else "ring"

    # -- the clock -----------------------------------------------------------

    def _lockstep(self) -> LockstepCopies | None:
        """The data copies as lock-step copies (:mod:`simdist.network.lockstep`), when they
        are: no variability and no stragglers (every device's pace and factor 1), messages
        that are one transfer each, fair sharing (:meth:`_send_group` says why), and each
        copy's stage-to-stage routes and tensor collectives on links of its own, alike
        copy 0's. Then a step's pipelines run for
        the leading copies alone, each standing for its followers (:meth:`process`); the data
        reduction after the flush runs on every copy. None otherwise (a data reduction
        overlapping the backward crosses the copies while they run, and a context axis's
        ring runs between them): every copy runs."""
        if (
            self.D == 1
            or self.C > 1
            or self.experts is not None
            or self.variability
            or self.stragglers
            or not self.net.bare_messages
        ):
            return None
        if self.overlap:
            return None
        collectives = sorted(
            {(c.op, c.nbytes) for w in self.stage_walks for p in w.phases for c in p.collectives}
        )
        traffic = [
            [
                *(
                    self.net.route(a, b)
                    for s in range(self.chunks - 1)
                    for near, far in ((copy[s], copy[s + 1]), (copy[s + 1], copy[s]))
                    for a, b in zip(near, far, strict=True)
                ),
                *(
                    self.net.collective_links(kind, group, nbytes, self._algo(kind))
                    for group in copy
                    for kind, nbytes in (collectives if self.T > 1 else ())
                ),
            ]
            for copy in self.groups
        ]
        if any(link.sharing != "fair" for route in traffic[0] for link in route):
            return None  # fifo: a group's T messages queue, arriving one at a time
        every = [*self.net.topology.links(), *self.net.transport.cpu.values()]
        copies = LockstepCopies.of(traffic, every)
        if copies is None:
            return None
        # Per leader and stage: its followers' tensor groups, and the host and device columns
        # of every device it stands for (kept here: the recorder keeps only the last few).
        self.follower_groups = {
            r: [[self.groups[f][s] for f in followers] for s in range(self.chunks)]
            for r, followers in copies.leaders.items()
        }
        self.span_columns = {
            r: [
                self.recorder.device_columns(
                    [x for c in (r, *followers) for x in self.groups[c][s]]
                )
                for s in range(self.chunks)
            ]
            for r, followers in copies.leaders.items()
        }
        return copies

    def build_mesh(self) -> Mesh[Device]:
        """D × P × T devices in the spec's placement (tensor innermost by default)."""
        return self.scenario.strategy.mesh_of(list(self.cluster.devices))

    @cached_property
    def training_devices(self) -> list[Device]:
        """Every device of the mesh computes."""
        return list(self.mesh.devices)

    def _stage(  # type: ignore[override]
        self,
        r: int,
        s: int,
        ops: Sequence[tuple[str, int]],
        arrivals: dict,
        step: int,
        lead: bool = False,
    ) -> Generator[Any, Any, None]:
        """Stage ``s`` of copy ``r`` runs its passes (:func:`~.pipeline.plan.stage_plan`):
        wait for all T inputs, walk the tensor group's plan, send on rank to rank.
        ``lead``: copy ``r`` leads lock-step copies (:meth:`process`), whose rows are
        recorded with its own."""
        plan = self.stage_plan(s, ops)
        yield from walk(plan, self.stage_runner(r, s, arrivals, step, lead))

    def stage_runner(
        self, r: int, s: int, arrivals: dict, step: int, lead: bool = False
    ) -> StageGroup:
        """Stage (chunk) ``s``'s tensor group of copy ``r`` as the runner of its passes."""
        return StageGroup(self, r, s, arrivals, step, lead)

    def _events(self) -> list[Any]:
        return [self.env.event() for _ in range(self.T * self.C)]

    def _send_group(
        self,
        r: int,
        s: int,
        to: int,
        kind: str,
        m: int,
        step: int,
        detail: str,
        arrivals: dict,
        lead: bool = False,
    ) -> None:
        """Rank t of stage ``s`` sends rank t of stage ``to`` micro-batch ``m``'s activation
        (or its gradient), every rank at once.

        ``lead``: copy ``r`` leads lock-step copies. Its T messages start together on
        alike routes with the same bytes and arrive together, in one SimPy step (fair
        sharing gives them the same rate throughout, and their arrivals after the same
        latency share one event); every follower's T messages would arrive in that step
        too, right after them. So once the T have arrived, each follower's are recorded
        as they went, follower after follower."""
        ready = arrivals.setdefault((r, to, kind, m), self._events())
        nbytes = self.send_nbytes[min(s, to)]
        pairs = list(zip(self.groups[r][s], self.groups[r][to], strict=True))
        moves: list[Any] = []
        then = None
        if lead:
            asked = self.env.now
            landed: list[tuple[int, float, float]] = []

            def arrived(t: int) -> None:
                landed.append((t, moves[t].start_s, self.env.now))
                if len(landed) < self.T:
                    return
                for f in self.lockstep.leaders[r]:  # type: ignore[union-attr]
                    copy = self.groups[f]
                    for u, start_s, arrival_s in landed:
                        self.net.send_rows(
                            copy[s][u],
                            copy[to][u],
                            nbytes,
                            asked,
                            start_s,
                            arrival_s,
                            step=step,
                            detail=detail,
                        )

        for t, (src, dst) in enumerate(pairs):
            if lead:
                then = partial(arrived, t)
            moves.append(
                self.net.send(src, dst, nbytes, step=step, detail=detail, done=ready[t], then=then)
            )

    def lead_span(
        self, r: int, s: int, seconds: float, step: int, detail: str
    ) -> Generator[Any, Any, None]:
        """:meth:`span` of stage ``s``'s group of copy ``r`` and of its followers', every
        pace and factor 1 (lock-step copies): the same rows as one block, the same sum of
        busy time (added device by device, in the same order)."""
        if seconds <= 0:
            return
        start = self.env.now
        scaled = seconds * (1.0 * 1.0)
        yield self.env.timeout(scaled)
        hosts, names = self.span_columns[r][s]
        self.recorder.events(start, start + seconds * 1.0, hosts, names, "compute", 0, step, detail)
        busy = self.busy_s
        for _ in range(len(names)):
            busy += scaled
        self.busy_s = busy

    def reduce(self, step: int) -> Generator[Any, Any, None]:
        """Every (stage, tensor rank) data group runs its stage's collectives in order; all
        the groups at once."""
        if self.D * self.C == 1:
            return
        runs = [
            self.env.process(self._reduce_group(self.data_groups[s][t], self.reductions[s], step))
            for s in range(self.S)
            for t in range(self.T)
            if self.reductions[s]
        ]
        if self.experts is not None:  # each stage's expert-data groups, at the same time
            for s in range(self.S):
                moves = self.experts.reductions(s, self.zero)
                runs += [
                    self.env.process(self._reduce_group(group, moves, step))
                    for group in self.experts.data_groups(s)
                    if moves
                ]
        yield self.env.all_of(runs)

    def overlapped_reductions(self, step: int) -> list[Any]:
        """Under ``overlap_grad_reduce``: every (stage, tensor rank) data group's reduction
        of step ``step``, started now, each bucket waiting for its gradients (none else)."""
        if not self.overlap:
            return []
        plans = [plan for plan, _ in self.overlapped]
        self.bucket_ready = [[self.env.event() for _ in plan.collectives] for plan in plans]
        self.copies_left = [[self.D] * len(plan.collectives) for plan in plans]
        return [
            self.env.process(
                walk(
                    plans[s],
                    DataGroup(
                        self, [copy[s][t] for copy in self.groups], step, self.bucket_ready[s]
                    ),
                )
            )
            for s in range(self.S)
            for t in range(self.T)
            if plans[s].collectives
        ]

    def _reduce_group(
        self, group: list[Device], reductions: list[Collective], step: int
    ) -> Generator[Any, Any, None]:
        algo = self.scenario.strategy.all_reduce
        for c in reductions:
            yield self._collective(c, group, algo, step)

    def _collective(self, c: Collective, group: list[Device], algo: str, step: int) -> Any:
        return self.net.collective(
            c.op,
            group,
            c.nbytes,
            algo if c.op == "allreduce" else "ring",
            step=step,
            detail=c.detail,
        )

    def process(self) -> Generator[Any, Any, None]:
        for step in range(self.total_steps):
            start = self.env.now
            arrivals: dict[tuple, Any] = {}
            if self.experts is not None:
                self.experts.route(step)
            # Lock-step copies (see _lockstep): the leaders alone, each for its followers.
            lead = self.lockstep is not None and self.lockstep.in_step()
            copies = self.lockstep.leaders if lead else range(self.D)  # type: ignore[union-attr]
            run = self._device_chunks if self.V > 1 else self._stage
            stages = [
                self.env.process(run(r, s, self.steps_ops[s], arrivals, step, lead))
                for r in copies
                for s in range(self.S)
            ]
            if lead:
                self.lockstep.mark()  # type: ignore[union-attr]
            reductions = self.overlapped_reductions(step)
            yield self.env.all_of(stages)
            if lead:
                self.lockstep.follow()  # type: ignore[union-attr]
            if self.overlap:
                yield self.env.all_of(reductions)
            else:
                yield from self.reduce(step)
            yield from self.stage_optimizer_step(step)
            loss = None
            if self.trainer is not None:
                self.state, loss = self.trainer.update(self.state, self.trainer.batch(step))
            if not self.end_step(start, step + 1, loss, lambda: self.final_params):
                return

    @property
    def final_params(self) -> Any | None:
        if self.trainer is None or self.state is None:
            return None
        return self.workload.variables(self.trainer.params(self.state), self.state.model_state)

    # -- what summary.json says ----------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The layout, the bubble, the tensor, pipeline and data traffic, the memory."""
        now = self.env.now
        total = len(self.training_devices) * now
        names = [layer.name for layer in self.costs.layers]
        group = self.tensor_groups[0][0][0]
        tensor = [
            c
            for w in self.stage_walks
            for p in w.phases
            for c in p.collectives
            if c.op != "all_to_all"
        ]
        spec = self.scenario.strategy
        out = {
            "hybrid": {
                "mesh": dict(self.mesh.shape),
                "zero": self.zero,
                "schedule": self.schedule,
                "micro_batches": self.M,
                "sequence_parallel": self.sp,
                "partition": list(self.counts),
                "stage_layers": [names[a:b] for a, b in self.bounds],
                "stage_devices": [
                    [x.name for copy in self.groups for x in copy[s]] for s in range(self.S)
                ],
                "placement": list(spec.order if self.C > 1 else spec.placement),
            },
            "bubble_fraction": (total - self.busy_s) / total if total > 0 else None,
            "bubble_fraction_ideal": ideal_bubble(self.S, self.M, self.V),
            "peak_in_flight_per_stage": list(self.peak_held[0]),
            "tensor_collectives_per_micro_batch": len(tensor),
            "tensor_comm_s_per_micro_batch": sum(
                self.net.collective_s(c.op, group, c.nbytes, self._algo(c.op)) for c in tensor
            ),
            "stage_send_nbytes_per_micro_batch": self.send_nbytes[: self.chunks - 1],
            "data_nbytes_per_device_per_step": [
                {op: sum(c.nbytes for c in reductions if c.op == op) for op in OPS}
                for reductions in self.reductions
            ],
            "device_memory_bytes": self.capacity,
            "memory_per_device": {
                x.name: self.memory[s].as_dict()
                for copy in self.groups
                for s in range(self.S)
                for x in copy[s]
            },
            "peak_memory_bytes": {
                x.name: self.memory[s].total
                for copy in self.groups
                for s in range(self.S)
                for x in copy[s]
            },
        }
        if self.V > 1:  # the partition and stage_layers are per model chunk
            out["hybrid"]["virtual_stages"] = self.V  # type: ignore[index]
        if self.ring is not None:
            out["context"] = self.context_summary()
            # report.md's rows for the ring (simdist.report.table_figures' contract)
            ring = f"context ring ({self.C} devices)"
            busiest = "context.busiest_nbytes_per_device_per_step"
            out["key_numbers"] = [
                [f"{ring}: K/V block", "context.kv_block_nbytes", "size"],
                [f"{ring}: per device and step (busiest stage)", busiest, "size"],
                [f"{ring}: not hidden behind attention", "context.exposed_s_per_step", "duration"],
            ]
        if self.experts is not None:
            experts = self.experts.summary()
            out["key_numbers"] = out.get("key_numbers", []) + experts.pop("key_numbers")
            out.update(experts)
        return out

    def context_summary(self) -> dict[str, Any]:
        """The context axis' ring traffic: a K/V block's bytes, the ring's sends and bytes
        per device of each stage and micro-batch, by phase, and every device's in a step
        (the ``context ring`` rows of links.csv and of the timeline)."""
        ring = self.ring
        assert ring is not None
        per_stage = []
        for w in self.stage_walks:
            sends = [op for plan in w.phases for op in plan.program if isinstance(op, Send)]
            per_stage.append(
                {
                    phase: [op.nbytes for op in sends if op.tag[1] == phase]
                    for phase in ("forward", "backward")
                }
            )
        devices = self.D * self.C * self.T  # of each stage
        steps = max(1, self.steps_done)
        return {
            "size": self.C,
            "kv_block_nbytes": ring.kv_nbytes,
            "core_share": ring.share,
            "ring_steps_per_attention_layer": self.C,
            "sends_per_device_per_micro_batch": [
                {phase: len(nbytes) for phase, nbytes in stage.items()} for stage in per_stage
            ],
            "nbytes_per_device_per_micro_batch": [
                {phase: sum(nbytes) for phase, nbytes in stage.items()} for stage in per_stage
            ],
            "nbytes_per_device_per_step": [
                sum(map(sum, stage.values())) * self.M for stage in per_stage
            ],
            "busiest_nbytes_per_device_per_step": max(
                sum(map(sum, stage.values())) * self.M for stage in per_stage
            ),
            "nbytes_per_step": sum(
                sum(map(sum, stage.values())) * self.M * devices for stage in per_stage
            ),
            # the longest any stage's group waited for its blocks after computing its ring
            # steps: the ring's time not hidden behind attention
            "exposed_s_per_step": max(self.ring_wait_s.values(), default=0.0) / steps,
        }


class TensorGroup(GroupRunner):
    """A stage's tensor group walking one micro-batch's pass (compute shares, collectives
    between); ``lead``: (copy, stage) of a group that leads lock-step copies, whose spans
    and collectives stand for its followers' (:meth:`HybridStrategy.lead_span`).

    With a context axis, ``group`` is the stage's CP tensor groups (``parts``), walking in
    lock-step: each tensor collective runs on every one of them, and each ring step's
    key/value blocks go from every device to its ring successor (``pairs``)."""

    def __init__(
        self,
        strategy: HybridStrategy,
        group: list[Device],
        step: int,
        label: str,
        lead: tuple[int, int] | None,
        parts: list[list[Device]] | None = None,
        pairs: list[tuple[Device, Device]] | None = None,
        ended: Callable[[int], None] | None = None,
        where: tuple[int, int, int, str] | None = None,
    ) -> None:
        super().__init__(strategy, group, step, strategy.scenario.strategy.all_reduce, label)
        self.hybrid = strategy
        self.lead = lead
        self.followers = None if lead is None else strategy.follower_groups[lead[0]][lead[1]]
        self.parts = parts
        self.pairs = pairs
        self.messages: dict[Any, list[Any]] = {}
        #: Told each compute span's index as it ends (a data reduction overlapping it).
        self.ended = ended
        #: (copy, stage or model chunk, micro-batch, F or B) of the pass, with an expert axis.
        self.where = where

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        experts = self.hybrid.experts
        if self.where is not None and experts is not None and experts.owns(self.where, op):
            yield from experts.compute(self, op, self.where)
        elif self.lead is None:
            yield from super().compute(op)
        else:
            detail = f"{self.label} {op.detail}"
            yield from self.hybrid.lead_span(*self.lead, op.seconds, self.step, detail)
        if self.ended is not None:
            self.ended(op.unit)

    def computed(self, seconds: float) -> None:
        """The bubble counts every device's busy time."""
        self.hybrid.busy_s += seconds

    def start(self, index: int, c: Collective) -> Any:
        """Collective ``c`` over the group (and its lock-step followers' groups); with a
        context axis over each of its tensor groups, done when the last is."""
        net = self.hybrid.net
        if c.op == "all_to_all" and self.where is not None and self.hybrid.experts is not None:
            return self.hybrid.experts.exchange(self, index, c, self.where)
        if self.parts is None:
            return net.collective(
                c.op,
                self.group,
                c.nbytes,
                self.algorithm_of(c.op),
                step=self.step,
                detail=c.detail,
                copies=self.followers,
            )
        algo = self.algorithm_of(c.op)
        runs = [
            net.collective(c.op, part, c.nbytes, algo, step=self.step, detail=c.detail)
            for part in self.parts
        ]
        return self.env.all_of(runs)

    def send(self, op: Send) -> None:
        """A ring step's key/value blocks (:mod:`simdist.strategies.context_ring`): every
        device sends its ring successor ``op.nbytes``."""
        if self.pairs is None:
            raise TypeError(f"a tensor group without a context axis sends nothing; got {op}")
        net = self.hybrid.net
        self.messages[op.tag] = [
            net.send(src, dst, op.nbytes, step=self.step, detail=op.detail).done
            for src, dst in self.pairs
        ]

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        """Wait until every device's block of the ring step has arrived (the wait counted
        per stage group: :meth:`HybridStrategy.context_summary`)."""
        start = self.env.now
        yield self.env.all_of(self.messages.pop(op.tag))
        waits = self.hybrid.ring_wait_s
        key = id(self.group)
        waits[key] = waits.get(key, 0.0) + (self.env.now - start)


class DataGroup(GroupRunner):
    """A (stage, tensor rank) data group reducing its gradients while the stage's last
    backward runs (the runner of :func:`~.plan.overlapped_data_plan`'s walk): its
    ``Compute(b)`` waits until bucket b is ready on every copy
    (:meth:`HybridStrategy.span_ready`); its collectives run over the group."""

    def __init__(
        self, strategy: HybridStrategy, group: list[Device], step: int, ready: list[Any]
    ) -> None:
        super().__init__(strategy, group, step, strategy.scenario.strategy.all_reduce)
        self.ready = ready

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Wait until bucket ``op.unit``'s gradients are ready on every copy."""
        yield self.ready[op.unit]


class StageGroup:
    """Stage ``s``'s tensor group of copy ``r`` carrying its passes out (the runner of
    :func:`~simdist.strategies.steps.walk` for :func:`~.pipeline.plan.stage_plan`): a pass
    is the walk of the micro-batch's tensor-parallel plan (:class:`TensorGroup`), its
    messages T sends rank to rank (:meth:`HybridStrategy._send_group`); ``lead``: the
    group leads lock-step copies."""

    def __init__(
        self,
        strategy: HybridStrategy,
        r: int,
        s: int,
        arrivals: dict,
        step: int,
        lead: bool,
    ) -> None:
        self.h, self.env = strategy, strategy.env
        self.r, self.s, self.arrivals, self.step, self.lead = r, s, arrivals, step, lead
        # the copies whose micro-batches this group's passes stand for
        self.copies = (r, *strategy.lockstep.leaders[r]) if lead else (r,)  # type: ignore[union-attr]

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Micro-batch ``op.unit``'s forward (``F``) or backward (``B``) on the group."""
        h, s = self.h, self.s
        forward, backward, _ = h.stage_walks[s]
        plan = forward if op.phase == "F" else backward
        lead = (self.r, s) if self.lead else None
        ended = None
        if h.overlap and op.phase == "B" and op.unit == h.last_backward[s]:
            ended = partial(h.span_ready, s, copies=len(self.copies))
        group = h.groups[self.r][s]
        where = None if h.experts is None else (self.r, s, op.unit, op.phase)
        if h.C == 1:
            runner = TensorGroup(h, group, self.step, op.detail, lead, ended=ended, where=where)
        else:
            parts, pairs = h.tensor_groups[self.r][s], h.ring_pairs[self.r][s]
            runner = TensorGroup(
                h, group, self.step, op.detail, lead, parts, pairs, ended, where=where
            )
        yield from walk(plan, runner)
        for c in self.copies:
            h._hold(c, s % h.S, +1 if op.phase == "F" else -1)

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        """Wait for all T messages of pass ``op.tag``."""
        inputs = self.arrivals.setdefault((self.r, self.s, *op.tag), self.h._events())
        yield self.env.all_of(inputs)

    def send(self, op: Send) -> None:
        """Rank t to rank t of stage ``op.peer``."""
        kind, m = op.tag
        h, r, s = self.h, self.r, self.s
        h._send_group(r, s, op.peer, kind, m, self.step, op.detail, self.arrivals, self.lead)

    def issued_s(self) -> float:
        return self.env.now

    def start(self, index: int, c: Collective) -> Any:
        raise TypeError(f"a stage's collectives are its tensor group's; got {c}")

    def waited(self, span: tuple[float, float]) -> None:
        del span

    def finish(self) -> Generator[Any, Any, None]:
        """Nothing left: the stage's last pass has ended."""
        yield from ()
