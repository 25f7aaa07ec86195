"""The one step format and its walker: collectives one at a time in issue order, each from
when it was issued and the previous one ended; a toy strategy that is nothing but a plan
runs end to end; every trainer keeps its Protocol."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any, Literal

import pytest
import simpy
from helpers import tiny

from simdist.collectives import ring_allreduce_s
from simdist.errors import ScenarioError, SimdistError
from simdist.numerics.hybrid import HybridTrainer
from simdist.numerics.local_sgd import LocalSGD
from simdist.numerics.stages import PipeDreamTrainer, PipelineTrainer
from simdist.numerics.tensor_parallel import TensorParallelTrainer
from simdist.runtime.engine import simulate
from simdist.scenario import register_strategy, scenario_from_dict, unregister_strategy
from simdist.scenario.cluster import ClusterSpec
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.spec_base import StrategySpecBase
from simdist.strategies.steps import (
    Collective,
    Compute,
    DispatchTrainer,
    GroupRunner,
    Issue,
    LocalTrainer,
    Plan,
    Receive,
    Send,
    StageTrainer,
    StepTrainer,
    Wait,
    walk,
)
from simdist.strategies.sync import SynchronousStrategy
from simdist.strategies.sync_trainer import SyncTrainer
from simdist.strategies.zero import ZeroTrainer


class Log:
    """A runner on a bare SimPy clock: compute ``seconds`` on the clock (``ahead``: in a
    time of its own, without clock events), a collective lasting its ``nbytes`` seconds;
    logs what it did and when."""

    def __init__(self, env: simpy.Environment, ahead: bool = False) -> None:
        self.env, self.ahead, self.t = env, ahead, 0.0
        self.log: list[tuple] = []

    def compute(self, op: Compute) -> Generator[Any, Any, None]:
        if self.ahead:
            self.t += op.seconds
        else:
            yield self.env.timeout(op.seconds)
        self.log.append(("computed", op.detail, self.t if self.ahead else self.env.now))

    def issued_s(self) -> float:
        return self.t if self.ahead else self.env.now

    def start(self, index: int, c: Collective) -> Any:
        def hold() -> Generator[Any, Any, tuple[float, float]]:
            start = self.env.now
            yield self.env.timeout(c.nbytes)
            self.log.append((c.detail, start, self.env.now))
            return start, self.env.now

        return self.env.process(hold())

    def waited(self, span: tuple[float, float]) -> None:
        self.t = max(self.t, span[1])

    def send(self, op: Send) -> None:
        raise AssertionError(op)

    def receive(self, op: Receive) -> Generator[Any, Any, None]:
        raise AssertionError(op)

    def finish(self) -> Generator[Any, Any, None]:
        if self.t > self.env.now:
            yield self.env.timeout(self.t - self.env.now)
        self.log.append(("end", self.env.now))


def run(plan: Plan, ahead: bool = False) -> list[tuple]:
    env = simpy.Environment()
    runner = Log(env, ahead)
    env.process(walk(plan, runner))
    env.run()
    return runner.log


# A step: compute 1 s, issue c0 (3 s), compute 1 s, issue c1 (1 s), compute 1 s, wait c1.
OVERLAPPED = Plan(
    [Collective("allreduce", 3, "c0"), Collective("allreduce", 1, "c1")],
    [
        Compute(0, "forward", 1.0, "f"),
        Issue(0),
        Compute(1, "backward", 1.0, "b1"),
        Issue(1),
        Compute(0, "backward", 1.0, "b0"),
        Wait(1),
    ],
)


def test_a_collective_starts_at_its_issue_and_overlaps_the_compute_after_it():
    assert run(OVERLAPPED) == [
        ("computed", "f", 1.0),
        ("computed", "b1", 2.0),
        ("computed", "b0", 3.0),
        ("c0", 1.0, 4.0),  # issued at 1, overlapping b1 and b0
        ("c1", 4.0, 5.0),  # issued at 2, after c0: one collective at a time
        ("end", 5.0),
    ]


def test_a_runner_ahead_of_the_clock_starts_each_collective_at_its_issue_time():
    # The devices' times run ahead; the clock moves only to start a collective.
    assert run(OVERLAPPED, ahead=True) == [
        ("computed", "f", 1.0),
        ("computed", "b1", 2.0),
        ("computed", "b0", 3.0),
        ("c0", 1.0, 4.0),
        ("c1", 4.0, 5.0),
        ("end", 5.0),
    ]


def test_every_collective_issued_runs_before_the_walk_ends_waited_or_not():
    plan = Plan(
        [Collective("allreduce", 2, "c0"), Collective("all_gather", 2, "c1")],
        [Issue(0), Compute(0, "forward", 1.0, "f"), Issue(1)],
    )
    assert run(plan) == [("computed", "f", 1.0), ("c0", 0.0, 2.0), ("c1", 2.0, 4.0), ("end", 4.0)]


def test_a_wait_holds_the_devices_until_the_collective_ends():
    plan = Plan(
        [Collective("all_gather", 2, "g")],
        [Issue(0), Wait(0), Compute(0, "forward", 1.0, "f")],
    )
    assert run(plan) == [("g", 0.0, 2.0), ("computed", "f", 3.0), ("end", 3.0)]
    assert run(plan, ahead=True) == [("g", 0.0, 2.0), ("computed", "f", 3.0), ("end", 3.0)]


# ------------------------------------------------------- a toy strategy: a plan, no more

S = 1_000_000  # bytes of each toy all-reduce
TOY = Plan(
    [
        Collective("allreduce", S, "toy all-reduce 1"),
        Collective("allreduce", S, "toy all-reduce 2"),
    ],
    [
        Compute(0, "forward", 1e-3, "forward"),
        Compute(1, "backward", 2e-3, "backward 1"),
        Issue(0),
        Compute(0, "backward", 2e-3, "backward 0"),
        Issue(1),
        Wait(1),
    ],
)


class ToySpec(StrategySpecBase):
    """``strategy: toy``: one replica per device of one host."""

    kind: Literal["toy"] = "toy"

    def replicas(self, cluster: ClusterSpec) -> int:
        return cluster.n_devices


class ToyStrategy(SynchronousStrategy):
    """Every device walks :data:`TOY` each step; nothing moves after it."""

    def compute(self, step: int) -> Generator[Any, Any, None]:
        yield from walk(TOY, GroupRunner(self, self.training_devices, step))

    def communicate(self, step: int) -> Generator[Any, Any, None]:
        del step
        yield from ()


@pytest.fixture
def toy_registered():
    """The toy joins the scenario's strategies for the test, then leaves."""
    register_strategy(ToySpec, ToyStrategy)
    yield
    unregister_strategy(ToySpec)


