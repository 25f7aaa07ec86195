"""``parameter_server``: W workers, S parameter-server tasks, asynchronous updates.

As ``tf.distribute.experimental.ParameterServerStrategy`` (DESIGN.md §3):
variables are partitioned over the PS tasks; each worker loops — pull every
shard (in parallel, contending on the PS links), compute a gradient for real
from the pulled, possibly stale, parameters on its own batch, push each
gradient shard to its PS — and each PS applies a gradient shard on arrival.

Options:

* ``staleness_bound: s`` — stale synchronous parallel (Ho et al. 2013, "More
  effective distributed ML via a stale synchronous parallel parameter
  server"): a worker whose clock (completed iterations) is more than ``s``
  ahead of the slowest worker's waits before pulling.
* ``lr_staleness: inverse`` — the update is scaled by 1 / max(1, staleness)
  (Zhang, Gupta, Lian & Liu 2016, "Staleness-aware async-SGD").
* ``mode: sync`` with ``backup_workers: b`` — every step all workers pull the
  same version; the first N−b gradients to arrive are averaged and applied,
  the b late ones are dropped (Chen, Pan, Monga, Bengio & Jozefowicz 2016,
  "Revisiting distributed synchronous SGD").

Two staleness measures are recorded per applied gradient (``updates.csv``):
``staleness`` = PS version at apply − version pulled (DESIGN.md's definition:
how many other updates landed in between), and ``ssp_staleness`` = the
worker's clock − the slowest worker's clock when it pulled (staleness in the
SSP sense, in iterations; ``staleness_bound`` bounds this one).

The numeric half (:func:`partition`, :class:`ParameterServers`) runs without
SimPy; the timing half is the worker processes below.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from simdist.cluster import Device, Host, Link, Transfer, route
from simdist.collectives import ring_allreduce_s, run_allreduce
from simdist.strategies.base import Strategy

# ---------------------------------------------------------------------------
# Partitioning variables over parameter servers (pure)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """Rows ``[start, stop)`` along axis 0 of variable number ``leaf``, held by PS ``ps``."""

    ps: int
    leaf: int
    path: str
    start: int
    stop: int
    nbytes: int


def _even_splits(rows: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous row ranges, sizes differing by at most one (larger first, as TF)."""
    base, extra = divmod(rows, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def partition(
    leaves: Sequence[tuple[str, tuple[int, ...], int]],
    n_ps: int,
    partitioner: str,
    min_shard_bytes: float = 256 * 1024,
    max_shards: int | None = None,
) -> list[Shard]:
    """Place variables (or shards of them) on ``n_ps`` parameter servers.

    ``leaves`` are ``(path, shape, nbytes)`` in tree order.

    * ``round_robin`` — whole variables, variable i on PS i mod S: what
      ParameterServerStrategy does without a variable partitioner.
    * ``min_size`` — TensorFlow's ``min_max_variable_partitioner``: a variable
      is split along axis 0 into as many shards as keep each at least
      ``min_shard_bytes``, at most ``max_shards`` (default: the number of PS
      tasks); shards are then placed round-robin over the PS tasks.
    """
    if partitioner not in ("round_robin", "min_size"):
        raise ValueError(f"unknown partitioner {partitioner!r}")
    limit = max_shards if max_shards is not None else n_ps
    shards: list[Shard] = []
    next_ps = 0
    for index, (path, shape, nbytes) in enumerate(leaves):
        rows = shape[0] if shape else 1
        parts = 1
        if partitioner == "min_size" and shape:
            bytes_per_row = nbytes / rows
            rows_per_shard = max(1, math.ceil(min_shard_bytes / bytes_per_row))
            parts = max(1, min(limit, math.ceil(rows / rows_per_shard), rows))
        for start, stop in _even_splits(rows, parts):
            size = nbytes * (stop - start) // rows if parts > 1 else nbytes
            shards.append(Shard(next_ps, index, path, start, stop, int(size)))
            next_ps = (next_ps + 1) % n_ps
    return shards


def bytes_per_ps(shards: Sequence[Shard], n_ps: int) -> list[int]:
    """Total bytes of the shards each PS holds."""
    totals = [0] * n_ps
    for shard in shards:
        totals[shard.ps] += shard.nbytes
    return totals


# ---------------------------------------------------------------------------
# The parameter servers' state: shard values, optimizer states, versions
# ---------------------------------------------------------------------------


class ParameterServers:
    """Each PS holds its shards, its own optimizer state and a version counter.

    A PS's version is the number of gradients it has applied.  ``pull`` returns
    references to immutable JAX arrays, so a pulled snapshot never changes.
    """

    def __init__(self, workload: Any, shards: Sequence[Shard], n_ps: int) -> None:
        import jax

        self.workload = workload
        self.shards = list(shards)
        self.n_ps = n_ps
        leaves, self.treedef = jax.tree_util.tree_flatten(workload.params)
        self.shapes = [leaf.shape for leaf in leaves]
        self.by_ps: list[list[int]] = [[] for _ in range(n_ps)]
        for i, shard in enumerate(self.shards):
            self.by_ps[shard.ps].append(i)
        self.per_leaf: dict[int, list[int]] = {}
        for i, shard in enumerate(self.shards):
            self.per_leaf.setdefault(shard.leaf, []).append(i)
        # assemble / split run once per gradient: their keys and slices are fixed here.
        self._keys = [self._key(i) for i in range(len(self.shards))]
        self._leaf_keys = [
            [self._keys[i] for i in self.per_leaf[leaf]] for leaf in range(len(self.shapes))
        ]
        self._ps_slices = [
            [(self._keys[i], self.shards[i].leaf, self._rows(i)) for i in self.by_ps[ps]]
            for ps in range(n_ps)
        ]
        self.values: list[dict[str, Any]] = []
        for ps in range(n_ps):
            self.values.append({self._key(i): self._slice(leaves, i) for i in self.by_ps[ps]})
        self.opt_states = [workload.init_opt_state(v) for v in self.values]
        self.versions = [0] * n_ps

    @staticmethod
    def _key(i: int) -> str:
        return f"{i:06d}"

    def _rows(self, i: int) -> slice | None:
        """Rows of its variable that shard ``i`` holds; None when it holds all of it."""
        shard = self.shards[i]
        if len(self.per_leaf[shard.leaf]) == 1:
            return None
        return slice(shard.start, shard.stop)

    def _slice(self, leaves: Sequence[Any], i: int) -> Any:
        shard = self.shards[i]
        leaf = leaves[shard.leaf]
        if len(self.per_leaf[shard.leaf]) == 1:
            return leaf
        return leaf[shard.start : shard.stop]

    def pull(self, ps: int) -> tuple[dict[str, Any], int]:
        """The current values held by ``ps`` and its version."""
        return self.values[ps], self.versions[ps]

    def assemble(self, pulled: Sequence[dict[str, Any]]) -> Any:
        """A full parameter pytree from one pulled value-dict per PS."""
        import jax
        import jax.numpy as jnp

        flat: dict[str, Any] = {}
        for values in pulled:
            flat.update(values)
        leaves = []
        for keys in self._leaf_keys:
            parts = [flat[key] for key in keys]
            leaves.append(parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0))
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def current(self) -> Any:
        """The parameters as the PS tasks hold them now."""
        return self.assemble(self.values)

    def split(self, grads: Any, ps: int) -> dict[str, Any]:
        """The part of a full gradient pytree that belongs to ``ps``."""
        import jax

        leaves = jax.tree_util.tree_leaves(grads)
        return {
            key: leaves[leaf] if rows is None else leaves[leaf][rows]
            for key, leaf, rows in self._ps_slices[ps]
        }

    def apply(self, ps: int, grads: dict[str, Any], lr_scale: float = 1.0) -> int:
        """Apply a gradient shard on ``ps`` with its own optimizer state; return its new version."""
        self.values[ps], self.opt_states[ps] = self.workload.apply(
            self.values[ps], self.opt_states[ps], grads, lr_scale
        )
        self.versions[ps] += 1
        return self.versions[ps]


