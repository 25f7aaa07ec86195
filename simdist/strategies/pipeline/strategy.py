"""The pipeline strategy: S stages on S devices (× R copies), micro-batches flowing through.

Model parallelism places contiguous runs of layers (stages) on different devices; pipeline
parallelism keeps them busy by splitting each batch into M micro-batches (GPipe, Huang et
al. 2019; PipeDream, Narayanan et al. 2019). Stage ``s`` of pipeline copy ``r`` runs on the
cluster's device ``r·S + s`` (devices in host order), so a stage boundary crosses the
intra-host link or the network depending on where it falls.

On the clock: the forward and backward of micro-batch ``m`` on a stage are compute spans
labelled ``F<m>`` / ``B<m>`` (``R<m>``: the forward recomputed before the backward, with
``rematerialization``); activations go forward and activation gradients backward with
``net.send`` at their real byte sizes (the profile's output bytes of the stage's last layer,
for one micro-batch). The schedules are :func:`~.plan.stage_ops`'s: ``gpipe`` all
forwards then all backwards and a flush per step; ``1f1b`` one forward one backward with at
most S micro-batches in flight per stage, flushed per step; ``pipedream`` the same order
without any flush, across steps; ``interleaved`` (``virtual_stages: V``) Megatron's
interleaved 1F1B: the model cut into S·V chunks, chunk ``j`` on stage ``j mod S``'s device,
each device walking its chunks' passes in :func:`~.plan.interleaved_ops`'s order, every
chunk boundary a message (the last stage's device sends on to the first's between rounds).
With ``replicas: R`` (data parallelism over S×R devices) each
stage's gradient is all-reduced among its R copies after the flush.

A micro-batch's times are the layer times of the per-replica batch divided by M (each layer's
cost taken as linear in the batch), except the roofline's fixed launch cost of each layer pass
(:attr:`~simdist.step_costs.LayerCost.launch_s`), which every micro-batch pays in full:
small micro-batches cost more in total than the batch at once. ``bubble_fraction`` in
summary.json is the share of the stage devices' time not spent computing; for equal stages
and free links gpipe and 1f1b give ``(S − 1) / (M + S − 1)``. Memory is checked before the
run (:func:`~.plan.stage_memory` against the device profile's capacity): a stage that does
not fit stops the scenario with an error naming the stage, what it needs and what the
device has.

Mixed clusters (hosts listed with different device profiles): each stage device runs its
micro-batches at its own profile's speed, so a slow device makes its stage the bottleneck
(the auto partition balances stage costs on copy 0's devices), and a stage must fit the
smallest memory among the devices that run it.

pipedream's updates are counted on the clock too: each stage's weight version, the version a
micro-batch's forward used, and each update's staleness go into the ``stage_updates`` table
(``stage_updates.csv``, drawn as ``pipeline_staleness.png``) and, per stage, into
summary.json's ``staleness_per_stage``; summary.json's ``memory_per_device`` is drawn as
``memory.png``.

Numerics: :mod:`simdist.numerics.stages` (gpipe and 1f1b ≡ one_device on the global batch;
pipedream with weight stashing and per-stage weight versions); gpipe and 1f1b seeds computed
together, as lanes of the same stage programs, by :mod:`.batched`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from functools import cached_property
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from simdist.errors import SimdistError
from simdist.hardware.mesh import Mesh
from simdist.memory.accounting import DeviceMemory, ReplicaLayers, StagedReplica, model_tensors
from simdist.step_costs import LayerCost
from simdist.strategies.base import Strategy
from simdist.strategies.layer_step import span_seconds
from simdist.strategies.pipeline.batched import DeferredPipeline
from simdist.strategies.pipeline.fit import chunk_memories
from simdist.strategies.pipeline.plan import (
    bounds,
    ideal_bubble,
    interleaved_ops,
    partition_auto,
    peak_in_flight,
    stage_ops,
    stage_plan,
)
from simdist.strategies.reserved_rows import DEFERRED
from simdist.strategies.steps import Collective, Compute, Plan, Receive, Send, walk
from simdist.units import format_size

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device
    from simdist.numerics.stages import PipeDreamTrainer, PipelineTrainer
    from simdist.strategies.sync import SyncState


class PipelineStrategy(Strategy):
    """S stages on S devices (× R copies): micro-batches, schedules, flushes, memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = self.scenario.strategy
        self.S, self.M, self.R = spec.stages, spec.micro_batches, spec.pipeline_replicas
        self.schedule: str = spec.schedule
        self.remat: bool = spec.rematerialization
        self.set_chunks(spec.virtual_stages or 1)
        layers = self.costs.layers
        if len(layers) < self.chunks:
            raise SimdistError(
                f"{self.scenario.name}: strategy pipeline needs the model's per-layer costs and "
                f"at least {self.chunks} layers for {self.chunks} stages; got {len(layers)}"
            )
        # Copy r's stages, in order: copy r's stage s runs on device r·S + s (interleaved:
        # model chunk j on stage j mod S's device).
        self.grid = self.chunk_grid([list(row) for row in self.mesh.groups("pipeline")])
        self.capacity = float(self.cluster.profile.memory_nbytes)
        # Mixed clusters: a stage must fit the smallest device it runs on (in any copy).
        self.capacities = [
            min(float(self.cluster.profile_of(row[s]).memory_nbytes) for row in self.grid)
            for s in range(self.chunks)
        ]
        self.steps_ops = self._ops()
        self.peaks = [peak_in_flight(ops) for ops in self.steps_ops]
        if spec.partition == "auto":
            self.counts = partition_auto(len(layers), self.chunks, self.stage_cost, self.fits)
        else:
            self.counts = tuple(int(n) for n in spec.partition)
            if sum(self.counts) != len(layers):
                raise SimdistError(
                    f"{self.scenario.name}: strategy.partition {list(self.counts)} covers "
                    f"{sum(self.counts)} layers; the model has {len(layers)} "
                    f"({', '.join(layer.name for layer in layers)})"
                )
        self.bounds = bounds(self.counts)
        self.memory = self.device_memories()
        self._check_memory()
        self.forward_s = [self._micro(a, b, "forward_s") for a, b in self.bounds]
        self.backward_s = [self._micro(a, b, "backward_s") for a, b in self.bounds]
        # Each stage device's own (forward_s, backward_s) per micro-batch: its device class's
        # layer times (the same as copy 0's on a homogeneous cluster).
        self.stage_s = [
            [
                (
                    self._micro(a, b, "forward_s", self.device_costs(row[s]).layers),
                    self._micro(a, b, "backward_s", self.device_costs(row[s]).layers),
                )
                for s, (a, b) in enumerate(self.bounds)
            ]
            for row in self.grid
        ]
        self.send_nbytes = [self.boundary_nbytes(b) for _, b in self.bounds]
        self.stage_grad_nbytes = [sum(x.grad_nbytes for x in layers[a:b]) for a, b in self.bounds]
        # Each stage device's gradient bytes: its model chunks' (its stage's without
        # interleaving).
        self.device_grad_nbytes = [
            sum(self.stage_grad_nbytes[j] for j in self.chunks_of(s)) for s in range(self.S)
        ]
        self.busy_s = 0.0
        self.held = [[0] * self.S for _ in range(self.R)]
        self.peak_held = [[0] * self.S for _ in range(self.R)]
        # pipedream on the clock: each stage's weight version, the version each in-flight
        # micro-batch's forward used, and every update's staleness (the stage_updates table).
        self.versions = [0] * self.S
        self.forward_version: list[dict[int, int]] = [{} for _ in range(self.S)]
        self.update_staleness: list[list[int]] = [[] for _ in range(self.S)]
        self.trainer: PipelineTrainer | PipeDreamTrainer | None = None
        self.state: SyncState | None = None
        if self.workload is not None:
            self._init_numerics()

    # -- the plan ------------------------------------------------------------

    def set_chunks(self, virtual_stages: int) -> None:
        """Model chunks per device (``V``; 1 but for the interleaved schedule) and in all
        (``chunks`` = S·V). Chunk ``j`` runs on stage ``j mod S``'s devices, so everything
        kept per stage of the pipeline (its layers, times, sends) is kept per chunk, and a
        device's share is the sum of its chunks' (:meth:`chunks_of`)."""
        self.V = int(virtual_stages)
        self.chunks = self.S * self.V

    def chunk_grid(self, rows: list[list[Any]]) -> list[list[Any]]:
        """Each copy's row of per-stage items (devices, groups) per model chunk: chunk ``j``
        takes stage ``j mod S``'s (the rows as they are without interleaving)."""
        if self.V == 1:
            return rows
        return [[row[j % self.S] for j in range(self.chunks)] for row in rows]

    def chunks_of(self, s: int) -> range:
        """The model chunks that stage ``s``'s devices hold: ``s, S + s, ...``."""
        return range(s, self.chunks, self.S)

    def _ops(self) -> list[list[Any]]:
        """Each stage's ops of one step (gpipe, 1f1b), of the whole run (pipedream), or
        each device's passes through its chunks (interleaved, :func:`~.plan.interleaved_ops`)."""
        if self.schedule == "interleaved":
            return interleaved_ops(self.S, self.V, self.M)
        n = self.M * self.total_steps if self.schedule == "pipedream" else self.M
        return stage_ops(self.schedule, self.S, n)

    def _micro(
        self, first: int, stop: int, field: str, costs: Sequence[LayerCost] | None = None
    ) -> float:
        """One micro-batch's ``forward_s`` / ``backward_s`` through layers ``[first, stop)``:
        each layer's batch time less its launch cost, divided by M, plus the launch cost
        (every layer pass of every micro-batch launches its kernels). ``costs``: a device
        class's own layer costs (default: worker 0's)."""
        layers = self.costs.layers if costs is None else costs

        def micro_s(x: LayerCost) -> float:
            return (getattr(x, field) - x.launch_s) / self.M + x.launch_s

        return span_seconds(layers, [(first, stop)], micro_s)[0]

    @property
    def micro_examples(self) -> int:
        """Examples in one micro-batch."""
        return self.scenario.workload.batch_size // self.M

    def boundary_nbytes(self, stop: int) -> int:
        """Bytes of one micro-batch's activation leaving a stage that ends before layer ``stop``."""
        return round(self.costs.layers[stop - 1].output_nbytes / self.M)

    def send_s(self, s: int, nbytes: float) -> float:
        """Seconds to move ``nbytes`` from stage (chunk) ``s`` to ``s + 1`` on free links."""
        a, b = self.grid[0][s], self.grid[0][s + 1]
        links = self.scenario.cluster.links
        if a.host == b.host:
            return links.intra_host.latency_s + nbytes / links.intra_host.bandwidth_Bps
        return 2 * links.network.latency_s + nbytes / links.network.bandwidth_Bps

    def stage_cost(self, s: int, first: int, stop: int) -> float:
        """GPipe's balance criterion: a micro-batch's forward + backward on the stage (+ the
        recomputed forward with rematerialization) + sending its boundary activation."""
        own = self.device_costs(self.grid[0][s]).layers
        compute = self._micro(first, stop, "forward_s", own) * (2 if self.remat else 1)
        compute += self._micro(first, stop, "backward_s", own)
        send = self.send_s(s, self.boundary_nbytes(stop)) if s < self.chunks - 1 else 0.0
        return compute + send

    @cached_property
    def staged(self) -> StagedReplica:
        """The replica's layers as the memory model reads them, cut into stages
        (:class:`simdist.memory.accounting.StagedReplica`), at the cluster's precision."""
        layers = ReplicaLayers.of_costs(
            self.costs, self.scenario.workload.batch_size, model_tensors(self.scenario)
        )
        return StagedReplica(self.scenario, layers, self.cluster.profile.precision, self.M)

    def device_memories(self) -> list[DeviceMemory]:
        """Peak bytes of one device of each stage. Interleaved: its chunks' model state and,
        at the moment its stashed activations weigh most, each chunk's micro-batches in
        flight (:func:`~.plan.chunks_at_peak`) — for equal chunks and M ≥ S, stage 0 holds
        ``(1 + (S − 1)/(S·V))`` times 1f1b's S micro-batches of its layers (Korthikanti et
        al. 2022, Sec. 4.2.3; Megatron-LM's ``interleaved_schedule_memory_penalty``,
        megatron/training/theoretical_memory_usage.py)."""
        if self.V == 1:
            return [self.stage_memory(s, a, b) for s, (a, b) in enumerate(self.bounds)]
        return chunk_memories(self.staged, self.bounds, self.S, self.V, self.M, self.remat)

    def stage_memory(self, s: int, first: int, stop: int) -> DeviceMemory:
        """Peak bytes of one device of stage ``s`` holding layers ``[first, stop)``."""
        return self.staged.stage(
            first,
            stop,
            self.peaks[s],
            pipedream=self.schedule == "pipedream",
            rematerialization=self.remat,
        )

    @cached_property
    def _running(self) -> dict[str, list[int]]:
        """Running totals of a layer field, by field (:meth:`_layer_sum`)."""
        return {}

    def _layer_sum(self, field: str, first: int, stop: int) -> Any:
        """``sum(x.<field> for x in layers[first:stop])``. The auto partition asks it of
        every range of layers (S·L² of them): when every value is an int, the difference of
        two running totals, the same number without summing the range each time."""
        totals = self._running.get(field)
        if totals is None:
            values = [getattr(x, field) for x in self.costs.layers]
            exact = all(type(v) is int for v in values)
            totals = self._running[field] = list(accumulate(values, initial=0)) if exact else []
        if not totals:
            return sum(getattr(x, field) for x in self.costs.layers[first:stop])
        return totals[stop] - totals[first]

    def fits(self, s: int, first: int, stop: int) -> bool:
        """Whether stage ``s`` with layers ``[first, stop)`` fits its device (unknown: yes).
        Interleaved: a chunk alone says nothing of its device (which holds V of them), so
        the auto partition balances time only and :meth:`_check_memory` refuses what does
        not fit."""
        if self.V > 1:
            return True
        capacity = self.capacities[s]
        return capacity <= 0 or self.stage_memory(s, first, stop).total <= capacity

    def _stage_layers(self, s: int) -> str:
        """Stage ``s``'s layers in words: ``layers a..b``, or its model chunks'."""
        names = [layer.name for layer in self.costs.layers]
        spans = [self.bounds[j] for j in self.chunks_of(s)]
        text = ", ".join(f"{names[a]}..{names[b - 1]}" for a, b in spans)
        if self.V == 1:
            return f"layers {text}"
        return f"model chunks {', '.join(map(str, self.chunks_of(s)))}: layers {text}"

    def _check_memory(self) -> None:
        """Refuse the first stage whose need exceeds its smallest device's capacity."""
        for s, need in enumerate(self.memory):
            capacity = self.capacities[s]
            if 0 < capacity < need.total:
                device = min(
                    self._stage_devices(s), key=lambda d: self.cluster.profile_of(d).memory_nbytes
                )
                parts = need.described()
                raise SimdistError(
                    f"{self.scenario.name}: {self._stage_label} stage {s} "
                    f"({self._stage_layers(s)}) does not fit on {device.name}: "
                    f"{self._stage_holder} needs {format_size(need.total)} ({parts}) and a "
                    f"{self.cluster.profile_of(device).name} has {format_size(capacity)}; "
                    f"use {self._memory_advice}"
                )

    #: How :meth:`_check_memory` words a refusal (a subclass running stages otherwise
    #: changes them).
    _stage_label = "pipeline"
    _stage_holder = "it"
    _memory_advice = (
        "more stages, fewer micro-batches in flight, rematerialization: true or a smaller batch"
    )

    def _stage_devices(self, s: int) -> list[Device]:
        """The devices that hold stage ``s`` (one per data-parallel copy)."""
        return [row[s] for row in self.grid]

    def stage_update_s(self, device: Device, s: int) -> float:
        """Seconds of ``device``'s optimizer step over stage ``s``'s own parameters (its
        model chunks', interleaved)."""
        total = self._layer_sum("param_nbytes", 0, len(self.costs.layers))
        share = (
            sum(self._layer_sum("param_nbytes", *self.bounds[j]) / total for j in self.chunks_of(s))
            if total
            else 0.0
        )
        return self.optimizer_step_s(device, share)

    def stage_optimizer_step(self, step: int) -> Generator[Any, Any, None]:
        """Every stage's devices update their own layers' parameters (the spec's optimizer
        sharding over them), after the flush and the gradient reduction."""
        devices, seconds = [], []
        for s in range(self.S):
            for device in self._stage_devices(s):
                devices.append(device)
                seconds.append(self.stage_update_s(device, s))
        yield from self.optimizer_step(devices, step, seconds)

    # -- numerics ------------------------------------------------------------

    def _init_numerics(self) -> None:
        from simdist.numerics.stages import PipeDreamTrainer, PipelineTrainer
        from simdist.strategies.sync import SyncState

        batch = self.scenario.workload.batch_size
        if self.schedule == "pipedream":
            self.trainer = PipeDreamTrainer(self.workload, self.counts, self.M, batch)
        else:
            self.trainer = PipelineTrainer(self.workload, self.counts, self.R, self.M, batch)
            params = self.workload.params
            self.state = SyncState(
                params, self.workload.init_opt_state(params), self.workload.model_state
            )
        if len(self.trainer.staged.sequence) != len(self.costs.layers):
            raise SimdistError(
                f"{self.scenario.name}: the model has {len(self.trainer.staged.sequence)} "
                f"layers but its cost profile {len(self.costs.layers)}"
            )

    def defers(self) -> bool:
        """gpipe and 1f1b runs leave their numerics to be computed with other runs'
        (:mod:`.batched`). Not pipedream (an update per micro-batch, as the schedule orders
        them), a subclass with its own trainer (hybrid), models with BatchNormalization (not
        checked bit for bit), runs with failures."""
        from simdist.numerics.stages import PipelineTrainer

        return (
            type(self.trainer) is PipelineTrainer
            and self.state is not None
            and not self.workload.stateful
            and not self.scenario.faults.failures
        )

    @property
    def final_params(self) -> Any | None:
        if self.trainer is None:
            return None
        if self.schedule == "pipedream":
            return self.workload.variables(self.trainer.current, self.trainer.model_state)
        return self.workload.variables(self.state.params, self.state.model_state)

    # -- the clock -----------------------------------------------------------

    def build_mesh(self) -> Mesh[Device]:
        """R pipeline copies (``data``) of S stages (``pipeline``) on the first S·R devices."""
        spec = self.scenario.strategy
        return Mesh.of(
            self.cluster.devices, {"data": spec.pipeline_replicas, "pipeline": spec.stages}
        )

    @property
    def training_devices(self) -> list[Device]:
        """The S×R stage devices, copy by copy."""
        return list(self.mesh.devices)

    def _span(self, device: Device, seconds: float, step: int, detail: str) -> float:
        """Record ``seconds`` of compute (× the device's pace and straggler factor) from now;
        return how long it takes."""
        pace, factor = self.pace(device, step), self.slowdown(device, step)
        self.record_scaled(device, self.env.now, seconds, factor, step, detail, pace)
        self.busy_s += seconds * (pace * factor)
        return seconds * (pace * factor)

    def _stage(
        self,
        r: int,
        s: int,
        ops: Sequence[tuple[str, int]],
        arrivals: dict[tuple, Any],
        step_of: Callable[[int], int],
        on_backward: Callable[[int, int], None] | None = None,
    ) -> Generator[Any, Any, None]:
        """Stage ``s`` of copy ``r`` runs its passes ``ops`` (:func:`~.plan.stage_plan`):
        wait for the input, compute, send on."""
        plan = self.stage_plan(s, ops)
        yield from walk(plan, StageDevice(self, r, s, arrivals, step_of, on_backward))

    def _device_chunks(
        self,
        r: int,
        s: int,
        ops: Sequence[tuple[str, int, int]],
        arrivals: dict[tuple, Any],
        step: int,
        lead: bool = False,
    ) -> Generator[Any, Any, None]:
        """Stage ``s``'s device of copy ``r`` runs its passes through its model chunks in
        the interleaved schedule's order: each pass the plan of chunk ``j`` as stage ``j``
        of an S·V-stage pipeline (:func:`~.plan.stage_plan`), so that activations and
        gradients go to the devices of chunks ``j ± 1`` (from the last stage to the first
        between chunk groups)."""
        runners = {j: self.stage_runner(r, j, arrivals, step, lead) for j in self.chunks_of(s)}
        for kind, m, j in ops:
            yield from walk(self.pass_plan(j, kind, m), runners[j])

    def stage_runner(
        self, r: int, s: int, arrivals: dict[tuple, Any], step: int, lead: bool = False
    ) -> Any:
        """Stage (chunk) ``s``'s device of copy ``r`` as the runner of its passes in step
        ``step`` (``lead``: a subclass's lock-step copies; none here)."""
        del lead
        return StageDevice(self, r, s, arrivals, lambda m, k=step: k, None)

    def pass_plan(self, j: int, kind: str, m: int) -> Plan:
        """Chunk ``j``'s pass ``kind`` of micro-batch ``m`` as a plan, built once; its
        compute spans and messages labelled with the chunk (``F3/c4``: micro-batch 3's
        forward through chunk 4, ``A3/c4`` its activation leaving chunk 4, ``G3/c4`` the
        gradient chunk 4 sends back)."""
        key = (j, kind, m)
        plan = self._pass_plans.get(key)
        if plan is None:
            plain = stage_plan([(kind, m)], j, self.chunks, self.M, self.send_nbytes, self.remat)
            program = [
                op._replace(detail=f"{op.detail}/c{j}") if isinstance(op, Compute | Send) else op
                for op in plain.program
            ]
            plan = self._pass_plans[key] = Plan(plain.collectives, program)
        return plan

    @cached_property
    def _pass_plans(self) -> dict[tuple[int, str, int], Plan]:
        """Each chunk's plan of each pass (:meth:`pass_plan`)."""
        return {}

    def stage_plan(self, s: int, ops: Sequence[tuple[str, int]]) -> Plan:
        """Stage ``s``'s passes ``ops`` as a plan (:func:`~.plan.stage_plan`), built once
        per stage and list of passes."""
        cached = self._stage_plans.get(s)
        if cached is None or cached[0] is not ops:
            plan = stage_plan(ops, s, self.S, self.M, self.send_nbytes, self.remat)
            cached = self._stage_plans[s] = (ops, plan)
        return cached[1]

    @cached_property
    def _stage_plans(self) -> dict[int, tuple[Sequence[tuple[str, int]], Plan]]:
        """Each stage's plan, with the passes it was built from (:meth:`stage_plan`)."""
        return {}

    def _update(self, s: int, m: int, step: int) -> None:
        """pipedream: micro-batch ``m``'s backward updates stage ``s``; record its staleness
        (updates of the stage since the version its forward used, which weight stashing
        kept for this backward) in the ``stage_updates`` table."""
        used, version = self.forward_version[s].pop(m), self.versions[s]
        self.update_staleness[s].append(version - used)
        self.recorder.row(
            "stage_updates",
            time_s=self.env.now,
            step=step,
            stage=s,
            micro_batch=m,
            forward_version=used,
            version=version,
            staleness=version - used,
        )
        self.versions[s] += 1

    def _hold(self, r: int, s: int, delta: int) -> None:
        self.held[r][s] += delta
        self.peak_held[r][s] = max(self.peak_held[r][s], self.held[r][s])

    def process(self) -> Generator[Any, Any, None]:
        if self.schedule == "pipedream":
            yield from self._pipedream()
            return
        for step in range(self.total_steps):
            start = self.env.now
            arrivals: dict[tuple, Any] = {}
            if self.V > 1:
                stages = [
                    self.env.process(self._device_chunks(r, s, self.steps_ops[s], arrivals, step))
                    for r in range(self.R)
                    for s in range(self.S)
                ]
            else:
                stages = [
                    self.env.process(
                        self._stage(r, s, self.steps_ops[s], arrivals, lambda m, k=step: k)
                    )
                    for r in range(self.R)
                    for s in range(self.S)
                ]
            yield self.env.all_of(stages)
            if self.R > 1:
                reduces = [
                    self.net.collective(
                        "allreduce",
                        list(group),
                        self.device_grad_nbytes[s],
                        self.scenario.strategy.all_reduce,
                        step=step,
                        detail=f"all-reduce stage {s}",
                    )
                    for s, group in enumerate(self.mesh.groups("data"))
                    if self.device_grad_nbytes[s] > 0
                ]
                yield self.env.all_of(reduces)
            yield from self.stage_optimizer_step(step)
            loss = None
            if self.defer:  # computed with other runs' after the simulation (.batched)
                loss = DEFERRED
            elif self.trainer is not None:
                self.state, loss = self.trainer.update(self.state, self.trainer.batch(step))
            if not self.end_step(start, step + 1, loss, lambda: self.final_params):
                return
        if self.defer:
            self.deferred_run = DeferredPipeline(self)

    def _pipedream(self) -> Generator[Any, Any, None]:
        """One stream of micro-batches, no flush; step k ends with micro-batch kM + M − 1's
        backward on stage 0 (the last to see it)."""
        done = [self.env.event() for _ in range(self.total_steps)]

        def on_backward(s: int, m: int) -> None:
            if s == 0 and m % self.M == self.M - 1:
                done[m // self.M].succeed()

        arrivals: dict[tuple, Any] = {}
        for s in range(self.S):
            self.env.process(
                self._stage(0, s, self.steps_ops[s], arrivals, lambda m: m // self.M, on_backward)
            )
        start = self.env.now
        for step in range(self.total_steps):
            yield done[step]
            loss = None
            if self.trainer is not None:
                losses = [self.trainer.losses.pop(step * self.M + i) for i in range(self.M)]
                loss = sum(losses) / len(losses)
            if not self.end_step(start, step + 1, loss, lambda: self.final_params):
                return
            start = self.env.now

    # -- what summary.json says ----------------------------------------------

    def staleness(self) -> list[list[int]]:
        """Per stage, the staleness of each update applied on the clock (pipedream; empty
        lists for the others), as the ``stage_updates`` table records them."""
        return [list(values) for values in self.update_staleness]

    def summary(self) -> dict[str, Any]:
        now = self.env.now
        devices = self.training_devices
        total = len(devices) * now
        names = [layer.name for layer in self.costs.layers]
        out: dict[str, Any] = {
            "pipeline": {
                "stages": self.S,
                "micro_batches": self.M,
                "schedule": self.schedule,
                "replicas": self.R,
                "rematerialization": self.remat,
                "partition": list(self.counts),
                "stage_layers": [names[a:b] for a, b in self.bounds],
                "stage_devices": [[row[s].name for row in self.grid] for s in range(self.S)],
            },
            "bubble_fraction": (total - self.busy_s) / total if total > 0 else None,
            "bubble_fraction_ideal": ideal_bubble(self.S, self.M, self.V),
            "peak_in_flight_per_stage": list(self.peak_held[0]),
            "device_memory_bytes": self.capacity,
            "memory_per_device": {
                row[s].name: self.memory[s].as_dict() for row in self.grid for s in range(self.S)
            },
            "peak_memory_bytes": {
                row[s].name: self.memory[s].total for row in self.grid for s in range(self.S)
            },
        }
        if self.V > 1:  # the partition and stage_layers are per model chunk
            out["pipeline"]["virtual_stages"] = self.V
        if self.schedule == "pipedream":
            per_stage = self.staleness()
            out["staleness_per_stage"] = [
                {
                    "stage": s,
                    "updates": len(values),
                    "mean": sum(values) / len(values) if values else 0.0,
                    "max": max(values, default=0),
                }
                for s, values in enumerate(per_stage)
            ]
        return out


class StageDevice:
    """One stage's device carrying its passes out on the clock (the runner of
    :func:`~simdist.strategies.steps.walk` for :func:`~.plan.stage_plan`): each pass a
    compute span (× its pace and straggler factor), messages to and from the neighbouring
    stages of its copy, and what a pass changes on the stage (micro-batches held,
    pipedream's weight versions)."""

    def __init__(
        self,
        strategy: PipelineStrategy,
        r: int,
        s: int,
        arrivals: dict[tuple, Any],
        step_of: Callable[[int], int],
        on_backward: Callable[[int, int], None] | None,
    ) -> None:
        self.p, self.env = strategy, strategy.env
        self.r, self.s = r, s
        self.device = strategy.grid[r][s]
        self.seconds = strategy.stage_s[r][s]  # (forward, backward) of a micro-batch
        self.arrivals, self.step_of, self.on_backward = arrivals, step_of, on_backward
        self.pipedream = strategy.schedule == "pipedream"

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Micro-batch ``op.unit``'s pass ``op.phase``: ``F`` (forward), ``R`` (its forward
        again, rematerialized) or ``B`` (backward)."""
        p, s, m = self.p, self.s, op.unit
        step = self.step_of(m)
        seconds = self.seconds[1] if op.phase == "B" else self.seconds[0]
        yield self.env.timeout(p._span(self.device, seconds, step, op.detail))
        if op.phase == "F":
            if self.pipedream:
                p.forward_version[s][m] = p.versions[s]
                if p.trainer is not None:
                    p.trainer.forward(s, m)  # type: ignore[union-attr]
            p._hold(self.r, s % p.S, +1)
        elif op.phase == "B":
            if self.pipedream:
                update_s = p.stage_update_s(self.device, s)
                if update_s > 0:  # each micro-batch's backward updates its stage
                    end = self.env.now + update_s
                    p.record_devices(
                        [self.device], self.env.now, end, "apply", step, "optimizer step"
                    )
                    yield self.env.timeout(update_s)
                p._update(s, m, step)
                if p.trainer is not None:
                    p.trainer.backward(s, m)  # type: ignore[union-attr]
            p._hold(self.r, s % p.S, -1)
            if self.on_backward is not None:
                self.on_backward(s, m)

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        """Wait for the message that pass ``op.tag`` needs (the sender may have sent it)."""
        key = (self.r, self.s, *op.tag)
        yield self.arrivals.setdefault(key, self.env.event())
        del self.arrivals[key]

    def send(self, op: Send) -> None:
        """Send ``op`` to stage ``op.peer`` of this copy. The receiving stage may wait
        already on its arrival event: the message triggers it as its own ``done`` at the
        arrival, without a second ``done`` step that nobody listens to."""
        p = self.p
        ready = self.arrivals.setdefault((self.r, op.peer, *op.tag), self.env.event())
        p.net.send(
            self.device,
            p.grid[self.r][op.peer],
            op.nbytes,
            step=self.step_of(op.tag[1]),
            detail=op.detail,
            done=ready,
        )

    def issued_s(self) -> float:
        return self.env.now

    def start(self, index: int, c: Collective) -> Any:
        raise TypeError(f"a pipeline stage runs no collective in its passes; got {c}")

    def waited(self, span: tuple[float, float]) -> None:
        del span

    def finish(self) -> Generator[Any, Any, None]:
        """Nothing left: the stage's last pass has ended."""
        yield from ()
