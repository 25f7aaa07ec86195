"""What a parameter-server worker does, shared by both modes: pull, compute, push.

A worker's iteration — pull every shard, compute, push every gradient shard — is one
plan of typed steps run by the one walker (:func:`simdist.strategies.steps.walk`), defined
once here and shared by both modes: the asynchronous loop (:mod:`.async_loop`, with
failures in :mod:`.recovery`) and synchronous steps with backup workers
(:mod:`.sync_backup`). Without ``overlap`` the plan is three phases one after the other
(:func:`phase_plan`); with it, per-variable transfers overlap the layers' compute
(:func:`layer_plan`: each layer's pulls received, its forward, its backward, its shards
sent). How long bytes take is the network's: every pull and push is one ``net.send``
between the worker's host and a PS task, which contend on the NICs.

The loops drive a :class:`ParameterServerWorkers` and count what the run has done in its
:class:`~.progress.Progress`; none of them imports the strategy that chooses them
(:mod:`.strategy`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import simpy

from simdist.hardware.cluster import Device
from simdist.hardware.mesh import Mesh
from simdist.network import Transfer
from simdist.step_costs import LayerCost
from simdist.strategies.base import Strategy
from simdist.strategies.layer_step import backward_ready
from simdist.strategies.parameter_server.dataflow import (
    Dataflow,
    DataflowServers,
    Journal,
)
from simdist.strategies.parameter_server.on_update import PullOnUpdate
from simdist.strategies.parameter_server.partition import (
    batch_norm_state_leaves,
    bytes_per_ps,
    layer_shards,
    partition,
)
from simdist.strategies.parameter_server.progress import Progress
from simdist.strategies.parameter_server.push_compression import PushCompression
from simdist.strategies.parameter_server.servers import ParameterServers
from simdist.strategies.parameter_server.staging import Chain, WorkerMoves
from simdist.strategies.steps import (
    Collective,
    Compute,
    Issue,
    Plan,
    Receive,
    Send,
    Step,
    Wait,
    walk,
)

if TYPE_CHECKING:
    from simdist.numerics.deferred import DeferredGradients


class ParameterServerWorkers(Strategy):
    """The PS tasks, the workers' pull / compute / push, and the numerics they submit.

    What the loops (:mod:`.async_loop`, :mod:`.sync_backup`, :mod:`.recovery`) drive; they
    count what the run has done in :attr:`progress`. The run itself — which loop, the
    dataflow replay, the summary — is :class:`~.strategy.ParameterServerStrategy`'s.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = self.scenario.strategy
        self.options = options
        self.n_workers = len(self.cluster.workers)
        self.n_ps = len(self.cluster.ps_hosts)
        self.worker_batch = (
            self.scenario.workload.batch_size * self.scenario.cluster.devices_per_host
        )
        # Model state (BatchNormalization's moving statistics) is placed with the variables:
        # pulled with them, its updates (a worker's batch moments) pushed with the gradient.
        self.shards = partition(
            [*self.costs.param_leaves, *batch_norm_state_leaves(self.costs.param_leaves)],
            self.n_ps,
            options.partitioner,
            options.min_shard_bytes,
            options.max_shards,
        )
        self.ps_nbytes = bytes_per_ps(self.shards, self.n_ps)
        params = len(self.costs.param_leaves)
        held = bytes_per_ps([x for x in self.shards if x.leaf < params], self.n_ps)
        whole = self.costs.host_optimizer_step_s
        #: Seconds each PS takes to apply one gradient to its shards: its share of the
        #: parameters' optimizer step on a host CPU (Costs.host_optimizer_step_s).
        self.apply_s = [whole * n / sum(held) if whole > 0 else 0.0 for n in held]
        comp = options.compression
        #: Compressed pushes (push_compression.py), None without compression.
        self.compressed = (
            PushCompression(comp, self.shards, self.costs.param_leaves, self.n_ps)
            if comp is not None and comp.active
            else None
        )
        #: Bytes each worker pushes to each PS (compressed, or the shards as they are).
        self.push_ps_nbytes = (
            self.ps_nbytes if self.compressed is None else self.compressed.ps_nbytes
        )
        # What the loops record metrics and rows into: the recorder, or a journal whose
        # values the dataflow replay fills in (asynchronous runs with numerics).
        self.log: Any = self.recorder
        self.dataflow: Dataflow | None = None
        self.deferred: DeferredGradients | None = None
        if self.workload is not None and options.mode != "sync":
            self.dataflow = Dataflow(self.n_ps)
            self.log = Journal()
            self.servers: ParameterServers = DataflowServers(self.shards, self.n_ps, self.dataflow)
        else:
            self.servers = ParameterServers(self.shards, self.n_ps, self.workload)
        if self.workload is not None and self.dataflow is None:
            from simdist.numerics.deferred import DeferredGradients

            # BatchNormalization normalises per replica: a worker's devices each on their part
            # of its batch. Without model state the split changes nothing but rounding, so a
            # worker's batch stays one evaluation.
            replicas = self.scenario.cluster.devices_per_host if self.workload.stateful else 1
            self.deferred = DeferredGradients(
                self.workload, self.worker_batch, replicas=replicas, with_moments=True
            )
        #: Each worker's compressor state (numerics with compression only).
        self.compressors: Any = None
        if self.compressed is not None and self.workload is not None:
            from simdist.strategies.parameter_server.worker_compressors import WorkerCompressors

            self.compressors = WorkerCompressors(
                self.compressed.spec,
                self.shards,
                self.workload.params,
                self.n_workers,
                self.scenario.seed,
            )
        self.progress = Progress()  # what the loops have done: applied, dropped, lost
        # What each worker has on the wire (transfers, a local all-reduce): a failure cuts it.
        self.moving: list[list[Transfer | simpy.Process]] = [[] for _ in range(self.n_workers)]
        self.pipelines = [self.new_pipeline() for _ in range(self.n_workers)]
        self.layer_shards = layer_shards(self.costs.layers, self.shards)
        #: :meth:`phase_plan` by a worker's number of devices, made once.
        self.phase_plans: dict[int, Plan] = {}
        per_host = self.scenario.cluster.devices_per_host
        #: The messages and copies of pulls and pushes (fetch, push, host_staging).
        self.moves = WorkerMoves(
            self.net,
            options.fetch or "per_worker",
            options.push or "reduced",
            bool(options.host_staging),
            per_host,
        )
        # Hosts of several devices overlap per variable too: each layer's gradients are
        # reduced (on the devices, or on the host after staging) as backward reaches it.
        self.overlap = options.overlap and len(self.costs.layers) > 1
        #: ``pull: on_update``: each shard's next pulls start once all its gradients are in.
        self.on_update = (
            PullOnUpdate(self.n_workers, self.total_steps, self._pull_shard)
            if options.pull == "on_update" and self.overlap
            else None
        )

    def defers(self) -> bool:
        """``mode: sync`` runs with numerics and no compression can compute with other runs'
        (:mod:`.sync_seeds`; ``mode: sync`` has neither failures nor checkpoints)."""
        return (
            self.options.mode == "sync"
            and self.numeric
            and self.deferred is not None
            and self.compressors is None
            and self.stop_at is None
            and self.may_rerun
        )

    @property
    def numeric(self) -> bool:
        """Whether gradients are computed for real (False in timing-only runs)."""
        return self.workload is not None

    def build_mesh(self) -> Mesh[Device]:
        """Every worker device on the ``data`` axis (each host may hold a different count)."""
        return Mesh.of(self.cluster.devices, {"data": len(self.cluster.devices)})

    @property
    def training_devices(self) -> list[Device]:
        return list(self.mesh.devices)

    @property
    def examples_per_step(self) -> int:
        """Async: one worker's batch per applied gradient; sync: the N−b accepted batches."""
        if self.options.mode == "sync":
            return (self.n_workers - self.options.backup_workers) * self.worker_batch
        return self.worker_batch

    # -- what one worker does ----------------------------------------------

    def work(
        self,
        w: int,
        step: int,
        then: Callable[[int], None] | None = None,
        on_pulled: Callable[[], None] | None = None,
    ) -> Generator[Any, Any, None]:
        """Worker ``w``'s iteration: pull, compute, push; ``on_pulled()`` once it may compute.

        ``then(ps)`` runs when PS ``ps`` has received the whole of its gradient shard.
        With ``overlap`` the three phases overlap variable by variable
        (:meth:`overlapped`); otherwise each is one parallel phase after the other.
        """
        if self.overlap:
            yield from self.overlapped(w, step, then, on_pulled)
            return
        plan = self.phase_plan(len(self.cluster.workers[w].devices))
        yield from walk(plan, PhaseByPhase(self, w, step, then, on_pulled))

    def phase_plan(self, n_devices: int) -> Plan:
        """The iteration without overlap as typed steps (:func:`phase_plan`) for a worker of
        ``n_devices`` devices."""
        plans = self.phase_plans
        if n_devices not in plans:
            plans[n_devices] = phase_plan(
                self.push_ps_nbytes,
                self.costs.grad_nbytes if self.moves.local_reduce(n_devices) else 0,
                compress=self.compressed is not None,
            )
        return plans[n_devices]

    def overlapped(
        self,
        w: int,
        step: int,
        then: Callable[[int], None] | None,
        on_pulled: Callable[[], None] | None,
    ) -> Generator[Any, Any, None]:
        """One iteration with per-variable transfers overlapped with compute (TF's behaviour).

        Every variable shard is pulled by a message of its own, requested in the order
        the forward pass needs them, so they queue on the NICs in that order; layer i's
        forward starts when layer i − 1's has ended and layer i's variables have
        arrived. Backward runs in reverse layer order and each shard's gradient is
        pushed as soon as its layer's backward has ended. A PS applies (``then(ps)``)
        when all of its shards of this gradient have arrived. Devices of a host run
        layer by layer in step (max rule per layer); a layer's gradients are reduced
        over them (an all-reduce on the devices, or the host's sum of staged copies,
        :mod:`.staging`) before its shards leave, unless each device pushes its own.
        """
        devices = self.cluster.workers[w].devices
        pulls = self._pull_layers(w, step)
        if on_pulled is not None:
            on_pulled()
        yield from self.input_wait(devices, self.pipelines[w], step)
        factor = max(self.pace(d, step) * self.slowdown(d, step) for d in devices)
        layers = self.device_costs(devices[0]).layers  # this host's own device class
        yield from walk(self.layer_plan, LayerByLayer(self, w, layers, pulls, factor, step, then))

    def _pull_layers(self, w: int, step: int) -> list[list[Transfer]]:
        """Worker ``w`` requests every variable shard, layer by layer in forward order: each
        layer's pulls, recorded on its devices as one ``pull`` phase from now."""
        net, issued = self.net, self.env.now
        host = self.cluster.workers[w]
        moves, early = self.moves, self.on_update
        if early is not None:
            pulls = [early.pulls(w, step, shards) for shards in self.layer_shards]
        else:
            pulls = [
                [move for i in shards for move in self._pull_shard(w, step, i)]
                for shards in self.layer_shards
            ]
        every_pull = [move for moves in pulls for move in moves]
        self.moving[w] = list(every_pull)
        net.phase(
            host.devices,
            every_pull,
            step=step,
            detail="pull",
            nbytes=self.costs.param_nbytes * moves.pulls_per_worker,
            start_s=issued,
        )
        return pulls

    def _pull_shard(self, w: int, step: int, i: int) -> list[Any]:
        """Worker ``w``'s pull of shard ``i`` for ``step``, started now."""
        shard = self.shards[i]
        ps_host = self.cluster.ps_hosts[shard.ps]
        host = self.cluster.workers[w]
        detail = f"pull ps{shard.ps}"
        return self.moves.pull(ps_host, host, shard.nbytes, step=step, detail=detail)

    @cached_property
    def layer_plan(self) -> Plan:
        """A worker's overlapped iteration as typed steps (:func:`layer_plan`)."""
        ready = [i for i, shards in enumerate(self.layer_shards) if shards][::-1]
        return layer_plan(self.layer_shards, ready, self.shards)

    def _record_run(
        self, devices: Sequence[Device], start_s: float, seconds: float, step: int, detail: str
    ) -> None:
        """Layers computed back to back from ``start_s``: ``compute``, a straggler's excess
        (``straggle``), and the faster devices' wait for the slowest (``idle: barrier``)."""
        paces = [self.pace(d, step) for d in devices]
        factors = [self.slowdown(d, step) for d in devices]
        end = start_s + seconds * max(p * f for p, f in zip(paces, factors, strict=True))
        for device, pace, factor in zip(devices, paces, factors, strict=True):
            done = self.record_scaled(device, start_s, seconds, factor, step, detail, pace)
            self.recorder.event(done, end, device.host, device.name, "idle", 0, step, "barrier")

    def record_apply(self, ps: int, start_s: float, end_s: float, step: int, detail: str) -> None:
        """PS ``ps``'s host CPU applies an update over ``[start_s, end_s)``."""
        host = self.cluster.ps_hosts[ps].name
        self.recorder.event(start_s, end_s, host, f"{host}/host-cpu", "apply", 0, step, detail)

    def servers_update(self, step: int) -> Generator[Any, Any, None]:
        """Every PS applies step ``step``'s mean gradient to its shards, all at once (sync
        mode); the step goes on when the slowest has (:attr:`apply_s`)."""
        longest = max(self.apply_s, default=0.0)
        if longest <= 0:
            return
        start = self.env.now
        for ps, seconds in enumerate(self.apply_s):
            self.record_apply(ps, start, start + seconds, step, "optimizer step")
        yield self.env.timeout(longest)

    def _wait(
        self, w: int, moves: Sequence[Transfer], step: int, detail: str, nbytes: int
    ) -> Generator[Any, Any, None]:
        """Wait for a parallel phase of ``w``'s messages (``nbytes`` in all), recorded on its
        devices as one span."""
        self.moving[w] = list(moves)
        devices = self.cluster.workers[w].devices
        yield from self.net.wait_all(devices, moves, step=step, detail=detail, nbytes=nbytes)
        self.moving[w] = []

    def cut(self, w: int) -> None:
        """Worker ``w`` stops (failed, or dropped as late): what it has on the wire stops too.

        Transfers are cancelled (their links freed, nothing recorded); a local
        all-reduce is interrupted, which releases the intra-host link.
        """
        for move in self.moving[w]:
            if not isinstance(move, simpy.Process):  # a Transfer, or a protocol's Message
                move.cancel()
            elif move.is_alive:
                move.interrupt("worker stopped")
                move.defused = True  # nobody waits for it any more
        self.moving[w] = []

    # -- numerics ----------------------------------------------------------

    def batch_of(self, w: int, iteration: int) -> tuple[Any, Any]:
        """Worker ``w``'s ``iteration``-th batch: global batch ``iteration·W + w``.

        A pure function of (seed, w, iteration), independent of timing; with one
        worker it is one_device's order.
        """
        assert self.workload is not None
        return self.workload.batches.batch(iteration * self.n_workers + w, self.worker_batch)

    def submit(self, w: int, iteration: int, values: Sequence[Any]) -> int:
        """Queue worker ``w``'s gradient at the ``values`` it pulled; return its ticket.

        In a dataflow run ``values`` are the state ids pulled and the ticket is the
        gradient's number in the dataflow.
        """
        if self.dataflow is not None:
            return self.dataflow.ticket(iteration * self.n_workers + w, values)
        x, y = self.batch_of(w, iteration)
        return self.deferred.submit(self.servers.assemble(values), x, y)

    def gradient(self, ticket: int) -> tuple[float, Any, Any]:
        """``(loss, grads, moments)`` of a submitted gradient (evaluated with every pending
        one); ``moments`` are its batch moments, ``{}`` for a model without state."""
        loss, grads, moments = self.deferred.result(ticket)
        return float(loss), grads, moments

    def discard(self, ticket: int | None) -> None:
        """Forget a gradient that will never be applied (lost or dropped)."""
        if ticket is not None and self.deferred is not None:
            self.deferred.discard(ticket)

    def evaluate(self, step: int, params: Any, *, delay_s: float | None = None) -> None:
        """Test metrics now; in a dataflow run ``params`` are state ids, evaluated later."""
        if self.dataflow is None:
            super().evaluate(step, params, delay_s=delay_s)
            return
        point = self.dataflow.evaluate(params)
        delay = self.eval_delay_s if delay_s is None else delay_s
        self.log.evaluation(self.env.now + delay, step, point)