def test_a_toy_strategy_that_is_a_plan_runs_end_to_end(toy_registered):
    # A spec and a plan, defined here, registered through the public hook: no other module
    # changes. The scenario loads it, validation checks it, the engine runs it.
    data = tiny(**{"strategy": {"kind": "toy"}, "cluster.devices_per_host": 4})
    with pytest.raises(ScenarioError, match=r"did you mean 'toy'\? Expected one of .*'toy'"):
        scenario_from_dict({**data, "strategy": {"kind": "toyy"}})
    with pytest.raises(SimdistError, match="already registered"):
        register_strategy(ToySpec, ToyStrategy)
    layer = LayerCost("dense", 1e-3, 4e-3, S)
    costs = Costs(
        compute_s=5e-3, grad_nbytes=S, flops_per_replica_step=0.0, total_steps=2, layers=(layer,)
    )
    scenario = scenario_from_dict({**data, "numerics": False})
    assert isinstance(scenario.strategy, ToySpec) and scenario.replicas == 4
    result = simulate(scenario, costs)
    A = ring_allreduce_s(4, S, 10e-6, 1e9)  # tiny's intra-host link
    events = result.events
    mine = events[events.device == events.device.iloc[0]]
    rows = [(r.kind, r.detail, r.start_s, r.end_s) for r in mine.itertuples() if r.step == 0]
    assert rows == [
        ("compute", "forward", 0.0, pytest.approx(1e-3)),
        ("compute", "backward 1", pytest.approx(1e-3), pytest.approx(3e-3)),
        ("comm", "toy all-reduce 1", pytest.approx(3e-3), pytest.approx(3e-3 + A)),
        ("compute", "backward 0", pytest.approx(3e-3), pytest.approx(5e-3)),
        ("comm", "toy all-reduce 2", pytest.approx(5e-3), pytest.approx(5e-3 + A)),
    ]
    assert A < 2e-3  # so the second all-reduce starts at its issue, the first one over
    assert result.summary["simulated_time_s"] == pytest.approx(2 * (5e-3 + A))


# ----------------------------------------------------------------- the trainers' Protocols

TRAINERS = [
    (
        StepTrainer,
        [SyncTrainer, ZeroTrainer, PipelineTrainer, TensorParallelTrainer, HybridTrainer],
    ),
    (DispatchTrainer, [SyncTrainer, ZeroTrainer, TensorParallelTrainer]),
    (StageTrainer, [PipeDreamTrainer]),
    (LocalTrainer, [LocalSGD]),
]


@pytest.mark.parametrize(
    ("protocol", "cls"),
    [(protocol, cls) for protocol, classes in TRAINERS for cls in classes],
    ids=lambda x: x.__name__,
)
def test_every_trainer_keeps_its_protocol(protocol, cls):
    """Each method of the Protocol, on the class, with the Protocol's parameters."""
    methods = [
        name
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    ]
    methods += [
        name
        for base in protocol.__mro__[1:]
        if getattr(base, "_is_protocol", False)
        for name, value in vars(base).items()
        if callable(value) and not name.startswith("_")
    ]
    assert methods
    for name in methods:
        want = list(inspect.signature(getattr(protocol, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got[: len(want)] == want, (cls.__name__, name, got)
    if protocol is not StageTrainer:  # a data member: only instances answer isinstance
        assert issubclass(cls, protocol)


def test_a_trainer_missing_a_method_is_not_a_step_trainer():
    class Half:
        def batch(self, step: int) -> tuple[Any, Any]:
            return (step, step)

    assert not issubclass(Half, StepTrainer)
