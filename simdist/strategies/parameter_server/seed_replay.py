"""The dataflow replays of several runs at once: seeds for the price of one.

:func:`simdist.engine.run_batch` simulates the runs one after another; an asynchronous
parameter-server run then leaves its :class:`~.dataflow.Dataflow` unreplayed
(:class:`DeferredReplay`). The runs whose replays share compiled programs (same model,
batch, optimizer and shards; seeds differ) are replayed together here:

* their plans (:class:`~.plan.Plan`, one per run, each planned in one go as a run alone
  plans it after its simulation) are executed on **one set of banks**: each run has
  its own range of slots in every bank, so its states and gradients are where its own
  plan put them, shifted;
* the gradient **waves** of several runs share one 8-wide call: a run with 4 workers
  fills about half of a wave, so two runs fill one. A lane's bits depend neither on the
  other lanes nor on its position (tests/test_ps_dataflow.py), so every gradient is the
  one its run alone computes; :data:`COPIES` such calls run as one program
  (:class:`WaveCopies`);
* the update chains of the runs on one PS run :data:`WIDE` runs at a time in one program
  (:class:`WideChains`); evaluations are each run's own calls, in its own order.

Each run's report equals its report alone, byte for byte (tests/test_batched_runs.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from simdist.batched_runs import DeferredRun
from simdist.numerics.chains import CHAIN
from simdist.numerics.models import update_moving_stats
from simdist.numerics.optim import apply_updates
from simdist.strategies.parameter_server.plan import BUCKET, Chain, Check, Wave
from simdist.strategies.parameter_server.replay import Outcome, outcome_of

if TYPE_CHECKING:
    from simdist.strategies.parameter_server.strategy import ParameterServerStrategy


def _bank_size(n: int) -> int:
    """Slots of a shared bank: a power of two (at least 8), so batches of runs of similar
    sizes share compiled programs, as :attr:`~.plan.Slots.capacity` does for one run."""
    return max(8, 1 << (n - 1).bit_length())


class DeferredReplay(DeferredRun):
    """An asynchronous parameter-server run whose dataflow replay waits for the others'."""

    #: Runs replayed together: one update program holds the chains of :data:`WIDE` runs.
    group_runs = 8

    def __init__(self, strategy: ParameterServerStrategy) -> None:
        self.strategy = strategy
        self.replay = strategy.replay_engine

    @property
    def key(self) -> Hashable:
        return id(self.replay.programs())

    @classmethod
    def execute(cls, members: Sequence[DeferredRun]) -> None:
        cls.dispatch(members)()

    @classmethod
    def dispatch(cls, members: Sequence[DeferredRun]) -> Callable[[], None]:
        """Plan every member's replay and dispatch it on shared banks; the returned
        function reads the values and finishes each run."""
        runs = [m for m in members if isinstance(m, DeferredReplay)]
        for run in runs:
            strategy = run.strategy
            assert strategy.dataflow is not None
            run.replay.plan.add(strategy.dataflow, (), final=strategy.servers.current())
        collect = SharedBanks(runs).dispatch()

        def finish() -> None:
            for run, outcome in zip(runs, collect(), strict=True):
                run.strategy.finish_replay(outcome)

        return finish