def layer_plan(layer_shards: Sequence[Sequence[int]], ready: Sequence[int], shards: Any) -> Plan:
    """A worker's overlapped iteration as typed steps: each layer's forward once its
    variables have arrived (``Receive(i)``: layer ``i``'s pulls), then backward in reverse
    layer order, one compute per layer whose gradient moves (``ready``, in backward order;
    ``Compute(k, "backward")`` ends at its gradient) followed by its shards' pushes (one
    ``Send`` per shard, to its PS), and a last compute to the end of backward."""
    program: list[Step] = []
    for i in range(len(layer_shards)):
        program += [Receive(i), Compute(i, "forward")]
    for k, layer in enumerate(ready):
        program.append(Compute(k, "backward"))
        program += [
            Send(shards[i].ps, i, shards[i].nbytes, f"push ps{shards[i].ps}")
            for i in layer_shards[layer]
        ]
    program.append(Compute(len(ready), "backward"))
    return Plan([], program)


def phase_plan(push_nbytes: Sequence[int], local_nbytes: int, *, compress: bool) -> Plan:
    """A worker's iteration without overlap as typed steps, each phase after the other:
    every PS's variables received (``Receive("variables")``: the pulls, in parallel), the
    compute, the host's all-reduce of the ``local_nbytes`` gradient over its devices (when
    they reduce before pushing; 0: they do not), the compressor's compute (``compress``),
    one ``Send`` per PS of its gradient shard (``push_nbytes[ps]`` bytes), and the wait
    until every push has landed (``Receive("gradient")``)."""
    collectives, program = [], [Receive("variables"), Compute(0, "compute")]
    if local_nbytes:
        collectives.append(Collective("allreduce", local_nbytes, "local all-reduce"))
        program += [Issue(0), Wait(0)]
    if compress:
        program.append(Compute(1, "compress"))
    program += [Send(ps, ps, n, f"push ps{ps}") for ps, n in enumerate(push_nbytes)]
    program.append(Receive("gradient"))
    return Plan(collectives, program)


