"""Lock-step copies: hybrid's data copies simulated once per leader equal every copy
simulated, row for row; the links that make copies lock-step, and when they are not."""

from __future__ import annotations

import json

import pytest
import simpy
from helpers import tiny

from simdist.errors import SimdistError
from simdist.network.link import Link
from simdist.network.lockstep import LockstepCopies
from simdist.runtime.engine import simulate, simulate_pass
from simdist.scenario import scenario_from_dict
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.hybrid.strategy import HybridStrategy

X = 4_000_000  # bytes of one activation on the whole batch


def gpt_costs() -> Costs:
    """An embedding, three transformer layers (attention and MLP each) and the LM head."""
    blocks = [
        LayerCost(f"h.{i}.{part}", f, 2 * f, 8000, (), X, 1e-5)
        for i in range(3)
        for part, f in (("attention", 1e-3), ("mlp", 2e-3))
    ]
    layers = (
        LayerCost("embeddings", 4e-4, 6e-4, 4000, (), X),
        *blocks,
        LayerCost("lm_head", 5e-4, 1e-3, 4000, (), X),
    )
    return Costs(
        compute_s=sum(x.forward_s + x.backward_s for x in layers),
        grad_nbytes=sum(x.grad_nbytes for x in layers),
        flops_per_replica_step=0.0,
        total_steps=3,
        layers=layers,
    )


def layout(data: int = 3, tensor: int = 2, pipeline: int = 4, **changes: object) -> dict:
    """gpt2's clock as a hybrid layout, a host per (copy, stage), a slow network: the
    stages' messages share their NICs. Copy 2's hosts (worker8..11) sort otherwise than
    copy 0's and 1's (worker10 before worker8)."""
    strategy = {
        "kind": "hybrid",
        "mesh": {"data": data, "tensor": tensor, "pipeline": pipeline},
        "micro_batches": 8,
        "schedule": "1f1b",
        "partition": "auto",
    }
    return tiny(
        **{
            "numerics": False,
            "workload.model": "gpt2",
            "workload.batch_size": 16,
            "workload.steps": 3,
            "strategy": strategy,
            "cluster.hosts": data * pipeline,
            "cluster.devices_per_host": tensor,
            "cluster.links.network": {"bandwidth": "200MB/s", "latency": "10us"},
            **changes,
        }
    )


def run_both(data: dict, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """The run with lock-step copies, and with every copy simulated."""
    scenario = scenario_from_dict(data)
    lockstep = simulate(scenario, gpt_costs())
    with monkeypatch.context() as patch:
        patch.setattr(HybridStrategy, "_lockstep", lambda self: None)
        every = simulate(scenario, gpt_costs())
    return lockstep, every


def assert_same(a, b) -> None:
    assert a.events.equals(b.events)
    assert a.metrics.equals(b.metrics)
    assert sorted(a.tables) == sorted(b.tables)
    for name in a.tables:
        assert a.tables[name].equals(b.tables[name]), name
    assert json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)


def leaders(data: dict) -> dict[int, list[int]] | None:
    strategy = simulate_pass(scenario_from_dict(data), gpt_costs()).strategy
    return None if strategy.lockstep is None else strategy.lockstep.leaders


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"strategy.schedule": "gpipe", "strategy.zero": 1},
        {"strategy.sequence_parallel": True, "strategy.zero": 2},
        {"cluster.network.duplex": "half", "cluster.network.protocol": "nccl-ib"},
    ],
    ids=["1f1b", "gpipe-zero1", "sp-zero2", "half-duplex-rdma"],
)
def test_leaders_alone_equal_every_copy(changes, monkeypatch):
    data = layout(**changes)
    # copies 0 and 1 sort alike (worker0..3, worker4..7): 1 follows 0; copy 2 leads itself
    assert leaders(data) == {0: [1], 2: []}
    lockstep, every = run_both(data, monkeypatch)
    assert len(lockstep.events) == len(every.events) > 0
    assert_same(lockstep, every)


def test_one_leader_for_copies_that_sort_alike(monkeypatch):
    data = layout(data=4, pipeline=2, tensor=2)  # worker0..7: every copy sorts alike
    assert leaders(data) == {0: [1, 2, 3]}
    assert_same(*run_both(data, monkeypatch))


@pytest.mark.parametrize(
    "changes",
    [
        {"cluster.device.variability": {"step": 0.05, "device": 0.04}},
        {"faults.stragglers": [{"device": 1, "slowdown": 2.0}]},
        {"cluster.network.sharing": "fifo"},  # a group's messages arrive one at a time
        {"cluster.network.protocol": "tcp"},  # per-message stages
        # racks of 3 hosts: copies cross shared uplinks
        {"cluster.network.topology": "leaf_spine", "cluster.network.hosts_per_leaf": 3},
        {"strategy.mesh.data": 1, "cluster.hosts": 4},
    ],
    ids=["variability", "straggler", "fifo", "tcp", "leaf-spine", "one-copy"],
)
def test_every_copy_simulated_otherwise(changes):
    assert leaders(layout(**changes)) is None


def links(env: simpy.Environment, host: str, bandwidth: float = 1e9) -> list[Link]:
    return [Link(env, f"{host}/nic/{side}", 1e-5, bandwidth, host, sharing="fair")
            for side in ("tx", "rx")]  # fmt: skip


def test_copies_follow_alike_disjoint_links_that_sort_alike():
    env = simpy.Environment()
    a, b, c, d = (links(env, f"w{i}") for i in range(4))
    copies = LockstepCopies.of([[[a[0], b[1]]], [[c[0], d[1]]]], [*a, *b, *c, *d])
    assert copies is not None and copies.leaders == {0: [1]}
    assert LockstepCopies.of([[[a[0]]], [[a[0]]]], a) is None  # a link in both copies
    slow = links(env, "w9", bandwidth=5e8)
    assert LockstepCopies.of([[[a[0]]], [[slow[0]]]], [*a, *slow]) is None  # unlike
    # copy 1's hosts sort the other way round (w10 before w9): it leads itself
    e, f = links(env, "w9"), links(env, "w10")
    assert LockstepCopies.of([[[a[0], b[1]]], [[e[0], f[1]]]], [*a, *b, *e, *f]) is None


def test_follow_copies_the_load_and_refuses_traffic_elsewhere():
    env = simpy.Environment()
    a, b, c = links(env, "w0"), links(env, "w1"), links(env, "w2")
    copies = LockstepCopies.of([[a], [b]], [*a, *b, *c])
    assert copies is not None and copies.in_step()
    copies.mark()
    a[0].set_rate(0.0, 5.0)
    a[0].set_rate(1.0, 0.0)
    copies.follow()
    assert b[0].rates == [(0.0, 5.0), (1.0, 0.0)] and b[1].rates == []
    assert copies.in_step()
    b[1].set_rate(2.0, 1.0)  # a follower loaded apart: not in step any more
    assert not copies.in_step()
    copies.mark()
    c[0].set_rate(3.0, 1.0)  # traffic off the leaders' links
    with pytest.raises(SimdistError, match="link w2/nic/tx carried traffic"):
        copies.follow()