class SharedBanks:
    """The plans of ``runs`` executed on one set of banks, their waves packed together."""

    def __init__(self, runs: Sequence[DeferredReplay]) -> None:
        self.runs = list(runs)
        first = self.runs[0].replay
        self.programs = first.programs()
        self.n_ps = first.n_ps
        plans = [run.replay.plan for run in self.runs]
        self.bases = np.zeros((len(plans), self.n_ps), np.int32)  # first state slot of each
        self.gbases = np.zeros(len(plans), np.int32)  # first gradient slot of each
        states = np.zeros(self.n_ps, np.int64)
        gradients = 0
        for k, plan in enumerate(plans):
            self.bases[k] = states
            self.gbases[k] = gradients
            states += [slots.capacity for slots in plan.states]
            gradients += plan.gradients.capacity
        self.state_slots = [_bank_size(int(n)) for n in states]
        self.scratch = [
            [int(b) + s for b, s in zip(self.bases[k], plan.scratch, strict=True)]
            for k, plan in enumerate(plans)
        ]
        self.gradient_slots = _bank_size(gradients)

    def dispatch(self) -> Callable[[], list[Outcome]]:
        """Dispatch every run's waves, chains and evaluations, in each run's order; the
        returned function waits for the values and gives each run's outcome."""
        programs = self.programs
        servers = [(run.replay.servers, self.bases[k]) for k, run in enumerate(self.runs)]
        banks = programs.banks(servers, self.state_slots, self.gradient_slots)
        steps = [self._shifted(k, run.replay.plan.take()) for k, run in enumerate(self.runs)]
        at = [0] * len(steps)
        waves: list[tuple[list[tuple[int, int]], Any]] = []  # (run, ticket) of each lane, loss
        evaluations: list[list[Any]] = [[] for _ in self.runs]
        while any(i < len(s) for i, s in zip(at, steps, strict=True)):
            ready = [
                k for k, s in enumerate(steps) if at[k] < len(s) and isinstance(s[at[k]], Wave)
            ]
            calls = [self._lanes(g) for g in _packed([(k, steps[k][at[k]]) for k in ready])]
            for start in range(0, len(calls), COPIES):
                waves.extend(self._waves(calls[start : start + COPIES], banks))
            for k in ready:
                at[k] += 1
            self._updates(steps, at, banks, evaluations)
        return lambda: self._outcomes(banks, waves, evaluations)

    def _outcomes(
        self,
        banks: dict[str, Any],
        waves: list[tuple[list[tuple[int, int]], Any]],
        evaluations: list[list[Any]],
    ) -> list[Outcome]:
        programs = self.programs
        losses: list[dict[int, float]] = [{} for _ in self.runs]
        for lanes, loss in waves:
            values = np.asarray(loss)
            for lane, (k, ticket) in enumerate(lanes):
                losses[k][ticket] = float(values[lane])
        outcomes = []
        for k, run in enumerate(self.runs):
            replay = run.replay
            evaluated = [replay.workload.evaluated(out) for out in evaluations[k]]
            final = tuple(int(s) for s in np.asarray(replay.plan.final) + self.bases[k])

            def gather(final: tuple[int, ...] = final) -> Any:
                return programs.gather(banks["values"], banks["models"], final)

            flow = run.strategy.dataflow
            assert flow is not None
            outcomes.append(outcome_of(flow, losses[k], evaluated, gather))
        return outcomes

    def _updates(
        self,
        steps: list[list[Wave | Chain | Check]],
        at: list[int],
        banks: dict[str, Any],
        evaluations: list[list[Any]],
    ) -> None:
        """Every run's chains and evaluations up to its next wave, each run's in its order:
        layer by layer, the next chain of every run on the same PS in one program
        (:class:`WideChains`) where the optimizer's chains are scanned."""
        programs = self.programs
        wide = self.runs[0].replay.workload.scan_updates
        while True:
            layer: dict[int, list[tuple[Chain, int]]] = {}
            for k, run_steps in enumerate(steps):
                while at[k] < len(run_steps) and isinstance(run_steps[at[k]], Check):
                    check = run_steps[at[k]]
                    variables = programs.gather(banks["values"], banks["models"], check.slots)
                    workload = self.runs[k].replay.workload
                    evaluations[k].append(workload.evaluate_async(variables))
                    at[k] += 1
                if at[k] < len(run_steps) and isinstance(run_steps[at[k]], Chain):
                    chain = run_steps[at[k]]
                    scratch = self.scratch[k][chain.ps]
                    if wide:
                        layer.setdefault(chain.ps, []).append((chain, scratch))
                    else:
                        programs.chain(banks, chain, scratch)
                    at[k] += 1
            if not layer and not any(
                at[k] < len(s) and not _is_wave(s[at[k]]) for k, s in enumerate(steps)
            ):
                return
            for ps, chains in sorted(layer.items()):
                fn = programs.extra.get(("wide", ps))
                if fn is None:
                    fn = programs.extra[("wide", ps)] = WideChains(programs, ps)
                for start in range(0, len(chains), WIDE):
                    fn(banks, chains[start : start + WIDE])

    def _shifted(self, k: int, steps: list[Wave | Chain | Check]) -> list[Wave | Chain | Check]:
        """Run ``k``'s steps with its slots moved into its ranges of the shared banks."""
        base, gbase = self.bases[k], int(self.gbases[k])
        out: list[Wave | Chain | Check] = []
        for step in steps:
            if isinstance(step, Wave):
                out.append(Wave(step.tickets, step.slots + base, step.targets + gbase))
            elif isinstance(step, Chain):
                b = int(base[step.ps])
                out.append(
                    Chain(
                        step.ps,
                        step.source + b,
                        step.ops,
                        [g + gbase for g in step.grads],
                        [t + b for t in step.targets],
                    )
                )
            else:
                out.append(Check(tuple(int(s) for s in np.asarray(step.slots) + base)))
        return out

    def _lanes(self, group: list[tuple[int, Wave]]) -> tuple[list, tuple[np.ndarray, ...]]:
        """One 8-wide gradient call's lanes for the waves of ``group`` (run, wave), in
        order, padded with the last lane aimed at its run's scratch gradient slot: the
        (run, ticket) of each lane and the call's slots, inputs, labels and targets."""
        slots, targets, xs, ys, lanes = [], [], [], [], []
        for k, wave in group:
            n = len(wave.tickets)
            replay = self.runs[k].replay
            flow = self.runs[k].strategy.dataflow
            assert flow is not None
            x, y = replay.batches(wave.tickets, flow, lanes=n)
            slots.append(wave.slots[:n])
            targets.append(wave.targets[:n])
            xs.append(x)
            ys.append(y)
            lanes.extend((k, t) for t in wave.tickets)
        pad = BUCKET - len(lanes)
        last_run = group[-1][0]
        plan = self.runs[last_run].replay.plan
        scratch = self.gbases[last_run] + plan.gradients.capacity - 1
        slot_rows = np.concatenate([*slots, np.repeat(slots[-1][-1:], pad, axis=0)])
        target_rows = np.concatenate([*targets, np.full(pad, scratch, np.int32)])
        x_rows = np.concatenate([*xs, np.repeat(xs[-1][-1:], pad, axis=0)])
        y_rows = np.concatenate([*ys, np.repeat(ys[-1][-1:], pad, axis=0)])
        return lanes, (slot_rows.astype(np.int32), x_rows, y_rows, target_rows.astype(np.int32))

    def _waves(self, calls: list[tuple[list, tuple]], banks: dict[str, Any]) -> list[tuple]:
        """Up to :data:`COPIES` 8-wide gradient calls as one program (:class:`WaveCopies`);
        missing copies repeat the first call, aimed at its run's scratch slot."""
        program = self.programs.extra.get("waves")
        if program is None:
            program = self.programs.extra["waves"] = WaveCopies(self.programs.wave_body)
        inputs = [args for _, args in calls]
        slots, xs, ys, _ = inputs[0]
        k = calls[0][0][-1][0]
        scratch = self.gbases[k] + self.runs[k].replay.plan.gradients.capacity - 1
        inputs += [(slots, xs, ys, np.full(BUCKET, scratch, np.int32))] * (COPIES - len(calls))
        losses, banks["grads"], banks["moments"] = program(
            banks["values"], banks["grads"], banks["moments"], *zip(*inputs, strict=True)
        )
        return [(lanes, losses[c]) for c, (lanes, _) in enumerate(calls)]


