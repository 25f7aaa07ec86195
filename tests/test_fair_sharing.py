"""Max-min fair sharing and full-duplex NICs, with exact simulated times on hand cases.

Every size and bandwidth is a power of two (or a small integer ratio), so the finish
times below are exact binary fractions and are compared with ``==``.
"""

from __future__ import annotations

import pandas as pd
import pytest
import simpy
from helpers import count_steps
from helpers.network import INTRA_BW, INTRA_LAT, make_spec
from helpers.ps_timing import ALPHA, SIGMA, B, S, costs, scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.collectives import hierarchical_allreduce_s, ring_allreduce_s
from simdist.hardware.cluster import Cluster
from simdist.network import Link, Network, SwitchTopology, Transfer, hold_links
from simdist.network.fair import FairShare
from simdist.network.groups import Flow
from simdist.network.maxmin import max_min_levels
from simdist.runtime.engine import run, simulate
from simdist.runtime.recorder import Recorder
from simdist.scenario import scenario_from_dict


def flow(env, links, nbytes, log, name, at=0.0):
    """A process: wait until ``at``, send ``nbytes`` over ``links``, log the arrival."""

    def run():
        if at:
            yield env.timeout(at)
        start, end = yield Transfer(env, links, nbytes).done
        log[name] = (start, end)

    return env.process(run())


def fair_links(env, *specs):
    return [Link(env, name, 0.0, bw, sharing="fair") for name, bw in specs]


def test_a_single_flow_takes_its_closed_form_under_both_models():
    for sharing in ("fair", "fifo"):
        env, log = simpy.Environment(), {}
        a = Link(env, "a/nic", 2.0**-16, 2.0**30, sharing=sharing)
        b = Link(env, "b/nic", 2.0**-15, 2.0**29, sharing=sharing)
        flow(env, [a, b], 2**20, log, "x")
        env.run()
        assert log["x"] == (0.0, 2.0**-16 + 2.0**-15 + 2**20 / 2.0**29), sharing


def test_two_flows_on_one_link_split_it():
    env, log = simpy.Environment(), {}
    (link,) = fair_links(env, ("l", 4.0))
    flow(env, [link], 8, log, "a")
    flow(env, [link], 8, log, "b")
    env.run()
    assert log == {"a": (0.0, 4.0), "b": (0.0, 4.0)}  # 2 bytes/s each, not 2 s then 4 s


def test_a_flow_bottlenecked_elsewhere_leaves_its_share_to_the_other():
    # x (4 B/s) carries a and b; b also crosses y (1 B/s), so b gets 1 and a the other 3.
    env, log = simpy.Environment(), {}
    x, y = fair_links(env, ("x", 4.0), ("y", 1.0))
    flow(env, [x], 6, log, "a")
    flow(env, [x, y], 4, log, "b")
    env.run()
    assert log == {"a": (0.0, 2.0), "b": (0.0, 4.0)}
    # x's load: 4 B/s while both run, then b's 1 B/s, then nothing
    assert x.rates == [(0.0, 4.0), (2.0, 1.0), (4.0, 0.0)]
    assert y.rates == [(0.0, 1.0), (4.0, 0.0)]


def test_flows_starting_at_different_times_are_reallocated():
    # a alone for 1 s (1 byte), then a and b at 0.5 B/s until a's last byte (t = 3),
    # then b alone for its last byte.
    env, log = simpy.Environment(), {}
    (link,) = fair_links(env, ("l", 1.0))
    flow(env, [link], 2, log, "a")
    flow(env, [link], 2, log, "b", at=1.0)
    env.run()
    assert log == {"a": (0.0, 3.0), "b": (1.0, 4.0)}