class PhaseByPhase:
    """A worker's devices carrying :func:`phase_plan` out on the clock: each phase is one
    span of every device (the pulls, the compute with the max rule, the pushes), the
    devices' host reduces over them in a ring, and PS ``ps`` applies (``then(ps)``) when
    its shard of the gradient has arrived. ``on_pulled()`` runs once the variables are
    there (the worker may compute)."""

    def __init__(
        self,
        workers: ParameterServerWorkers,
        w: int,
        step: int,
        then: Callable[[int], None] | None,
        on_pulled: Callable[[], None] | None,
    ) -> None:
        self.p, self.env = workers, workers.env
        self.w, self.step, self.then, self.on_pulled = w, step, then, on_pulled
        self.host = workers.cluster.workers[w]
        self.devices = self.host.devices
        self.pushes: list[Transfer] = []

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        """``variables``: fetch every PS's shards in parallel (the values were read when the
        request was issued, ``servers.pull_all``); ``gradient``: wait for the pushes."""
        p, w, step = self.p, self.w, self.step
        if op.tag == "gradient":
            nbytes = (
                p.compressed.nbytes
                if p.compressed is not None
                else p.costs.grad_nbytes * p.moves.pushes_per_worker
            )
            yield from p._wait(w, self.pushes, step, "push", nbytes)
            return
        ps_hosts, pull = p.cluster.ps_hosts, p.moves.pull
        moves = [
            move
            for ps, nbytes in enumerate(p.ps_nbytes)
            for move in pull(ps_hosts[ps], self.host, nbytes, step=step, detail=f"pull ps{ps}")
        ]
        yield from p._wait(w, moves, step, "pull", p.costs.param_nbytes * p.moves.pulls_per_worker)
        if self.on_pulled is not None:
            self.on_pulled()

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """``compute``: wait for the batch, then every device computes (max rule);
        ``compress``: the compressor's work on the worker's devices."""
        p, step = self.p, self.step
        if op.phase == "compute":
            yield from p.input_wait(self.devices, p.pipelines[self.w], step)
            yield from p.compute_phase(self.devices, step)
            return
        profile = p.cluster.profiles.get(self.devices[0].profile, p.cluster.profile)
        seconds = p.compressed.seconds(profile)
        if seconds > 0:
            start = self.env.now
            yield self.env.timeout(seconds)
            p.record_devices(self.devices, start, self.env.now, "compute", step, "compress")

    def issued_s(self) -> float:
        return self.env.now

    def start(self, index: int, c: Collective) -> Any:
        """The host's all-reduce of the gradient over its devices (a ring)."""
        del index
        reduce = self.p.net.collective(
            c.op, self.devices, c.nbytes, "ring", step=self.step, detail=c.detail
        )
        self.p.moving[self.w] = [reduce]
        return reduce

    def waited(self, span: tuple[float, float]) -> None:
        del span
        self.p.moving[self.w] = []

    def send(self, op: Send) -> None:
        """Push PS ``op.peer``'s shard of the gradient."""
        then = self.then
        self.pushes += self.p.moves.push(
            self.host,
            self.p.cluster.ps_hosts[op.peer],
            op.nbytes,
            step=self.step,
            detail=op.detail,
            then=None if then is None else partial(then, op.peer),
        )

    def finish(self) -> Generator[Any, Any, None]:
        """Nothing left: the program ended with the pushes landed."""
        yield from ()