def _is_wave(step: Wave | Chain | Check) -> bool:
    return isinstance(step, Wave)


def _packed(waves: list[tuple[int, Wave]]) -> list[list[tuple[int, Wave]]]:
    """``waves`` (run, wave) in groups of at most :data:`BUCKET` lanes, in order."""
    groups: list[list[tuple[int, Wave]]] = []
    lanes = BUCKET
    for k, wave in waves:
        n = len(wave.tickets)
        if lanes + n > BUCKET:
            groups.append([])
            lanes = 0
        groups[-1].append((k, wave))
        lanes += n
    return groups


#: 8-wide gradient calls in one program (:class:`WaveCopies`).
COPIES = 4


class WaveCopies:
    """:data:`COPIES` of the replay's 8-wide gradient program side by side in one program.

    Each copy is the one-run program on its own slots, inputs and targets, in order,
    writing the gradient bank in turn, so each lane's bits are those of a call alone (a
    wider ``vmap`` would not be: XLA:CPU picks kernels by shape). One dispatch then
    computes the gradients of up to 32 lanes of several runs."""

    def __init__(self, wave: Callable[..., Any]) -> None:
        def waves(values, grads, moments, slots, xs, ys, targets):
            losses = []
            for c in range(COPIES):
                loss, grads, moments = wave(
                    values, grads, moments, slots[c], xs[c], ys[c], targets[c]
                )
                losses.append(loss)
            return losses, grads, moments

        self.fn = jax.jit(waves, donate_argnums=(1, 2))

    def __call__(self, values, grads, moments, slots, xs, ys, targets) -> Any:
        return self.fn(values, grads, moments, slots, xs, ys, targets)