@pytest.mark.parametrize("n", [2, 4, 8])
def test_n_equal_flows_into_one_nic_end_when_fifo_ends_the_last(n):
    ends = {}
    for sharing in ("fair", "fifo"):
        env, log = simpy.Environment(), {}
        nic = Link(env, "ps/nic", 2.0**-16, 2.0**30, sharing=sharing)
        for i in range(n):
            src = Link(env, f"w{i}/nic", 2.0**-16, 2.0**30, sharing=sharing)
            flow(env, [src, nic], 2**20, log, i)
        env.run()
        ends[sharing] = sorted(end for _, end in log.values())
    last = 2 * 2.0**-16 + n * 2.0**-10
    assert ends["fair"] == [last] * n
    assert ends["fifo"][-1] == last
    assert ends["fifo"] == [2 * 2.0**-16 + k * 2.0**-10 for k in range(1, n + 1)]


def test_a_cancelled_flow_gives_its_share_back():
    env, log = simpy.Environment(), {}
    (link,) = fair_links(env, ("l", 2.0))
    flow(env, [link], 4, log, "a")
    victim = Transfer(env, [link], 4)

    def cut():
        yield env.timeout(1.0)
        victim.cancel()

    env.process(cut())
    env.run()
    # a: 1 byte/s for 1 s, then 2 bytes/s for its last 3 bytes
    assert log["a"] == (0.0, 2.5)
    assert victim.state == "cancelled" and not victim.done.triggered


def test_a_collective_alone_takes_its_closed_form_and_two_share_its_links():
    env = simpy.Environment()
    links = [
        Link(env, "w0/nic", 0.0, 2.0**30, sharing="fair"),
        Link(env, "w0/intra", 0.0, 2.0**35, sharing="fair"),
    ]
    log = []

    def hold(seconds):
        log.append((yield env.process(hold_links(env, links, seconds))))

    env.process(hold(0.5))
    env.run()
    env.process(hold(1.0))
    env.process(hold(1.0))
    env.run()
    assert log[0] == (0.0, 0.5)
    assert log[1:] == [(0.5, 2.5), (0.5, 2.5)]  # each at half speed


def fair_net(duplex: str, sharing: str = "fair", hosts: int = 2, devices: int = 1, ps: int = 1):
    env = simpy.Environment()
    topology = SwitchTopology(
        env,
        Cluster(make_spec(hosts, devices, ps)),
        nic_latency_s=ALPHA,
        nic_bandwidth_Bps=B,
        intra_latency_s=INTRA_LAT,
        intra_bandwidth_Bps=INTRA_BW,
        duplex=duplex,
        sharing=sharing,
    )
    return env, Network(env, topology, Recorder())


@pytest.mark.parametrize(
    ("duplex", "sharing", "push_end", "pull_start", "pull_end"),
    [
        ("full", "fair", SIGMA, 0.0, SIGMA),  # max(push, pull)
        ("half", "fair", 2 * SIGMA, 0.0, 2 * SIGMA),  # push + pull, shared
        ("half", "fifo", SIGMA, SIGMA, 2 * SIGMA),  # push + pull, in line
    ],
)
def test_a_ps_pushing_and_pulling_at_once(duplex, sharing, push_end, pull_start, pull_end):
    # worker0 pushes S bytes to ps0 while ps0 sends S bytes of parameters to worker1
    env, net = fair_net(duplex, sharing)
    w0, w1 = net.topology.cluster.workers
    (ps,) = net.topology.cluster.ps_hosts
    push = net.send(w0.devices[0], ps, S, step=0, detail="push")
    pull = net.send(ps, w1.devices[0], S, step=0, detail="pull")
    env.run()
    assert push.done.value == (0.0, push_end + 2 * ALPHA)
    assert pull.done.value == (pull_start, pull_end + 2 * ALPHA)
    names = {link.name for link in push.links + pull.links}
    if duplex == "full":
        assert names == {"worker0/nic/tx", "ps0/nic/rx", "ps0/nic/tx", "worker1/nic/rx"}
    else:
        assert names == {"worker0/nic", "ps0/nic", "worker1/nic"}