class LayerByLayer:
    """A worker's devices carrying :func:`layer_plan` out on the clock (TensorFlow's
    per-variable transfers overlapped with compute; see
    :meth:`ParameterServerWorkers.overlapped`).

    Forward: the layers whose variables are there run back to back, one ``forward`` span
    per such run, the devices ``idle: waiting for variables`` between. Backward: each
    layer's gradient is ready at its running sum of backward times
    (:func:`~simdist.strategies.layer_step.backward_ready`) × the slowest device's factor;
    its shards are pushed then — or, when the host's devices reduce first, after a local
    all-reduce of the layer, chained (:class:`~.staging.Chain`) while backward goes on. PS
    ``ps`` applies (``then(ps)``) once all its shards have arrived."""

    def __init__(
        self,
        workers: ParameterServerWorkers,
        w: int,
        layers: Sequence[LayerCost],
        pulls: Sequence[Sequence[Transfer]],
        factor: float,
        step: int,
        then: Callable[[int], None] | None,
    ) -> None:
        self.p, self.env = workers, workers.env
        self.w, self.layers, self.pulls, self.factor, self.step = w, layers, pulls, factor, step
        self.host = workers.cluster.workers[w]
        self.devices = self.host.devices
        self.then = then
        self.run_start, self.run_s = self.env.now, 0.0  # the forward run in progress
        self.backward_start: float | None = None
        self.ready: list[tuple[int, float]] = []
        self.elapsed = 0.0
        self.pushes: list[Any] = []
        self.first_push: float | None = None
        self.local = workers.moves.local_reduce(len(self.devices))
        self.held: list[Send] = []  # pushes of the layer whose local reduction is to start
        self.waiting_shards = [0] * workers.n_ps
        for shards in workers.layer_shards:
            for i in shards:
                self.waiting_shards[workers.shards[i].ps] += 1

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        """Layer ``op.tag``'s variables: if some have not arrived, the run so far is
        computed and the devices wait for them."""
        env, moves = self.env, self.pulls[op.tag]
        if any(not move.done.triggered for move in moves):
            yield from self._flush_forward()
            waiting = env.now
            yield self.p.net.join(moves)
            self.p.record_devices(
                self.devices, waiting, env.now, "idle", self.step, "waiting for variables"
            )
            self.run_start, self.run_s = env.now, 0.0

    def _flush_forward(self) -> Generator[Any, Any, None]:
        if self.run_s:
            yield self.env.timeout(self.run_s * self.factor)
            self.p._record_run(self.devices, self.run_start, self.run_s, self.step, "forward")

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """A forward layer joins the run; a backward group ends at its ready time."""
        env = self.env
        if op.phase == "forward":
            self.run_s += self.layers[op.unit].forward_s
            return
        if self.backward_start is None:
            yield from self._flush_forward()
            self.backward_start = env.now
            moves = [bool(shards) for shards in self.p.layer_shards]
            self.ready, self.elapsed = backward_ready(self.layers, moves)
        self._push_held()
        k = op.unit
        seconds = self.ready[k][1] if k < len(self.ready) else self.elapsed
        target = self.backward_start + seconds * self.factor
        if target > env.now:
            yield env.timeout(target - env.now)

    def send(self, op: Send) -> None:
        """Push shard ``op.tag`` to PS ``op.peer`` (held for the layer's local reduction)."""
        if self.first_push is None:
            self.first_push = self.env.now
        if self.local:
            self.held.append(op)
            return
        new = self._sends([op])
        self.pushes.extend(new)
        self.p.moving[self.w] = [*self.p.moving[self.w], *new]

    def _push_held(self) -> None:
        """The held layer's gradients all-reduced on the devices, then pushed from the host."""
        if not self.held:
            return
        held, self.held = self.held, []
        p, step = self.p, self.step
        layer_bytes = sum(op.nbytes for op in held)
        reduce = partial(
            p.net.collective, "allreduce", self.devices, layer_bytes, "ring", step=step,
            detail="local all-reduce",
        )  # fmt: skip
        new = [Chain(self.env, [lambda: [reduce()], lambda: self._sends(held)])]
        self.pushes.extend(new)
        p.moving[self.w] = [*p.moving[self.w], *new]

    def _sends(self, pushes: Sequence[Send]) -> list[Any]:
        """Each push: shard ``op.tag``'s gradient to PS ``op.peer``."""
        p, ps_hosts = self.p, self.p.cluster.ps_hosts
        return [
            move
            for op in pushes
            for move in p.moves.push(
                self.host,
                ps_hosts[op.peer],
                op.nbytes,
                step=self.step,
                detail=op.detail,
                then=partial(self._landed, op.tag),
            )
        ]

    def _landed(self, i: int) -> None:
        ps = self.p.shards[i].ps
        self.waiting_shards[ps] -= 1
        if self.waiting_shards[ps] == 0 and self.then is not None:
            self.then(ps)
        if self.p.on_update is not None:
            self.p.on_update.landed(self.step, i)

    def issued_s(self) -> float:
        return self.env.now

    def start(self, index: int, c: Collective) -> Any:
        raise TypeError(f"a worker's iteration issues no collective of its own; got {c}")

    def waited(self, span: tuple[float, float]) -> None:
        del span

    def finish(self) -> Generator[Any, Any, None]:
        """Backward recorded; the worker waits for its last push to arrive."""
        p = self.p
        p._record_run(self.devices, self.backward_start, self.elapsed, self.step, "backward")
        yield p.net.phase(
            self.devices,
            self.pushes,
            step=self.step,
            detail="push",
            nbytes=p.costs.grad_nbytes * p.moves.pushes_per_worker,
            start_s=self.first_push,
        )
        p.moving[self.w] = []
