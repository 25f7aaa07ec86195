"""A strategy's step as data: typed steps, and the one walker that runs them on the clock.

A strategy says *what* one step (or one stage's share of it) does as a :class:`Plan`: the
collectives it moves and a *program*, the steps in the order a device issues its work —

* :class:`Compute`: the devices compute a unit of work (a layer, a span of layers, a
  micro-batch) of a phase;
* :class:`Issue`: the group issues collective ``index`` (when its last device gets here);
* :class:`Wait`: every device waits until collective ``index`` has ended;
* :class:`Send`: a message to a peer (a pipeline stage's activation or its gradient, a
  parameter-server worker's gradient shard);
* :class:`Receive`: wait until a peer's message has arrived (an activation, a worker's
  pulled variables).

:func:`walk` runs a program on the clock, the same way for every strategy: collectives run
one at a time in the order they were issued, each from when it was issued and the
previous one ended — the operations of one NCCL communicator, which PyTorch's
ProcessGroupNCCL runs on one stream per device — so the issue order decides what overlaps
with what. *How* the devices compute and what they record is the :class:`Runner`'s: on the
clock, device group by device group (:class:`GroupRunner`, for tensor groups and any
strategy that needs nothing else), or ahead of it with per-device times worked out at once
(ZeRO's and the overlapped data-parallel step's); a runner with peers sends and receives
(a pipeline stage, a parameter-server worker). The network prices every collective and
message. A new strategy gives a plan and, when a :class:`GroupRunner` is not enough, a
runner; the walker and the engine do the rest.

The numeric half has its contracts here too, as Protocols: :class:`StepTrainer` (one
synchronous step: ``batch``, ``update``), :class:`DispatchTrainer` (+ ``init`` and
``dispatch``, the loss left on the device), :class:`StageTrainer` (pipedream's passes) and
:class:`LocalTrainer` (local SGD).

Pure: the walk needs an environment with ``now`` and ``timeout`` (SimPy's), nothing else.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from simdist.hardware.cluster import Device


class Compute(NamedTuple):
    """The devices compute ``unit``'s ``phase`` (``forward``, ``backward``, ...).

    ``unit`` indexes what the runner keeps times of: the strategy's layers (ZeRO), the
    spans of layers a tensor group computes between two collectives, the gradient buckets
    of an overlapped step, a pipeline's micro-batches. ``seconds`` is the nominal time
    when the plan knows it (a runner may look a device's own time up by ``unit`` and
    ``phase`` instead), and ``detail`` the label of the compute rows."""

    unit: int
    phase: str
    seconds: float = 0.0
    detail: str = ""


class Collective(NamedTuple):
    """One collective of the group: the op the network prices, its buffer, its label."""

    op: str  # "allreduce", "reduce_scatter", "all_gather", ...
    nbytes: int
    detail: str


class Issue(NamedTuple):
    """The group issues collective ``index`` (when the last device gets here)."""

    index: int


class Wait(NamedTuple):
    """Every device waits for collective ``index`` to end before going on."""

    index: int


class Send(NamedTuple):
    """Send ``nbytes`` to ``peer`` (a stage, or whatever the runner's peers are), tagged
    ``tag`` so that the peer's :class:`Receive` finds it; ``detail`` labels the rows."""

    peer: int
    tag: Any
    nbytes: int
    detail: str


class Receive(NamedTuple):
    """Wait until the message tagged ``tag`` has arrived."""

    tag: Any


Step = Compute | Issue | Wait | Send | Receive


class Plan(NamedTuple):
    """A step's collectives (in issue order) and its program."""

    collectives: list[Collective]
    program: list[Step]


def issue_and_wait(program: list[Step], collectives: list[Collective], c: Collective) -> None:
    """Append collective ``c`` to a plan being built, issued and waited for at once (a
    collective on the critical path, as Megatron's synchronous tensor all-reduces)."""
    collectives.append(c)
    program += [Issue(len(collectives) - 1), Wait(len(collectives) - 1)]


def collectives_in_order(collectives: Sequence[Collective]) -> Plan:
    """A plan that runs ``collectives`` one after another and computes nothing."""
    program: list[Step] = []
    for k in range(len(collectives)):
        program += [Issue(k), Wait(k)]
    return Plan(list(collectives), program)


class Clock(Protocol):
    """What the walk needs of the event engine (a ``simpy.Environment``)."""

    @property
    def now(self) -> float: ...

    def timeout(self, delay: float) -> Any: ...


class Runner(Protocol):
    """How a strategy's devices carry a program out (see the module docstring)."""

    @property
    def env(self) -> Clock: ...

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """The devices compute ``op`` (on the clock, or ahead of it)."""
        ...

    def issued_s(self) -> float:
        """When the last device has reached this point of the program (simulated time)."""
        ...

    def start(self, index: int, c: Collective) -> Any:
        """Start collective ``index`` of the plan, ``c``, now; an event whose value is its
        ``(start_s, end_s)``."""
        ...

    def waited(self, span: tuple[float, float]) -> None:
        """Every device has waited for a collective that ran over ``span``."""
        ...

    def send(self, op: Send) -> None:
        """Start message ``op``."""
        ...

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        """Wait until message ``op.tag`` has arrived."""
        ...

    def finish(self) -> Generator[Any, Any, None]:
        """The program has ended and every collective with it."""
        ...


def walk(plan: Plan, run: Runner) -> Generator[Any, Any, None]:
    """Run ``plan`` on the clock: ``run`` computes; the collectives run one at a time in
    issue order, each from when it was issued and the previous one ended; every
    collective issued has run before the walk ends.

    A collective starts at its :class:`Issue` when it can (issued now or before, the
    previous one over), so that it overlaps what the devices compute next on the clock;
    otherwise when a :class:`Wait` (or the end) needs it, after the previous one and once
    the clock has reached its issue time (a runner ahead of the clock)."""
    env = run.env
    collectives = plan.collectives
    n = len(collectives)
    issued = [0.0] * n
    events: list[Any] = [None] * n
    spans: list[Any] = [None] * n
    started = finished = 0  # collectives started, and waited through, in issue order
    for op in plan.program:
        kind = type(op)
        if kind is Compute:
            yield from run.compute(op)  # type: ignore[arg-type]
        elif kind is Issue:
            k = op.index  # type: ignore[union-attr]
            issued[k] = run.issued_s()
            if (
                started == k
                and issued[k] <= env.now
                and (k == 0 or events[k - 1].callbacks is None)  # the previous has ended
            ):
                events[k] = run.start(k, collectives[k])
                started += 1
        elif kind is Wait:
            while finished <= op.index:  # type: ignore[union-attr]
                k = finished
                if events[k] is None:
                    if issued[k] > env.now:
                        yield env.timeout(issued[k] - env.now)
                    events[k] = run.start(k, collectives[k])
                    started += 1
                spans[k] = yield events[k]
                finished += 1
            run.waited(spans[op.index])  # type: ignore[union-attr]
        elif kind is Send:
            run.send(op)  # type: ignore[arg-type]
        else:
            yield from run.receive(op)  # type: ignore[arg-type]
    while finished < n:
        k = finished
        if events[k] is None:
            if issued[k] > env.now:
                yield env.timeout(issued[k] - env.now)
            events[k] = run.start(k, collectives[k])
        yield events[k]
        finished += 1
    yield from run.finish()


class Devices(Protocol):
    """What :class:`GroupRunner` needs of a strategy (:class:`~.base.Strategy` has it)."""

    env: Any
    net: Any
    recorder: Any

    def pace(self, device: Device, step: int) -> float: ...

    def slowdown(self, device: Device, step: int) -> float: ...

    def record_scaled(
        self,
        device: Device,
        start_s: float,
        seconds: float,
        factor: float,
        step: int,
        detail: str,
        pace: float = 1.0,
    ) -> float: ...


class GroupRunner:
    """A group of devices carrying a program out on the clock, in lock-step.

    A :class:`Compute` lasts its ``seconds`` × each device's pace and straggler factor; the
    group goes on when its slowest device is done (each other device waits, ``idle:
    barrier``), as a synchronous collective after it makes it. Collectives run over the
    group with ``algorithm`` (all-reduces; the others' ring). No messages: a strategy
    whose devices send (a pipeline) runs its own runner.
    """

    def __init__(
        self,
        strategy: Devices,
        group: Sequence[Device],
        step: int,
        algorithm: str = "ring",
        label: str = "",
    ) -> None:
        self.strategy = strategy
        self.env = strategy.env
        self.group = group
        self.step = step
        self.algorithm = algorithm
        #: Put before each compute row's detail (a micro-batch's ``F0``, ...).
        self.label = label

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        """Every device computes ``op.seconds`` (× pace and straggler factor)."""
        s, step, seconds = self.strategy, self.step, op.seconds
        if seconds <= 0:
            return
        detail = f"{self.label} {op.detail}" if self.label else op.detail
        start = self.env.now
        scaled = [(d, s.pace(d, step), s.slowdown(d, step)) for d in self.group]
        longest = max(seconds * (pace * factor) for _, pace, factor in scaled)
        yield self.env.timeout(longest)
        for d, pace, factor in scaled:
            done = s.record_scaled(d, start, seconds, factor, step, detail, pace)
            self.computed(seconds * (pace * factor))
            if done < start + longest:
                s.recorder.event(done, start + longest, d.host, d.name, "idle", 0, step, "barrier")

    def computed(self, seconds: float) -> None:
        """One device has computed ``seconds`` (for a strategy counting busy time)."""
        del seconds

    def issued_s(self) -> float:
        """The group computes on the clock: it has reached this point now."""
        return self.env.now

    def algorithm_of(self, op: str) -> str:
        """The algorithm of a collective ``op``: all-reduces ``algorithm``, others ring."""
        return self.algorithm if op == "allreduce" else "ring"

    def start(self, index: int, c: Collective) -> Any:
        """Collective ``c`` over the group."""
        del index
        return self.strategy.net.collective(
            c.op, self.group, c.nbytes, self.algorithm_of(c.op), step=self.step, detail=c.detail
        )

    def waited(self, span: tuple[float, float]) -> None:
        """Nothing to record: the group was in the collective."""
        del span

    def send(self, op: Send) -> None:
        raise TypeError(f"a {type(self).__name__} sends no messages; got {op}")

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        raise TypeError(f"a {type(self).__name__} receives no messages; got {op}")

    def finish(self) -> Generator[Any, Any, None]:
        """Nothing left: the clock is at the program's end."""
        yield from ()


@runtime_checkable
class StepTrainer(Protocol):
    """The numerics of one synchronous step, as the pipeline and hybrid strategies drive
    them: per step ``state, loss = trainer.update(state, trainer.batch(step))``, a pure
    function of the state (Optax-style; the state a ``SyncState``). gpipe and 1f1b
    (:class:`~simdist.numerics.stages.PipelineTrainer`) and hybrid
    (:class:`~simdist.numerics.hybrid.HybridTrainer`) are these."""

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        ...

    def update(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, float]:
        """One step on ``batch``: the new state and the batch's mean loss, read back."""
        ...


@runtime_checkable
class DispatchTrainer(StepTrainer, Protocol):
    """A :class:`StepTrainer` that can leave its loss on the device: the synchronous
    family's loop (:meth:`~.sync.SynchronousStrategy.process`) dispatches each step and
    reads the loss when it must. :class:`~.sync_trainer.SyncTrainer`,
    :class:`~.zero.ZeroTrainer` and
    :class:`~simdist.numerics.tensor_parallel.TensorParallelTrainer` are these."""

    def init(self) -> Any:
        """The initial state (parameters, optimizer state, model state)."""
        ...

    def dispatch(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """One step on ``batch``: the new state and the loss, not yet read back."""
        ...


@runtime_checkable
class StageTrainer(Protocol):
    """pipedream's numerics (:class:`~simdist.numerics.stages.PipeDreamTrainer`): no step
    of its own; each stage's pass of micro-batch ``j`` is applied when the clock runs it,
    and each micro-batch's loss is left in ``losses`` (by micro-batch)."""

    losses: dict[int, float]

    def forward(self, s: int, j: int) -> None:
        """Stage ``s``'s forward of micro-batch ``j``."""
        ...

    def backward(self, s: int, j: int) -> None:
        """Stage ``s``'s backward of micro-batch ``j`` (and its update of the stage)."""
        ...


@runtime_checkable
class LocalTrainer(Protocol):
    """local SGD's numerics (:class:`~simdist.numerics.local_sgd.LocalSGD`): every replica
    steps alone on its share of batch ``step``; every few steps they synchronise."""

    def init(self) -> Any:
        """The replicas' initial state."""
        ...

    def batch(self, step: int) -> tuple[Any, Any]:
        """Global batch ``step`` of the data order."""
        ...

    def local_step(self, state: Any, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """Every replica's step on its share of ``batch``: the new state and the losses."""
        ...

    def sync(self, state: Any) -> Any:
        """The replicas' parameters averaged (through the outer optimizer)."""
        ...

    def anchor(self, state: Any) -> Any:
        """The parameters every replica shares (those of the last sync)."""
        ...