@pytest.mark.parametrize("duplex", ["full", "half"])
def test_collectives_keep_their_closed_forms_under_fair_sharing(duplex):
    env, net = fair_net(duplex, hosts=4, devices=2, ps=0)
    devices = net.topology.cluster.devices
    ring = net.collective("allreduce", devices, S, "ring", step=0)
    env.run()
    assert ring.value == (0.0, ring_allreduce_s(8, S, ALPHA, B))
    start = env.now
    hier = net.collective("allreduce", devices, S, "hierarchical", step=1)
    env.run()
    expected = hierarchical_allreduce_s(4, 2, S, INTRA_LAT, INTRA_BW, ALPHA, B)
    assert hier.value == (start, start + expected)


def test_the_default_ps_step_is_still_compute_plus_pull_and_push():
    # one worker, one PS, default (full duplex, fair): every message is alone on its links
    default = scenario(1, network={})
    assert (default.cluster.network.duplex, default.cluster.network.sharing) == ("full", "fair")
    c, steps = 2.0**-8, 4
    result = simulate(default, costs(c, steps))
    step_s = c + 4 * ALPHA + 2 * SIGMA
    assert result.tables["updates"]["time_s"].tolist() == [k * step_s for k in range(1, 5)]


@settings(max_examples=200, deadline=None)
@given(
    capacities=st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0]), min_size=1, max_size=6),
    routes=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3), min_size=1, max_size=8),
)
def test_progressive_filling_is_max_min_fair(capacities, routes):
    # Feasible, and every flow has a bottleneck: a full link on which no flow gets more
    # (Bertsekas & Gallager, Data Networks, §6.5.2: the definition of max-min fairness).
    env = simpy.Environment()
    links = [Link(env, f"l{i}", 0.0, c, sharing="fair") for i, c in enumerate(capacities)]
    flows = []
    for seq, route in enumerate(routes):
        on = sorted({links[i % len(links)] for i in route}, key=lambda link: link.name)
        ref = min(link.bandwidth_Bps for link in on)
        flows.append(Flow(on, 1.0, [1.0] * len(on), [ref] * len(on), ref, lambda: None, seq))
    levels = max_min_levels(links, flows)
    load = {link.name: 0.0 for link in links}
    for flow, level in zip(flows, levels, strict=True):
        for link in flow.links:
            load[link.name] += level
    for link in links:
        assert load[link.name] <= link.bandwidth_Bps * (1 + 1e-9)
    for flow, level in zip(flows, levels, strict=True):
        assert level > 0
        assert any(
            load[link.name] >= link.bandwidth_Bps * (1 - 1e-9)
            and all(
                other <= level * (1 + 1e-9)
                for f, other in zip(flows, levels, strict=True)
                if link in f.links
            )
            for link in flow.links
        )


def one_timeout_each(self: FairShare, delay: float, call) -> None:
    """``FairShare.later`` as it was: a timeout per call (the reference of the batching)."""
    self.env.timeout(delay).callbacks.append(call)


