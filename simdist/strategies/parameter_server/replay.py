"""The numerics of an asynchronous run, replayed from its dataflow in large XLA programs.

The SimPy pass recorded every gradient (its batch, the PS states it pulled) and
every op in order (:mod:`.dataflow`). The replay first *plans* on the host
(:mod:`.plan`) — no values needed: whenever the next applied shard needs a gradient not yet
computed, every gradient whose pulled states exist forms a *wave*, computed
:data:`BUCKET` at a time; then each PS applies what it can, up to
:data:`~simdist.numerics.chains.CHAIN` shards per call. Then it *executes* the
plan on the device:

* the states of each PS (values, optimizer state, model state) live in a
  *bank*, one array of ``[slots, ...]`` per variable shard; the gradients in
  another. The plan allocates the slots: a state keeps its slot while a later
  gradient, update or evaluation reads it;
* a wave is one program: it gathers each lane's parameter version from the
  banks, computes the 8 gradients (``Workload.stacked_vmap``) and writes them
  into the gradient bank;
* a chain is one program per PS: a ``lax.scan`` over its updates, reading the
  gradient shards from the bank and writing each new state into its slot
  (optimizers whose update XLA compiles differently in a loop body run one
  standard update call per shard instead: :func:`~simdist.numerics.chains.scan_exact`).

Banks are donated, so updates happen in place, and nothing waits for a value
until the end: Python plans and dispatches while XLA computes. In a run without
failures this starts during the simulation: every few applied shards the
strategy plans and dispatches what the dataflow holds so far (:meth:`Replay.advance`),
keeping the states later ops may still read (each PS's current one, and those
read by pulls not yet ticketed), so the device computes while SimPy goes on;
the banks grow when the plan needs more slots. The losses are read at the end;
the first applied shard whose gradient's loss is not finite is the divergence
cut (the run is then simulated again to stop there; what was computed past it
is discarded).

Bit for bit what the step-by-step loop computed: a lane of the 8-wide gradient
program does not depend on the other lanes nor on whether its version was
gathered in the program or stacked outside, and the fused updates equal one
call per update (tests/test_ps_dataflow.py; 20 report folders byte-identical).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from simdist.numerics.chains import CHAIN
from simdist.numerics.models import update_moving_stats
from simdist.numerics.optim import apply_updates
from simdist.strategies.parameter_server.dataflow import Apply, Dataflow
from simdist.strategies.parameter_server.plan import BUCKET, Chain, Plan, Wave
from simdist.strategies.parameter_server.servers import ParameterServers

if TYPE_CHECKING:
    from simdist.numerics.executor import Workload


class Outcome(NamedTuple):
    """What the replay computed: losses by ticket, evaluations in order, the final parameters.

    ``cut`` is the number of shards applied before the first one whose gradient's
    loss is not finite (None when training did not diverge; then nothing else is
    meaningful).
    """

    losses: dict[int, float]
    evaluations: list[dict[str, float]]
    final: Any
    cut: int | None


def outcome_of(
    flow: Dataflow,
    losses: dict[int, float],
    evaluations: list[dict[str, float]],
    final: Callable[[], Any],
) -> Outcome:
    """The :class:`Outcome` of a replay that computed ``losses`` (by ticket) and
    ``evaluations``: cut at the first applied shard whose loss is not finite, else with
    the final parameters (``final()``)."""
    applied = 0
    for op in flow.ops:
        if isinstance(op, Apply):
            if not np.isfinite(losses[op.ticket]):
                return Outcome(losses, evaluations, None, applied)
            applied += 1
    return Outcome(losses, evaluations, final(), None)


class Replay:
    """Replays one run's :class:`~.dataflow.Dataflow` on the values of ``servers``.

    ``servers`` holds the initial values (a :class:`~.servers.ParameterServers`
    with the workload); a gradient's batch is global batch ``Ticket.batch`` of
    ``global_batch`` examples of ``workload.batches``. :meth:`advance`, called while
    the simulation runs, plans and dispatches what the dataflow holds so far, so
    the device computes while the simulation goes on; :meth:`run` does the rest.
    """

    def __init__(
        self,
        servers: ParameterServers,
        workload: Workload,
        global_batch: int,
        replicas: int = 1,
        workers: int = 1,
        compressors: Any = None,
    ) -> None:
        assert servers.values is not None and servers.opt_states is not None
        assert servers.states is not None
        self.servers = servers
        self.workload = workload
        self.global_batch = int(global_batch)
        self.replicas = int(replicas)
        self.n_ps = servers.n_ps
        self.n_leaves = servers.treedef.num_leaves
        self.workers = int(workers)
        #: Each worker's push compressor (:mod:`.worker_compressors`), or None.
        self.compressors = compressors
        self.calls = 0  # gradient calls, for benchmarks
        self.chains = 0  # update chains (or single updates), for benchmarks
        self.plan = Plan(self.n_ps)
        # Up to about one gradient per worker waits for its PS tasks: a gradient bank of that
        # size from the start spares a segmented replay recompiling its programs as it grows.
        self._gradient_slots = max(8, 1 << int(workers).bit_length())
        self._banks: dict[str, Any] | None = None
        self._evaluations: list[Any] = []  # the evaluations' device results, in order
        self._waves: list[tuple[list[int], Any]] = []  # each wave's tickets and losses

    def advance(self, flow: Dataflow, held: Sequence[Sequence[int]]) -> None:
        """Plan and dispatch what ``flow`` recorded so far, keeping the states ``held``
        (see :meth:`Plan.add`) for what comes later. Nothing waits for the device."""
        self.plan.add(flow, held)
        self._dispatch(flow)

    def run(self, flow: Dataflow, final_ids: Sequence[int]) -> Outcome:
        """Compute every applied gradient, update and evaluation of ``flow`` in order (what
        :meth:`advance` has not), then read the losses and the evaluations."""
        self.plan.add(flow, (), final=final_ids)
        programs = self._dispatch(flow)
        banks = self._banks
        assert banks is not None
        evaluations = [self.workload.evaluated(out) for out in self._evaluations]
        losses: dict[int, float] = {}
        for tickets, loss in self._waves:
            values = np.asarray(loss)
            for lane, t in enumerate(tickets):
                losses[t] = float(values[lane])
        final = self.plan.final
        return outcome_of(
            flow,
            losses,
            evaluations,
            lambda: programs.gather(banks["values"], banks["models"], final),
        )

    def _dispatch(self, flow: Dataflow) -> _Programs:
        """Execute the steps planned since the last call on the banks (first enlarged if
        the plan uses more slots than they have)."""
        plan = self.plan
        steps = plan.take()
        programs = self.programs()
        capacities = [slots.capacity for slots in plan.states]
        self._gradient_slots = max(self._gradient_slots, plan.gradients.capacity)
        if self._banks is None:
            self._banks = programs.banks(self.servers, capacities, self._gradient_slots)
        else:
            programs.grow(self._banks, capacities, self._gradient_slots)
        banks, scratch = self._banks, plan.scratch
        for step in steps:
            if isinstance(step, Wave):
                xs, ys = self.batches(step.tickets, flow)
                loss, banks["grads"], banks["moments"] = programs.wave(
                    banks["values"],
                    banks["grads"],
                    banks["moments"],
                    step.slots,
                    xs,
                    ys,
                    step.targets,
                )
                self._waves.append((step.tickets, loss))
                self._compress(step, flow, banks)
                self.calls += 1
            elif isinstance(step, Chain):
                programs.chain(banks, step, scratch[step.ps])
                self.chains += 1
            else:
                variables = programs.gather(banks["values"], banks["models"], step.slots)
                self._evaluations.append(self.workload.evaluate_async(variables))
        return programs

    def _compress(self, wave: Wave, flow: Dataflow, banks: dict[str, Any]) -> None:
        """Each gradient of ``wave`` as its worker pushed it: compressed with the worker's
        residual, in ticket order (a worker's tickets are its pushes in order)."""
        if self.compressors is None:
            return
        lanes = sorted(zip(wave.tickets, wave.targets, strict=False))
        for ticket, slot in lanes:
            w = flow.tickets[ticket].batch % self.workers
            banks["grads"] = self.compressors.compress_slot(w, ticket, banks["grads"], int(slot))

    def programs(self) -> _Programs:
        """The jitted programs for this structure of shards, kept on the workload: a run
        with the same model, batch and shards reuses them (and their traces)."""
        s = self.servers
        key = (
            tuple(
                tuple((k, leaf, None if r is None else (r.start, r.stop)) for k, leaf, r in held)
                for held in s.ps_slices + s.ps_state_slices
            ),
            self.global_batch,
            self.replicas,
        )
        cache = self.workload.__dict__.setdefault("_replay_programs", {})
        if key not in cache:
            cache[key] = _Programs(s, self.workload, self.global_batch, self.replicas)
        return cache[key]

    def batches(
        self, tickets: Sequence[int], flow: Dataflow, lanes: int = BUCKET
    ) -> tuple[np.ndarray, np.ndarray]:
        """The batches of ``tickets``, padded to ``lanes`` with the last, in one gather:
        BatchStream.batch's rows, all at once."""
        stream = self.workload.batches
        padded = list(tickets) + [tickets[-1]] * (lanes - len(tickets))
        size = self.global_batch
        rows = np.concatenate([stream.indices(flow.tickets[t].batch, size) for t in padded])
        data = stream.dataset
        xs = data.x_train[rows].reshape(lanes, size, *data.x_train.shape[1:])
        ys = data.y_train[rows].reshape(lanes, size, *data.y_train.shape[1:])
        return xs, ys


class _Programs:
    """The jitted programs and initial banks of one replay (one trace per run's structure)."""

    def __init__(
        self, servers: ParameterServers, workload: Workload, global_batch: int, replicas: int
    ) -> None:
        s, wl = servers, workload
        self.servers, self.workload = s, wl
        n = s.treedef.num_leaves
        self.n_leaves = n
        owner = {
            key: ps for ps in range(s.n_ps) for key, *_ in s.ps_slices[ps] + s.ps_state_slices[ps]
        }
        self.leaf_parts = [[(owner[k], k) for k in keys] for keys in s.leaf_keys]
        vm = wl.stacked_vmap(global_batch, replicas)
        treedef = s.treedef

        def params_of(values: Sequence[dict], slots: Any) -> Any:
            """Each lane's parameter version, gathered from the banks: leaves [8, ...]."""
            leaves = []
            for parts in self.leaf_parts[:n]:
                arrays = [values[ps][key][slots[:, ps]] for ps, key in parts]
                leaves.append(arrays[0] if len(arrays) == 1 else jnp.concatenate(arrays, axis=1))
            return jax.tree_util.tree_unflatten(treedef, leaves)

        def wave(values, grads, moments, slots, xs, ys, targets):
            loss, g, m = vm(params_of(values, slots), xs, ys)
            grads = [
                bank.at[targets].set(a)
                for bank, a in zip(grads, jax.tree_util.tree_leaves(g), strict=True)
            ]
            moments = [
                bank.at[targets].set(a)
                for bank, a in zip(moments, jax.tree_util.tree_leaves(m), strict=True)
            ]
            return loss, grads, moments

        self.wave = jax.jit(wave, donate_argnums=(1, 2))

        def gather(values, models, slots):
            slots = jnp.asarray(slots)
            leaves = []
            for parts in self.leaf_parts:
                arrays = [
                    (values if (ps, key) in self._value_keys else models)[ps][key][slots[ps]]
                    for ps, key in parts
                ]
                leaves.append(arrays[0] if len(arrays) == 1 else jnp.concatenate(arrays, axis=0))
            params = jax.tree_util.tree_unflatten(treedef, leaves[:n])
            if not s.state_treedef.num_leaves:
                return params
            state = jax.tree_util.tree_unflatten(s.state_treedef, leaves[n:])
            return wl.variables(params, state)

        self._value_keys = {(ps, key) for ps in range(s.n_ps) for key, *_ in s.ps_slices[ps]}
        self._gather = jax.jit(gather)
        self._chains: dict[int, Any] = {}

    def gather(self, values, models, slots) -> Any:
        return self._gather(values, models, np.asarray(slots, np.int32))

    def banks(
        self, servers: ParameterServers, state_slots: Sequence[int], gradient_slots: int
    ) -> dict[str, Any]:
        """Every bank: ``state_slots[ps]`` states of each PS, the initial one (as
        ``servers`` hold it) in slot 0, and ``gradient_slots`` gradients."""
        wl = self.workload

        def bank(first: Any, slots: int) -> Any:
            """A bank of ``slots`` with ``first`` in slot 0."""
            first = np.asarray(first)
            out = np.zeros((slots, *first.shape), first.dtype)
            out[0] = first
            return jnp.asarray(out)

        s = servers
        values, opts, models = [], [], []
        for ps in range(s.n_ps):
            size = state_slots[ps]
            values.append({k: bank(a, size) for k, a in s.values[ps].items()})
            opts.append(jax.tree.map(lambda a, size=size: bank(a, size), s.opt_states[ps]))
            models.append({k: bank(a, size) for k, a in s.states[ps].items()})
        size = gradient_slots
        leaves = jax.tree_util.tree_leaves(wl.params)
        state_leaves = jax.tree_util.tree_leaves(wl.model_state)
        # NumPy then one transfer each (jnp.zeros would be a program of its own).
        grads = [jnp.asarray(np.zeros((size, *a.shape), a.dtype)) for a in leaves]
        moments = [jnp.asarray(np.zeros((size, *a.shape), a.dtype)) for a in state_leaves]
        return {
            "values": values,
            "opts": opts,
            "models": models,
            "grads": grads,
            "moments": moments,
        }

    def grow(self, banks: dict[str, Any], state_slots: Sequence[int], gradient_slots: int) -> None:
        """Enlarge ``banks`` in place to at least these slots (a segmented replay learns how
        many it needs as it goes); the slots in use keep their contents."""

        def pad(a: Any, slots: int) -> Any:
            if a.shape[0] >= slots:
                return a
            return jnp.concatenate([a, jnp.zeros((slots - a.shape[0], *a.shape[1:]), a.dtype)])

        for ps, size in enumerate(state_slots):
            banks["values"][ps] = {k: pad(a, size) for k, a in banks["values"][ps].items()}
            banks["opts"][ps] = jax.tree.map(lambda a, size=size: pad(a, size), banks["opts"][ps])
            banks["models"][ps] = {k: pad(a, size) for k, a in banks["models"][ps].items()}
        banks["grads"] = [pad(a, gradient_slots) for a in banks["grads"]]
        banks["moments"] = [pad(a, gradient_slots) for a in banks["moments"]]

    def chain(self, banks: dict[str, Any], chain: Chain, scratch: int) -> None:
        """Apply ``chain``'s updates to its PS's banks (in place)."""
        ps = chain.ps
        if self.workload.scan_updates:
            fn = self._chains.get(ps) or self._scan_chain(ps)
            pad = CHAIN - len(chain.ops)
            grads = np.array(chain.grads + [chain.grads[-1]] * pad, np.int32)
            targets = np.array(chain.targets + [scratch] * pad, np.int32)
            scales = np.array([op.scale for op in chain.ops] + [1.0] * pad, np.float32)
            banks["values"][ps], banks["opts"][ps], banks["models"][ps] = fn(
                banks["values"][ps],
                banks["opts"][ps],
                banks["models"][ps],
                banks["grads"],
                banks["moments"],
                np.int32(chain.source),
                grads,
                scales,
                targets,
            )
            return
        get, put, shard = self._chains.get(ps) or self._call_chain(ps)
        values, opt, model = get(
            banks["values"][ps], banks["opts"][ps], banks["models"][ps], np.int32(chain.source)
        )
        for op, gslot, target in zip(chain.ops, chain.grads, chain.targets, strict=True):
            grad, moments = shard(banks["grads"], banks["moments"], np.int32(gslot))
            values, opt = self.workload.apply(values, opt, grad, op.scale)
            if moments:
                model = self.workload.update_state(model, moments)
            banks["values"][ps], banks["opts"][ps], banks["models"][ps] = put(
                banks["values"][ps],
                banks["opts"][ps],
                banks["models"][ps],
                values,
                opt,
                model,
                np.int32(target),
            )

    def _shards(
        self, ps: int, grads: Sequence[Any], moments: Sequence[Any], slot: Any
    ) -> tuple[dict, dict]:
        s, n = self.servers, self.n_leaves

        def cut(a: Any, rows: slice | None) -> Any:
            return a if rows is None else a[rows]

        g = {key: cut(grads[leaf][slot], rows) for key, leaf, rows in s.ps_slices[ps]}
        m = {key: cut(moments[leaf - n][slot], rows) for key, leaf, rows in s.ps_state_slices[ps]}
        return g, m

    def _scan_chain(self, ps: int) -> Any:
        wl = self.workload
        momentum = getattr(wl.model, "batch_norm_momentum", None)

        def chain(vbank, obank, mbank, grads, moments, source, gslots, scales, targets):
            first = (
                {k: a[source] for k, a in vbank.items()},
                jax.tree.map(lambda a: a[source], obank),
                {k: a[source] for k, a in mbank.items()},
            )

            def body(carry, step):
                (values, opt, model), (vbank, obank, mbank) = carry
                gslot, scale, target = step
                grad, batch_moments = self._shards(ps, grads, moments, gslot)
                values, opt = apply_updates(wl.optimizer, values, opt, grad, scale)
                if batch_moments:
                    model = update_moving_stats(model, batch_moments, momentum)
                vbank = {k: a.at[target].set(values[k]) for k, a in vbank.items()}
                obank = jax.tree.map(lambda a, b: a.at[target].set(b), obank, opt)
                mbank = {k: a.at[target].set(model[k]) for k, a in mbank.items()}
                return ((values, opt, model), (vbank, obank, mbank)), None

            carry = (first, (vbank, obank, mbank))
            (_, banks), _ = jax.lax.scan(body, carry, (gslots, scales, targets))
            return banks

        fn = jax.jit(chain, donate_argnums=(0, 1, 2))
        self._chains[ps] = fn
        return fn

    def _call_chain(self, ps: int) -> tuple[Any, Any, Any]:
        def get(vbank, obank, mbank, slot):
            return (
                {k: a[slot] for k, a in vbank.items()},
                jax.tree.map(lambda a: a[slot], obank),
                {k: a[slot] for k, a in mbank.items()},
            )

        def put(vbank, obank, mbank, values, opt, model, slot):
            return (
                {k: a.at[slot].set(values[k]) for k, a in vbank.items()},
                jax.tree.map(lambda a, b: a.at[slot].set(b), obank, opt),
                {k: a.at[slot].set(model[k]) for k, a in mbank.items()},
            )

        fns = (
            jax.jit(get),
            jax.jit(put, donate_argnums=(0, 1, 2)),
            jax.jit(lambda grads, moments, slot: self._shards(ps, grads, moments, slot)),
        )
        self._chains[ps] = fns
        return fns