# ---------------------------------------------------------------------------
# The strategy: worker processes on the SimPy clock
# ---------------------------------------------------------------------------


class ParameterServerStrategy(Strategy):
    """Asynchronous (or synchronous with backup workers) parameter-server training.

    Failures (DESIGN.md §4): a failed worker drops out — its in-flight
    gradient is lost — and rejoins after its restart with a fresh pull while
    the others go on; a failed PS rolls every task back to the last completed
    checkpoint (written by the chief in the background, without stopping the
    workers) and everyone resumes after the PS's restart and the restore.
    """

    kinds = ("parameter_server",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = self.scenario.strategy
        self.options = options
        self.n_workers = len(self.cluster.workers)
        self.n_ps = len(self.cluster.ps_hosts)
        self.worker_batch = (
            self.scenario.workload.batch_size * self.scenario.cluster.devices_per_host
        )
        self.shards = partition(
            self.costs.param_leaves,
            self.n_ps,
            options.partitioner,
            options.min_shard_bytes,
            options.max_shards,
        )
        self.ps_nbytes = bytes_per_ps(self.shards, self.n_ps)
        self.servers: ParameterServers | None = None
        self.deferred: Any = None
        if self.workload is not None:
            from simdist.numerics.executor import DeferredGradients

            self.servers = ParameterServers(self.workload, self.shards, self.n_ps)
            self.deferred = DeferredGradients(self.workload, self.worker_batch)
        self.versions = [0] * self.n_ps  # mirrors servers.versions; kept in timing-only mode too
        self.clock = [0] * self.n_workers  # completed iterations per worker
        self.claimed = 0
        self.applied = 0  # gradients applied on every PS (global steps)
        self.dropped = 0
        self.lost_gradients = 0
        self.staleness: list[int] = []
        self._progress = self.env.event()
        self._stop = False
        self._procs: list[Any] = []
        self._children: list[list[Transfer]] = [[] for _ in range(self.n_workers)]
        self._routes: dict[tuple[str, str, int], tuple[list[Link], float]] = {}
        self._inflight: list[dict[str, Any] | None] = [None] * self.n_workers
        self._down = [False] * self.n_workers
        self._resume = self.env.event()
        self._pipelines = [self.new_pipeline() for _ in range(self.n_workers)]
        self._saved = self._snapshot()
        self._saved_s = 0.0
        self._checkpointing = False
        self._restoring = False  # a PS failure is being recovered: workers wait for _resume
        self._finished = self.env.event()
        self._epoch = 0  # PS failures so far; a checkpoint begun before one is void
        chief = self.scenario.cluster.chief_names
        self._chief = chief[0] if chief else "chief"

    @property
    def final_params(self) -> Any | None:
        return None if self.servers is None else self.servers.current()

    @property
    def training_devices(self) -> list[Device]:
        return list(self.cluster.devices)

    @property
    def examples_per_step(self) -> int:
        """Async: one worker's batch per applied gradient; sync: the N−b accepted batches."""
        if self.options.mode == "sync":
            return (self.n_workers - self.options.backup_workers) * self.worker_batch
        return self.worker_batch

    # -- timing helpers ---------------------------------------------------

    def _local_allreduce_s(self) -> float:
        """Devices of one worker host sum their gradients over the intra-host link."""
        d = self.scenario.cluster.devices_per_host
        link = self.scenario.cluster.links.intra_host
        return ring_allreduce_s(d, self.costs.grad_nbytes, link.latency_s, link.bandwidth_Bps)

    def _record_worker(
        self,
        w: int,
        start: float,
        end: float,
        kind: str,
        step: int,
        detail: str = "",
        nbytes: int = 0,
    ) -> None:
        self.record_devices(self.cluster.workers[w].devices, start, end, kind, step, detail, nbytes)

    def _move(
        self,
        src: Host,
        dst: Host,
        nbytes: int,
        step: int,
        detail: str,
        then: Callable[[], None] | None = None,
    ) -> Transfer:
        """Start moving ``nbytes`` between a worker and a PS; ``then()`` runs on arrival.

        The PS's track records the interval its NIC serialised these bytes (one
        at a time, so spans never overlap); the worker records its whole pull
        or push phase instead (see :meth:`_phase`). A cancelled transfer (a
        failure) releases its links and records nothing.
        """
        key = (src.name, dst.name, nbytes)
        cached = self._routes.get(key)
        if cached is None:
            links = route(src, dst)
            busy = nbytes / min(link.bandwidth_Bps for link in links)
            cached = self._routes[key] = (links, busy)
        links, busy = cached
        ps = src if src.role == "ps" else dst
        recorder = self.recorder

        def arrived(start: float, _: float) -> None:
            recorder.event(start, start + busy, ps.name, ps.name, "comm", nbytes, step, detail)
            if then is not None:
                then()

        return Transfer(self.env, links, nbytes, arrived)

    def _span(self, seconds: float, record: Any) -> Generator[Any, Any, None]:
        """Wait ``seconds``, then ``record(end_s)``: up to the interruption if a failure cuts it."""
        try:
            yield self.env.timeout(seconds)
        finally:
            record(self.env.now)

    def _phase(
        self, w: int, moves: list[Transfer], step: int, detail: str, nbytes: int
    ) -> Generator[Any, Any, None]:
        """Wait for parallel transfers; record them on the worker as one comm span."""
        start = self.env.now
        self._children[w] = moves  # a failure cancels them (see _abandon)
        try:
            yield self._join(moves)
        finally:
            self._record_worker(w, start, self.env.now, "comm", step, detail, nbytes)
        self._children[w] = []

    def _join(self, moves: list[Transfer]) -> simpy.Event:
        """An event that fires when every move is done, as ``env.all_of`` of their ``done``.

        Scheduled in the same step as ``all_of`` would be (the one processing the last
        ``done``), so simultaneous events keep their order; it skips the condition's
        bookkeeping, which nobody reads here.
        """
        joined = self.env.event()
        remaining = len(moves)
        if remaining == 0:
            return joined.succeed()

        def arrived(_: simpy.Event) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                joined.succeed()

        for move in moves:
            move.done.callbacks.append(arrived)
        return joined

    def _compute(self, w: int, iteration: int) -> Generator[Any, Any, None]:
        """Wait for the batch, then every device of worker ``w`` computes (max rule)."""
        pipeline = self._pipelines[w]
        if pipeline is not None:
            now = self.env.now
            ready = pipeline.take(now)
            if ready > now:
                yield from self._span(
                    ready - now,
                    lambda end: self._record_worker(w, now, end, "input_wait", iteration),
                )
        host = self.cluster.workers[w]
        start = self.env.now
        seconds = [self.compute_s(d, iteration) for d in host.devices]
        longest = max(seconds)

        def record(end: float) -> None:
            for device, s in zip(host.devices, seconds, strict=True):
                done = min(start + s, end)
                self.record_compute(device, start, done - start, iteration)
                self.recorder.event(
                    done,
                    min(start + longest, end),
                    host.name,
                    device.name,
                    "idle",
                    0,
                    iteration,
                    "barrier",
                )

        yield from self._span(longest, record)
        if len(host.devices) > 1:
            a, b = yield from run_allreduce(self.env, [host.intra], self._local_allreduce_s())
            self._record_worker(
                w, a, b, "comm", iteration, "local all-reduce", self.costs.grad_nbytes
            )

    def _pull_all(self, w: int, iteration: int) -> Generator[Any, Any, tuple[list[Any], list[int]]]:
        """Pull every shard in parallel; the values are read when the request is issued."""
        host = self.cluster.workers[w]
        pulled, versions = [], []
        for ps in range(self.n_ps):
            if self.servers is not None:
                values, version = self.servers.pull(ps)
                pulled.append(values)
            else:
                version = self.versions[ps]
            versions.append(version)
        moves = [
            self._move(
                self.cluster.ps_hosts[ps], host, self.ps_nbytes[ps], iteration, f"pull ps{ps}"
            )
            for ps in range(self.n_ps)
        ]
        yield from self._phase(w, moves, iteration, "pull", self.costs.grad_nbytes)
        return pulled, versions

    def _batch(self, w: int, iteration: int) -> tuple[Any, Any]:
        # Worker w's j-th batch is global batch j·W + w: a pure function of
        # (seed, w, j), independent of timing; with one worker it is one_device's order.
        assert self.workload is not None
        return self.workload.batches.batch(iteration * self.n_workers + w, self.worker_batch)

    def _ssp_wait(self, w: int) -> Generator[Any, Any, None]:
        bound = self.options.staleness_bound
        if bound is None:
            return
        start = self.env.now
        while self.clock[w] - min(self.clock) > bound:
            yield self._progress
        self._record_worker(w, start, self.env.now, "idle", self.clock[w], "staleness bound")

    def _tick(self, w: int) -> None:
        self.clock[w] += 1
        event, self._progress = self._progress, self.env.event()
        event.succeed()
        self._check_finished()

    def _check_finished(self) -> None:
        """Training ends when the budget is spent and nothing is in flight.

        Not when every worker process has returned: a worker still sitting
        out a restart must not stretch the run past its last update.
        """
        if self._finished.triggered:
            return
        spent = self.claimed >= self.total_steps and not self._restoring
        if self._stop or (spent and all(g is None for g in self._inflight)):
            self._finished.succeed()

    def _gradient(self, ticket: int) -> tuple[float, Any]:
        loss, grads = self.deferred.result(ticket)
        return float(loss), grads

    # -- asynchronous mode ------------------------------------------------

    def _async_worker(self, w: int) -> Generator[Any, Any, None]:
        """Worker ``w``'s loop; a failure interrupts it wherever it is."""
        cause: Any = None
        while True:
            try:
                if cause is not None:
                    pending, cause = cause, None
                    yield from self._worker_down(w, pending)
                if self._stop or self.claimed >= self.total_steps:
                    return
                yield from self._iteration(w)
            except simpy.Interrupt as interrupt:
                self._abandon(w)
                cause = interrupt.cause

    def _iteration(self, w: int) -> Generator[Any, Any, None]:
        """Pull, compute, push: one gradient of worker ``w``."""
        yield from self._ssp_wait(w)
        if self._stop or self.claimed >= self.total_steps:
            return
        self.claimed += 1
        iteration = self.clock[w]
        ssp = self.clock[w] - min(self.clock)
        gradient: dict[str, Any] = {"remaining": self.n_ps, "ticket": None}
        self._inflight[w] = gradient
        pulled, versions = yield from self._pull_all(w, iteration)
        if self.servers is not None:
            x, y = self._batch(w, iteration)
            gradient["ticket"] = self.deferred.submit(self.servers.assemble(pulled), x, y)
        yield from self._compute(w, iteration)
        host = self.cluster.workers[w]
        pushes = [
            self._move(
                host,
                self.cluster.ps_hosts[ps],
                self.ps_nbytes[ps],
                iteration,
                f"push ps{ps}",
                lambda ps=ps: self._apply(w, ps, versions[ps], ssp, iteration, gradient),
            )
            for ps in range(self.n_ps)
        ]
        yield from self._phase(w, pushes, iteration, "push", self.costs.grad_nbytes)
        self._inflight[w] = None
        self._tick(w)

    def _apply(
        self,
        w: int,
        ps: int,
        pulled_version: int,
        ssp: int,
        iteration: int,
        gradient: dict[str, Any],
    ) -> None:
        """A gradient shard has reached its PS: apply it there (asynchronous SGD)."""
        if self._inflight[w] is not gradient or self._stop:
            return  # training diverged, or the worker failed (its moves are cancelled)
        staleness = self.versions[ps] - pulled_version
        loss = math.nan
        if self.servers is not None:
            if "grads" not in gradient:
                gradient["loss"], gradient["grads"] = self._gradient(gradient["ticket"])
            loss = gradient["loss"]
            if not math.isfinite(loss):
                self._diverge()
                return
            scale = 1.0 / max(1, staleness) if self.options.lr_staleness == "inverse" else 1.0
            self.servers.apply(ps, self.servers.split(gradient["grads"], ps), scale)
        self.versions[ps] += 1
        self.staleness.append(staleness)
        self.recorder.row(
            "updates",
            time_s=self.env.now,
            worker=w,
            ps=ps,
            iteration=iteration,
            version=self.versions[ps],
            staleness=staleness,
            ssp_staleness=ssp,
            loss=loss,
        )
        self.recorder.metric(self.env.now, self.applied, "staleness", staleness)
        gradient["remaining"] -= 1
        if gradient["remaining"] == 0:
            self._applied(loss)

    def _applied(self, loss: float) -> None:
        """One more gradient is applied on every PS: a global step."""
        self.applied += 1
        now = self.env.now
        if self.servers is not None:
            self.recorder.metric(now, self.applied, "train_loss", loss)
            if self.eval_due(self.applied):
                self.evaluate(self.applied, self.servers.current())
        if now > 0:
            self.recorder.metric(
                now, self.applied, "examples_per_s", self.applied * self.examples_per_step / now
            )
        self.steps_done = self.applied
        self.on_step(self.applied)
        if not self._checkpointing and self.checkpoint_due(self.applied, self._saved_s):
            self.env.process(self._write_checkpoint())

    def _diverge(self) -> None:
        if not self._stop:
            self._stop = True
            self.diverged_at = self.applied + 1

    # -- checkpoints and failures ------------------------------------------

    def _snapshot(self) -> dict[str, Any]:
        """Everything a restore puts back; JAX arrays are immutable, so references suffice."""
        state: dict[str, Any] = {
            "applied": self.applied,
            "versions": list(self.versions),
            "clock": list(self.clock),
            "written": False,
        }
        if self.servers is not None:
            state["values"] = list(self.servers.values)
            state["opt_states"] = list(self.servers.opt_states)
        return state

    def _write_checkpoint(self) -> Generator[Any, Any, None]:
        """The chief saves the PS variables in the background; valid once written."""
        self._checkpointing = True
        state, start, epoch = self._snapshot(), self.env.now, self._epoch
        state["written"] = True
        yield self.env.timeout(self.checkpoint_s)
        if epoch != self._epoch:  # a PS failed while the chief was reading it
            self._checkpointing = False
            return
        self.recorder.event(
            start,
            self.env.now,
            self._chief,
            self._chief,
            "checkpoint",
            self.costs.checkpoint_nbytes,
            state["applied"],
            "write",
        )
        self._saved, self._saved_s = state, self.env.now
        self._checkpointing = False

    def _abandon(self, w: int) -> None:
        """Worker ``w`` stops: its transfers are cut and its in-flight gradient is lost."""
        for child in self._children[w]:
            child.cancel()
        self._children[w] = []
        gradient = self._inflight[w]
        if gradient is not None:
            self.lost_gradients += 1
            if gradient["ticket"] is not None and "grads" not in gradient:
                self.deferred.discard(gradient["ticket"])
        self._inflight[w] = None
        self._pipelines[w] = None
        self._check_finished()

    def _worker_down(self, w: int, cause: Any) -> Generator[Any, Any, None]:
        """Sit out a worker restart, or wait for the PS tasks to be restored."""
        start = self.env.now
        if cause == "ps":
            yield self._resume
            self._record_worker(
                w,
                start,
                self.env.now,
                "restore",
                self.clock[w],
                "PS rolled back to the last checkpoint",
            )
        else:
            restart_s = float(cause)
            self._down[w] = True
            yield self.env.timeout(restart_s)
            self._down[w] = False
            self._record_worker(w, start, self.env.now, "restart", self.clock[w])
            self.time_lost_s += restart_s
            while self._restoring:  # restarted while the PS tasks are being restored
                waited = self.env.now
                yield self._resume
                self._record_worker(w, waited, self.env.now, "restore", self.clock[w])
        self._pipelines[w] = self.new_pipeline()

    def _worker_for(self, spec: Any) -> int:
        if spec.role == "worker":
            return spec.index
        return spec.index // self.scenario.cluster.devices_per_host

    def _failures(self, entry: int, spec: Any) -> Generator[Any, Any, None]:
        """Fire failure entry ``entry`` at its times (the engine stops when training ends)."""
        from simdist.faults import failure_times

        for at in failure_times(spec, self.scenario.seed, entry):
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            if self._stop or self.applied >= self.total_steps:
                return
            if spec.role == "ps":
                if not self._restoring:  # a failure while everyone is already down is moot
                    yield from self._ps_failure(spec)
                continue
            w = self._worker_for(spec)
            if self._down[w] or not self._procs[w].is_alive:
                continue
            self.failures += 1
            host = self.cluster.workers[w].name
            self.recorder.event(
                self.env.now,
                self.env.now + spec.restart_s,
                host,
                host,
                "failure",
                0,
                self.clock[w],
                spec.target,
            )
            self._procs[w].interrupt(spec.restart_s)

    def _ps_failure(self, spec: Any) -> Generator[Any, Any, None]:
        """A PS task fails: everyone stops; all PS tasks roll back to the last checkpoint."""
        self.failures += 1
        saved, now = self._saved, self.env.now
        restore_s = self.checkpoint_s if saved["written"] else 0.0
        host = self.cluster.ps_hosts[spec.index].name
        self.recorder.event(
            now, now + spec.restart_s, host, host, "failure", 0, self.applied, spec.target
        )
        self.recorder.event(
            now + spec.restart_s,
            now + spec.restart_s + restore_s,
            host,
            host,
            "restore",
            self.costs.checkpoint_nbytes if saved["written"] else 0,
            saved["applied"],
            "checkpoint" if saved["written"] else "initial state",
        )
        self._resume = self.env.event()
        self._restoring = True
        self._epoch += 1
        self._checkpointing = False
        for w, proc in enumerate(self._procs):
            if proc.is_alive:
                proc.interrupt("ps")
            self._down[w] = False
        self.lost_steps += self.applied - saved["applied"]
        self.time_lost_s += (now - self._saved_s) + spec.restart_s + restore_s
        yield self.env.timeout(spec.restart_s + restore_s)
        self.applied = self.claimed = saved["applied"]
        self.versions = list(saved["versions"])
        self.clock = list(saved["clock"])
        if self.servers is not None:
            self.servers.values = list(saved["values"])
            self.servers.opt_states = list(saved["opt_states"])
            self.servers.versions = list(saved["versions"])
        self._saved_s = self.env.now
        self._restoring = False
        self._resume.succeed()

    # -- synchronous mode with backup workers ----------------------------

    def _sync_worker_step(
        self,
        w: int,
        step: int,
        arrivals: list[tuple[int, int | None]],
        enough: simpy.Event,
        needed: int,
    ) -> Generator[Any, Any, None]:
        """One worker's part of sync step ``step``: pull, compute, push every shard."""
        host = self.cluster.workers[w]
        ticket = None
        try:
            pulled, _ = yield from self._pull_all(w, step)
            if self.servers is not None:
                x, y = self._batch(w, step)
                ticket = self.deferred.submit(self.servers.assemble(pulled), x, y)
            yield from self._compute(w, step)
            pushes = [
                self._move(
                    host, self.cluster.ps_hosts[ps], self.ps_nbytes[ps], step, f"push ps{ps}"
                )
                for ps in range(self.n_ps)
            ]
            yield from self._phase(w, pushes, step, "push", self.costs.grad_nbytes)
            arrivals.append((w, ticket))
            if len(arrivals) == needed:
                enough.succeed()
        except simpy.Interrupt:
            # A late (backup) worker: its transfers are cut and its gradient dropped.
            for child in self._children[w]:
                child.cancel()
            self._children[w] = []
            if ticket is not None:
                self.deferred.discard(ticket)
            self.dropped += 1
            self.recorder.row("dropped", time_s=self.env.now, worker=w, step=step)

    def _sync_loop(self) -> Generator[Any, Any, None]:
        needed = self.n_workers - self.options.backup_workers
        for step in range(self.total_steps):
            start = self.env.now
            arrivals: list[tuple[int, int | None]] = []
            enough = self.env.event()
            procs = [
                self.env.process(self._sync_worker_step(w, step, arrivals, enough, needed))
                for w in range(self.n_workers)
            ]
            yield enough
            accepted = {w for w, _ in arrivals[:needed]}
            for w, proc in enumerate(procs):
                if w not in accepted and proc.is_alive:
                    proc.interrupt("late: backup worker dropped")
            # Let the interrupted processes record their drop at this instant.
            yield self.env.timeout(0)
            for w, ticket in arrivals[needed:]:  # arrived at the same instant, too late
                if ticket is not None:
                    self.deferred.discard(ticket)
                self.dropped += 1
                self.recorder.row("dropped", time_s=self.env.now, worker=w, step=step)
            loss = None
            if self.servers is not None:
                results = [self._gradient(t) for _, t in arrivals[:needed]]
                loss = sum(r[0] for r in results) / needed
                import jax

                mean = jax.tree.map(lambda *g: sum(g) / needed, *(r[1] for r in results))
                for ps in range(self.n_ps):
                    self.servers.apply(ps, self.servers.split(mean, ps))
            for ps in range(self.n_ps):
                self.versions[ps] += 1
            for w, _ in arrivals[:needed]:
                self.staleness.append(0)
                self.recorder.row(
                    "updates",
                    time_s=self.env.now,
                    worker=w,
                    ps=-1,
                    iteration=step,
                    version=self.versions[0],
                    staleness=0,
                    ssp_staleness=0,
                    loss=math.nan if loss is None else loss,
                )
            self.applied = step + 1
            if not self.end_step(start, self.applied, loss, lambda: self.final_params):
                return

    # -- the run -----------------------------------------------------------

    def process(self) -> Generator[Any, Any, None]:
        if self.options.mode == "sync":
            yield from self._sync_loop()
            return
        self._procs = [self.env.process(self._async_worker(w)) for w in range(self.n_workers)]
        for entry, spec in enumerate(self.scenario.faults.failures):
            self.env.process(self._failures(entry, spec))
        yield self.env.any_of([self.env.all_of(self._procs), self._finished])
        # Lost gradients (worker failures) spend budget, so the last applied step
        # may not be an evaluation point: evaluate the final parameters anyway.
        if self.servers is not None and self.diverged_at is None and self.applied:
            if not self.eval_due(self.applied):
                self.evaluate(self.applied, self.servers.current())

    def summary(self) -> dict[str, Any]:
        values = np.asarray(self.staleness, dtype=float)
        now = self.env.now
        stats = (
            {
                "mean": float(values.mean()),
                "p50": float(np.percentile(values, 50)),
                "p95": float(np.percentile(values, 95)),
                "max": float(values.max()),
            }
            if values.size
            else {"mean": None, "p50": None, "p95": None, "max": None}
        )
        return {
            "workers": self.n_workers,
            "ps_tasks": self.n_ps,
            "mode": self.options.mode,
            "partitioner": self.options.partitioner,
            "shards": len(self.shards),
            "bytes_per_ps": self.ps_nbytes,
            "staleness": stats,
            "applied_updates": self.applied,
            "applied_updates_per_s": self.applied / now if now > 0 else None,
            "dropped_gradients": self.dropped,
            "lost_gradients": self.lost_gradients,
        }