def test_arrivals_of_one_instant_share_a_step_in_their_timeouts_order(monkeypatch):
    """Messages whose serialisation ends together arrive in one SimPy step
    (``FairShare.later``), processed exactly as their timeouts one by one were: a
    batch breaks where something else was scheduled between two of them, and an urgent
    event (a process started by an arrival) still runs before the next arrival."""

    def simulate():
        env, order = simpy.Environment(), []
        steps = count_steps(env)
        (shared,) = fair_links(env, ("l", 4.0))
        near = Link(env, "x", 1.0, 1e9, sharing="fair")
        far = Link(env, "y", 2.0, 1e9, sharing="fair")

        def started(name):
            order.append(("process", name, env.now))
            yield env.timeout(0)
            order.append(("process done", name, env.now))

        def arrival(name):
            order.append(("arrived", name, env.now))
            env.timeout(0).callbacks.append(lambda _: order.append(("after", name, env.now)))
            if name in ("a", "c", "d"):
                env.process(started(name))  # an urgent event between two arrivals

        def waited(name, transfer):
            yield transfer.done
            order.append(("done", name, env.now))

        routes = {"a": near, "b": near, "c": near, "d": near, "e": near, "f": far}
        for name in "abc":  # equal flows on ``shared``: their serialisations end together
            transfer = Transfer(env, [shared, routes[name]], 8, lambda s, t, n=name: arrival(n))
            env.process(waited(name, transfer))

        def raw():  # another flow's callback, between c's and d's: breaks the batch
            env.timeout(1.0).callbacks.append(lambda _: order.append(("raw", "flow", env.now)))

        shared.arbiter.start([shared], 8 / 4.0, lambda: raw())
        for name in "def":
            transfer = Transfer(env, [shared, routes[name]], 8, lambda s, t, n=name: arrival(n))
            env.process(waited(name, transfer))

        def observer():  # timers landing on the same instants
            for _ in range(20):
                yield env.timeout(1.0)
                order.append(("tick", env.now))

        env.process(observer())
        env.run()
        return order, steps[0]

    batched, batched_steps = simulate()
    monkeypatch.setattr(FairShare, "later", one_timeout_each)
    reference, reference_steps = simulate()
    assert batched == reference
    arrivals = [entry for entry in batched if entry[0] == "arrived"]
    assert [name for _, name, _ in arrivals] == list("abcdef")
    assert {at for *_, at in arrivals[:5]} == {15.0}  # all but f at one instant
    at_15 = [entry[:2] for entry in batched if entry[-1] == 15.0 and entry[0] != "tick"]
    assert at_15[:8] == [
        ("arrived", "a"),
        ("process", "a"),  # before b's arrival, as its urgent start was
        ("arrived", "b"),
        ("arrived", "c"),
        ("process", "c"),
        ("raw", "flow"),  # scheduled between c's arrival and d's, so processed between them
        ("arrived", "d"),
        ("process", "d"),
    ]
    # a, b, c in one step and d, e in another: 3 steps saved; the processes a and d start
    # split their batches again (a step back each); c's comes after its batch's last
    assert batched_steps == reference_steps - 3 + 2


def timing_only(
    cluster: dict, strategy: dict, faults: dict, *, steps: int, seed: int, hidden=(32,)
) -> dict:
    """A timing-only scenario of a small MLP on digits."""
    return {
        "name": "timing_only",
        "seed": seed,
        "numerics": False,
        "cluster": cluster,
        "workload": {
            "model": {"name": "mlp", "hidden": list(hidden)},
            "dataset": "digits",
            "batch_size": 16,
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "steps": steps,
        },
        "strategy": strategy,
        "faults": faults,
    }


@settings(max_examples=12, deadline=None)
@given(
    kind=st.sampled_from(["async", "ssp", "central_storage", "pipeline"]),
    size=st.integers(2, 6),
    straggle=st.sampled_from([0.0, 0.3]),
    failure=st.booleans(),
    seed=st.integers(0, 3),
)
def test_batched_arrivals_leave_every_table_as_it_was(kind, size, straggle, failure, seed):
    """Whole timing-only runs — parameter_server (async and SSP, with a worker failing and
    coming back), central_storage and pipeline, with stragglers — give the same events,
    metrics, tables and summary with arrivals batched as with one timeout per message."""
    cluster: dict = {"hosts": size, "device": {"profile": "cpu"}}
    strategy: dict = {"kind": "parameter_server"}
    hidden = [32]
    faults: dict = {}
    if kind in ("async", "ssp"):
        cluster["ps"] = 2
        if kind == "ssp":
            strategy["staleness_bound"] = 1
        if failure:
            faults["failures"] = [{"target": "worker 1", "at": "1ms", "restart_after": "0.5ms"}]
    elif kind == "central_storage":
        cluster.update(hosts=1, devices_per_host=size)
        strategy = {"kind": kind}
    else:
        cluster.update(hosts=size, devices_per_host=2)
        strategy = {"kind": kind, "stages": 2, "micro_batches": 4, "replicas": size}
        hidden = [32, 32, 32]
    if straggle:
        faults["stragglers"] = [{"probability": straggle, "slowdown": {"kind": "pareto"}}]
    data = timing_only(cluster, strategy, faults, steps=40, seed=seed, hidden=hidden)
    batched = run(scenario_from_dict(data))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FairShare, "later", one_timeout_each)
        reference = run(scenario_from_dict(data))
    pd.testing.assert_frame_equal(batched.events, reference.events)
    pd.testing.assert_frame_equal(batched.metrics, reference.metrics)
    assert batched.tables.keys() == reference.tables.keys()
    for name, table in batched.tables.items():
        pd.testing.assert_frame_equal(table, reference.tables[name])
    assert batched.summary == reference.summary