#: Runs whose update chains on one PS run as one program (a vmap over runs inside the
#: scan); fewer are padded with copies of the first, writing to its scratch slots.
WIDE = 8


class WideChains:
    """The update chains of up to :data:`WIDE` runs on one PS in one program.

    Each run's chain is what :meth:`~.replay._Programs.chain` scans alone; here each scan
    step applies the step of every run at once, the optimizer vmapped over runs. The
    updates are elementwise, so each run's values are its own chain's bit for bit
    (tests/test_batched_runs.py). Only for optimizers whose chains are scanned
    (:func:`~simdist.numerics.chains.scan_exact`).
    """

    def __init__(self, programs: Any, ps: int) -> None:
        self.programs = programs
        self.ps = ps
        self.fn = self._program()

    def __call__(self, banks: dict[str, Any], chains: list[tuple[Chain, int]]) -> None:
        """Apply ``chains`` (each a run's chain and its scratch slot) on PS ``ps``'s banks."""
        ps = self.ps
        padded = chains + [chains[0]] * (WIDE - len(chains))
        grads = np.zeros((WIDE, CHAIN), np.int32)
        targets = np.zeros((WIDE, CHAIN), np.int32)
        scales = np.ones((WIDE, CHAIN), np.float32)
        sources = np.zeros(WIDE, np.int32)
        for lane, (chain, scratch) in enumerate(padded):
            n = len(chain.ops)
            pad = CHAIN - n
            sources[lane] = chain.source
            grads[lane] = chain.grads + [chain.grads[-1]] * pad
            live = chain.targets if lane < len(chains) else [scratch] * n
            targets[lane] = live + [scratch] * pad
            scales[lane, :n] = [op.scale for op in chain.ops]
        banks["values"][ps], banks["opts"][ps], banks["models"][ps] = self.fn(
            banks["values"][ps],
            banks["opts"][ps],
            banks["models"][ps],
            banks["grads"],
            banks["moments"],
            sources,
            grads,
            scales,
            targets,
        )

    def _program(self) -> Any:
        wl = self.programs.workload
        servers = self.programs.servers
        momentum = getattr(wl.model, "batch_norm_momentum", None)
        n = servers.treedef.num_leaves
        values_of = servers.ps_slices[self.ps]
        states_of = servers.ps_state_slices[self.ps]

        def cut(a: Any, rows: slice | None) -> Any:
            return a if rows is None else a[:, rows]

        def update(values: Any, opt: Any, grad: Any, scale: Any) -> tuple[Any, Any]:
            return apply_updates(wl.optimizer, values, opt, grad, scale)

        def moving(model: Any, moments: Any) -> Any:
            return update_moving_stats(model, moments, momentum)

        def chains(vbank, obank, mbank, grads, moments, sources, gslots, scales, targets):
            first = (
                {k: a[sources] for k, a in vbank.items()},
                jax.tree.map(lambda a: a[sources], obank),
                {k: a[sources] for k, a in mbank.items()},
            )

            def body(carry, step):
                (values, opt, model), (vbank, obank, mbank) = carry
                gslot, scale, target = step
                grad = {key: cut(grads[leaf][gslot], rows) for key, leaf, rows in values_of}
                batch = {key: cut(moments[leaf - n][gslot], rows) for key, leaf, rows in states_of}
                values, opt = jax.vmap(update)(values, opt, grad, scale)
                if batch:
                    model = jax.vmap(moving)(model, batch)
                vbank = {k: a.at[target].set(values[k]) for k, a in vbank.items()}
                obank = jax.tree.map(lambda a, b: a.at[target].set(b), obank, opt)
                mbank = {k: a.at[target].set(model[k]) for k, a in mbank.items()}
                return ((values, opt, model), (vbank, obank, mbank)), None

            carry = (first, (vbank, obank, mbank))
            steps = (gslots.T, scales.T, targets.T)
            (_, banks), _ = jax.lax.scan(body, carry, steps)
            return banks

        return jax.jit(chains, donate_argnums=(0, 1, 2))
