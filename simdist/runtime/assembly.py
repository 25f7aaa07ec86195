"""A run's parts wired together, in one place: the SimPy environment, the cluster and its
topology, and per training job its network front end, recorder and strategy; and the rule
that simulates again a run found to diverge after the fact.

:func:`simdist.runtime.engine.simulate` (one run) and :func:`simdist.runtime.jobs.simulate_jobs`
(several jobs sharing one cluster) build their runs here, so a run alone and a job in company are
wired the same way: a :class:`Floor` (what the jobs share), then one :func:`place` per job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import simpy

from simdist.errors import SimdistError
from simdist.hardware.cluster import Cluster
from simdist.network import Network, Topology, build_topology, protocol_of
from simdist.runtime.recorder import Recorder
from simdist.strategies import strategy_class

if TYPE_CHECKING:
    from simdist.network.transport import Protocol
    from simdist.numerics.executor import Workload
    from simdist.scenario import Scenario
    from simdist.step_costs import Costs
    from simdist.strategies.base import Replayed, Strategy

__all__ = ["Floor", "Placed", "TopologyFactory", "build_floor", "place", "until_settled"]

#: Builds a simulation's topology (tests and studies swap the scenario's for another).
TopologyFactory = Callable[[simpy.Environment, Cluster, "Scenario"], Topology]

A = TypeVar("A")
T = TypeVar("T")


@dataclass
class Floor:
    """What every job of one simulation shares: the clock, the cluster, its topology and
    the transport protocol of its network."""

    env: simpy.Environment
    cluster: Cluster
    topology: Topology
    protocol: Protocol


def build_floor(
    scenario: Scenario, kinds: Iterable[str], make_topology: TopologyFactory | None = None
) -> Floor:
    """The floor of ``scenario``'s cluster for jobs of the strategy ``kinds``: the topology
    those strategies bring (a tpu its torus, the others the cluster's wiring), or
    ``make_topology``'s."""
    env = simpy.Environment()
    cluster = Cluster(scenario.cluster)
    wirings = {strategy_class(kind).topology for kind in kinds}
    if make_topology is not None:
        topology = make_topology(env, cluster, scenario)
    elif len(wirings) == 1:
        topology = build_topology(wirings.pop(), env, cluster, scenario)
    else:  # refused when the scenario is loaded (simdist.scenario.jobs)
        raise SimdistError(f"{scenario.name}: the jobs need different topologies {wirings}")
    return Floor(env, cluster, topology, protocol_of(scenario.cluster.network))


@dataclass
class Placed:
    """One job on a floor: its strategy, the recorder and network front end it writes to,
    and its training process (started)."""

    strategy: Strategy
    recorder: Recorder
    network: Network
    main: simpy.Process


def place(
    floor: Floor,
    scenario: Scenario,
    cluster: Cluster,
    workload: Workload | Replayed | None,
    costs: Costs,
    *,
    on_step: Callable[[int], None] | None = None,
    defer: bool = False,
) -> Placed:
    """Start ``scenario``'s strategy on ``floor`` over ``cluster`` (the floor's, or a job's
    view of it), with its own recorder and network front end. With ``defer`` a strategy
    that :meth:`~simdist.strategies.base.Strategy.defers` leaves its numerics for later
    (:func:`simdist.runtime.engine.run_batch`)."""
    recorder = Recorder()
    network = Network(floor.env, floor.topology, recorder, floor.protocol)
    cls = strategy_class(scenario.strategy.kind)
    env = floor.env
    strategy = cls(scenario, env, cluster, network, recorder, workload, costs, on_step=on_step)
    if defer and strategy.defers():
        strategy.defer = True
    return Placed(strategy, recorder, network, floor.env.process(strategy.process()))


def until_settled(simulate: Callable[[A], T], first: A, again: Callable[[T], A | None]) -> T:
    """``simulate(first)``, simulated again as long as ``again`` names what to change.

    A divergence may be found after the fact (the parameter server's dataflow replay, a
    synchronous step's loss read one step late): the run is then simulated again, stopping
    where it diverged (``Strategy.rerun_with``); jobs in company are all simulated again,
    since the one stopping earlier changes what the others shared.
    """
    result = simulate(first)
    while (changed := again(result)) is not None:
        result = simulate(changed)
    return result