def test_three_flows_on_one_link_one_joins_and_one_leaves():
    """Processor sharing by hand (12 B/s link, no latency): a (12 B), b (24 B), c (36 B)
    start at 0 at 4 B/s each; d (8 B) joins at 1 s; b is cut at 2 s.

    0–1 s: a, b, c at 4 B/s: a 8 left, b 20, c 32. 1–2 s: four at 3 B/s: a 5, b 17, c 29,
    d 5. 2 s: b leaves; three at 4 B/s: a and d end at 2 + 5/4 = 3.25 s, c (29 − 5 = 24
    left) alone at 12 B/s ends at 3.25 + 2 = 5.25 s.
    """
    env = simpy.Environment()
    (link,) = fair_links(env, ("l", 12.0))
    model = FairShare.of(env)
    ends = {}

    def start(name, nbytes):
        return model.start([link], nbytes / 12.0, lambda: ends.setdefault(name, env.now))

    start("a", 12)
    b = start("b", 24)
    start("c", 36)

    def later():
        yield env.timeout(1.0)
        start("d", 8)
        yield env.timeout(1.0)
        model.stop(b)

    env.process(later())
    env.run()
    assert ends == {"a": 3.25, "d": 3.25, "c": 5.25}
    assert link.rates == [(0.0, 12.0), (5.25, 0.0)]


def _speed_of_full_solve(links, flows):
    levels = max_min_levels(links, flows)
    return [min(1.0, max(level / f.ref_Bps, 1e-12)) for f, level in zip(flows, levels, strict=True)]


def _fluid_finishes(links, plan, flows_by_item):
    """The reference: every flow's finish (or cut) time from a plain fluid simulation that
    solves max-min in full between consecutive events."""
    remaining = {i: work for i, (_, _, work, _, _) in enumerate(plan)}
    starts = {i: at / 4 for i, (_, at, _, _, _) in enumerate(plan)}
    cuts = {i: at / 4 + cut / 4 for i, (_, at, _, _, cut) in enumerate(plan) if cut is not None}
    active, done, now = [], {}, 0.0
    while len(done) < len(plan):
        flows = [flows_by_item[i] for i in active]
        speeds = _speed_of_full_solve(links, flows) if flows else []
        events = [t for i, t in starts.items() if i not in active and i not in done]
        events += [t for i, t in cuts.items() if i in active]
        finish = {i: now + remaining[i] / s for i, s in zip(active, speeds, strict=True)}
        nxt = min([*events, *finish.values()])
        for i, s in zip(active, speeds, strict=True):
            remaining[i] -= s * (nxt - now)
        now = nxt
        for i in [i for i in active if finish[i] <= now or cuts.get(i) == now]:
            active.remove(i)
            done[i] = now
        for i, t in starts.items():
            if t == now and i not in active and i not in done:
                active.append(i)
    return done


@settings(max_examples=200, deadline=None)
@given(
    capacities=st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0]), min_size=2, max_size=7),
    plan=st.lists(
        st.tuples(
            st.lists(st.integers(0, 6), min_size=1, max_size=3),  # the route
            st.integers(0, 12),  # start, in quarter seconds
            st.sampled_from([0.5, 1.0, 2.0, 3.0, 7.0]),  # work, seconds at full speed
            st.booleans(),  # a collective (weights capacity / ref)?
            st.one_of(st.none(), st.integers(1, 12)),  # cut after this many quarters
        ),
        min_size=1,
        max_size=14,
    ),
)
def test_incremental_fair_sharing_equals_the_full_solve_at_every_instant(capacities, plan):
    """Flows start, end and are cut in a random order; after every change the rates kept
    incrementally (groups, virtual clocks, local solves) are the progressive filling's
    over every flow in flight, to 1e-12 relative, and every flow ends when a fluid
    simulation solving in full between events says (to 1e-9: its sums differ)."""
    env = simpy.Environment()
    links = [Link(env, f"l{i}", 0.0, c, sharing="fair") for i, c in enumerate(capacities)]
    model = FairShare.of(env)
    running, by_item, ended = [], {}, {}

    def launch(item, route, at, work, collective, cut):
        yield env.timeout(at / 4)
        on = sorted({links[i % len(links)] for i in route}, key=lambda link: link.name)
        flow = model.start(on, work, lambda: ended.setdefault(item, env.now), collective=collective)
        running.append(flow)
        by_item[item] = flow
        if cut is not None:
            yield env.timeout(cut / 4)
            if flow.active:
                model.stop(flow)
                ended.setdefault(item, env.now)

    for item, spec in enumerate(plan):
        env.process(launch(item, *spec))
    checked = [0]

    def check():
        while True:
            yield env.timeout(0.0917)  # never an instant where a change happens
            live = [flow for flow in running if flow.active]
            if not live:
                if env.peek() == float("inf"):
                    return
                continue
            expected = _speed_of_full_solve(links, live)
            for flow, want in zip(live, expected, strict=True):
                assert model.speed(flow) == pytest.approx(want, rel=1e-12, abs=0.0)
            checked[0] += 1

    env.process(check())
    env.run(until=200.0)
    assert checked[0] > 0
    reference = _fluid_finishes(links, plan, by_item)
    assert set(ended) == set(reference)
    for item, at in reference.items():
        assert ended[item] == pytest.approx(at, rel=1e-9, abs=1e-12), item


def test_a_busy_run_past_the_load_budget_keeps_its_bytes_and_bins_its_load(monkeypatch):
    """16 asynchronous workers (every message changes the rate of every link its PS's flows
    cross): with the budget of exact load changes forced below the run's, each fair link's
    load is binned — as many rows as bins at most — and its bytes are the exact ones."""
    from simdist.network import telemetry

    cluster = {"hosts": 16, "ps": 2, "device": {"profile": "cpu"}}
    data = timing_only(cluster, {"kind": "parameter_server"}, {}, steps=300, seed=3)
    exact = run(scenario_from_dict(data))
    changes = len(exact.tables["link_load"])
    monkeypatch.setattr(telemetry, "MAX_LOAD_POINTS", changes // 4)
    binned = run(scenario_from_dict(data))
    pd.testing.assert_frame_equal(exact.events, binned.events)
    links, binned_links = exact.tables["links"], binned.tables["links"]
    assert binned_links["bytes"].to_numpy() == pytest.approx(links["bytes"].to_numpy(), rel=1e-9)
    buckets = binned.tables["link_buckets"].groupby("link", sort=False)["bytes"].sum()
    assert buckets.to_numpy() == pytest.approx(
        links.set_index("link").loc[buckets.index, "bytes"].to_numpy(), rel=1e-9
    )
    assert len(binned.tables["link_load"]) <= changes // 4 + len(links)
    busiest = links["peak_utilisation"].max()
    assert 0 < binned_links["peak_utilisation"].max() <= busiest * (1 + 1e-9)
