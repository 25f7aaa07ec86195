"""parameter_server timing without JAX: hand-made Costs, ``workload=None``, exact step times.

Every quantity is a power of two, so the simulated times are exact binary fractions and
the expected times can be compared with ``==``. The model (simdist.network): a pull or
push of S bytes between a worker and a PS crosses both NICs, occupies them for σ = S/B
and arrives L = α_w + α_ps later; a NIC serialises one message at a time (first come,
first served) and latency does not occupy it. That is the ``sharing: fifo``, ``duplex:
half`` model, which these scenarios select; tests/test_fair_sharing.py pins the default
full-duplex, max-min fair one.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers.ps_timing import (
    ALPHA,
    ALPHA_INTRA,
    B_INTRA,
    SIGMA,
    B,
    L,
    S,
    applied_times,
    costs,
    scenario,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.runtime.engine import simulate
from simdist.step_costs import Costs

# -- one worker ----------------------------------------------------------------------


@pytest.mark.parametrize("c", [2.0**-12, 2.0**-8])
def test_one_worker_one_ps_step_is_compute_plus_pull_and_push(c):
    steps = 5
    result = simulate(scenario(1), costs(c, steps))
    step_s = c + 2 * (ALPHA + ALPHA) + 2 * S / B
    assert applied_times(result) == [k * step_s for k in range(1, steps + 1)]
    assert result.summary["simulated_time_s"] == steps * step_s
    # the PS's NIC is busy σ per message: [pull, push] of every step, latency excluded
    ps_rows = result.events.query("host == 'ps0'")
    spans = list(zip(ps_rows["start_s"], ps_rows["end_s"], strict=True))
    expected = []
    for k in range(steps):
        t = k * step_s
        expected += [(t, t + SIGMA), (t + SIGMA + L + c, t + 2 * SIGMA + L + c)]
    assert spans == expected
    assert list(ps_rows["detail"]) == ["pull ps0", "push ps0"] * steps
    assert set(ps_rows["links"]) == {"ps0/nic"}
    # the worker records each phase as one span, from the request to the arrival
    worker = result.events.query("host == 'worker0' and step == 0")
    assert list(zip(worker["kind"], worker["start_s"], worker["end_s"], strict=True)) == [
        ("comm", 0.0, SIGMA + L),
        ("compute", SIGMA + L, SIGMA + L + c),
        ("comm", SIGMA + L + c, step_s),
    ]
    assert list(worker["detail"])[::2] == ["pull", "push"]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_each_ps_applies_its_share_of_the_optimizer_step_on_its_host(mode):
    # the optimizer step over all the parameters takes A on a host CPU; two PS tasks of
    # one S-byte variable each apply half of it, A/2. The worker NIC queues the pushes:
    # ps1's shard arrives S/B after ps0's, whose apply is over by then; the step ends with
    # ps1's apply (async: as it arrives; sync: both PS once every push is in)
    A, c, steps = 2.0**-11, 2.0**-9, 3
    base = costs(c, steps, leaves=(S, S))
    result = simulate(
        scenario(1, ps=2, strategy={"kind": "parameter_server", "mode": mode}),
        Costs(**{**base.__dict__, "host_optimizer_step_s": A}),
    )
    pushed = c + 2 * L + 2 * (2 * S) / B  # ps1's shard in: pull both, compute, push both
    step_s = pushed + A / 2
    assert result.summary["simulated_time_s"] == steps * step_s
    applies = result.events.query("kind == 'apply'")
    assert set(applies["device"]) == {"ps0/host-cpu", "ps1/host-cpu"}
    assert list(applies["end_s"] - applies["start_s"]) == [A / 2] * 2 * steps
    last = applies[applies["device"] == "ps1/host-cpu"]
    assert list(last["end_s"]) == [k * step_s for k in range(1, steps + 1)]


def test_shards_of_two_ps_queue_on_the_worker_nic():
    # Two variables of S0 and S1 bytes, one per PS: the pulls leave two PS NICs but enter
    # one worker NIC, which serialises them, so the step pays (S0 + S1)/B twice.
    s0, s1 = S, S // 2
    c, steps = 2.0**-9, 3
    result = simulate(scenario(1, ps=2), costs(c, steps, leaves=(s0, s1)))
    step_s = c + 2 * L + 2 * (s0 + s1) / B
    updates = result.tables["updates"]
    assert list(updates["ps"]) == [0, 1] * steps
    # ps0's shard is first on the worker NIC both ways; ps1's arrives (S1/B) after it
    expected = []
    for k in range(1, steps + 1):
        expected += [k * step_s - s1 / B, k * step_s]
    assert list(updates["time_s"]) == expected


def test_local_all_reduce_adds_the_ring_over_the_intra_host_link():
    c, steps = 2.0**-9, 3
    result = simulate(scenario(1, devices_per_host=2), costs(c, steps))
    allreduce_s = 2 * (2 - 1) * (ALPHA_INTRA + S / (2 * B_INTRA))  # ring over 2 devices
    step_s = c + allreduce_s + 2 * L + 2 * SIGMA
    assert applied_times(result) == [k * step_s for k in range(1, steps + 1)]
    local = result.events.query("detail == 'local all-reduce'")
    assert len(local) == 2 * steps  # one span per device per step
    assert set(local["links"]) == {"worker0/intra"}
    assert (local["end_s"] - local["start_s"]).tolist() == [allreduce_s] * (2 * steps)


# -- contention on the PS NIC --------------------------------------------------------


@pytest.mark.parametrize("workers", [2, 4])
def test_simultaneous_pulls_queue_on_the_ps_nic_compute_bound(workers):
    # c + L >= (N-1)·σ: the pushes never meet the pulls. Pull k holds the PS NIC during
    # [kσ, (k+1)σ] and arrives at (k+1)σ + L; push k leaves at (k+1)σ + L + c, spaced σ
    # apart, so it never waits: it arrives at (k+2)σ + 2L + c.
    c = 2.0**-8
    assert c + L >= (workers - 1) * SIGMA
    result = simulate(scenario(workers), costs(c, workers))
    updates = result.tables["updates"]
    assert list(updates["worker"]) == list(range(workers))
    assert applied_times(result) == [(k + 2) * SIGMA + 2 * L + c for k in range(workers)]
    assert list(updates["staleness"]) == list(range(workers))  # all pulled version 0
    pulls = result.events.query("detail == 'pull' and step == 0")
    assert list(pulls["end_s"]) == [(k + 1) * SIGMA + L for k in range(workers)]


@pytest.mark.parametrize("workers", [2, 4])
def test_the_ps_nic_saturates_when_it_is_the_bottleneck(workers):
    # c + L <= (N-1)·σ: a push is ready before the last pull has left, and queues behind
    # it. The PS NIC then never idles: each round it carries the N pulls, then the N
    # pushes, in worker order, 2N·σ per round. Worker k's j-th gradient is the
    # (N + k + 1)-th message of round j and arrives L after it leaves:
    #     (2N·j + N + k + 1)·σ + L        (against c + 2L + 2σ alone)
    c, rounds = 2.0**-12, 3
    assert c + L <= (workers - 1) * SIGMA
    result = simulate(scenario(workers), costs(c, workers * rounds))
    updates = result.tables["updates"]
    expected = [
        (2 * workers * j + workers + k + 1) * SIGMA + L
        for j in range(rounds)
        for k in range(workers)
    ]
    assert applied_times(result) == expected
    assert list(updates["worker"]) == list(range(workers)) * rounds
    assert result.summary["simulated_time_s"] == 2 * workers * rounds * SIGMA + L
    # the PS's NIC rows tile [0, 2N·σ·rounds] without a gap: pulls, then pushes
    ps_rows = result.events.query("host == 'ps0'")
    starts = ps_rows["start_s"].tolist()
    assert starts == [i * SIGMA for i in range(2 * workers * rounds)]
    assert (ps_rows["end_s"] - ps_rows["start_s"]).tolist() == [SIGMA] * len(starts)
    details = ["pull ps0"] * workers + ["push ps0"] * workers
    assert list(ps_rows["detail"]) == details * rounds


# -- failures ------------------------------------------------------------------------


def test_a_failure_during_the_local_all_reduce_cuts_it():
    # worker0 pulls first: pull [0, σ + L], compute c, then the local all-reduce over
    # its 2 devices; it fails halfway through that all-reduce.
    c = 2.0**-9
    allreduce_s = 2 * (ALPHA_INTRA + S / (2 * B_INTRA))
    start = SIGMA + L + c
    at = start + allreduce_s / 2
    failures = {"failures": [{"target": "worker 0", "at": at, "restart_after": 2.0**-10}]}
    result = simulate(scenario(2, devices_per_host=2, faults=failures), costs(c, 6))
    events = result.events
    local = events.query("host == 'worker0' and detail == 'local all-reduce'")
    assert (local["start_s"] > at).all()  # the interrupted all-reduce records nothing
    assert len(local) > 0  # ... and the iteration is redone after the restart
    assert result.summary["failures"] == 1 and result.summary["lost_gradients"] == 1
    assert result.summary["applied_updates"] == 6 - 1
    # worker0's devices do nothing between the failure and the end of the restart
    down = events.query("host == 'worker0' and kind not in ('failure', 'restart')")
    assert not ((down["start_s"] < at + 2.0**-10) & (down["end_s"] > at)).any()
    for _, spans in events.sort_values(["device", "start_s"], kind="stable").groupby("device"):
        gaps = spans["start_s"].to_numpy()[1:] - spans["end_s"].to_numpy()[:-1]
        assert (gaps >= 0).all()


# -- layering ------------------------------------------------------------------------


def test_importing_the_package_loads_neither_simpy_jax_nor_pandas():
    code = (
        "import sys, simdist.strategies.parameter_server as ps; "
        "assert ps.Spec.kinds() == ('parameter_server',); "
        "print(sorted(m for m in ('simpy', 'jax', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


# -- overlap: per-variable pulls in forward order, pushes as gradients are ready ---------


def test_overlap_one_worker_two_layers_hand_case():
    from simdist.step_costs import LayerCost

    f, b = 2.0**-10, 2.0**-9  # each layer: forward σ, backward 2σ
    layers = (
        LayerCost("l0", f, b, S, ("params/w0",)),
        LayerCost("l1", f, b, S, ("params/w1",)),
    )
    base = costs(2 * (f + b), 3, leaves=(S, S))
    layered = Costs(**{**base.__dict__, "layers": layers})
    strategy = {"kind": "parameter_server", "overlap": True}
    result = simulate(scenario(1, strategy=strategy), layered)
    # pulls queue on the NICs in forward order: w0 arrives at σ + L, w1 at 2σ + L;
    # l0 forward [σ+L, 2σ+L], l1 forward [2σ+L, 3σ+L]; backward l1 ends at 5σ+L and
    # its push arrives at 6σ+2L; l0's backward ends at 7σ+L, its push arrives at 8σ+2L,
    # when the PS has the whole gradient: the iteration ends there.
    iteration = 8 * SIGMA + 2 * L
    assert result.summary["simulated_time_s"] == 3 * iteration
    updates = result.tables["updates"]
    assert updates["time_s"].tolist() == [iteration * k for k in (1, 2, 3)]
    events = result.events[result.events["step"] == 0]
    compute = events[events["kind"] == "compute"]
    # l1's variables arrive exactly when l0's forward ends: two forward runs, no wait
    assert compute[["start_s", "end_s", "detail"]].values.tolist() == [
        [SIGMA + L, 2 * SIGMA + L, "forward"],
        [2 * SIGMA + L, 3 * SIGMA + L, "forward"],
        [3 * SIGMA + L, 7 * SIGMA + L, "backward"],
    ]
    waits = events[events["detail"] == "waiting for variables"]
    assert waits[["start_s", "end_s"]].values.tolist() == [[0.0, SIGMA + L]]
    pushes = events[(events["kind"] == "comm") & (events["host"] == "ps0")]
    assert pushes[["start_s", "detail"]].values.tolist() == [
        [0.0, "pull ps0"],
        [SIGMA, "pull ps0"],
        [5 * SIGMA + L, "push ps0"],
        [7 * SIGMA + L, "push ps0"],
    ]
    # without overlap: pull both, compute, push both
    plain = simulate(scenario(1), layered)
    assert plain.summary["simulated_time_s"] == 3 * (2 * SIGMA + L + 6 * SIGMA + 2 * SIGMA + L)
    assert result.summary["exposed_comm_s"] < plain.summary["exposed_comm_s"]


@settings(max_examples=60, deadline=None)
@given(
    workers=st.integers(1, 6),
    moves=st.lists(st.tuples(st.integers(0, 5), st.booleans()), max_size=60),
)
def test_the_slowest_clock_follows_ticks_and_restores(workers, moves):
    """``AsyncTraining.slowest`` (kept as counts per clock value) is ``min(clock)`` after
    any sequence of ticks and restores (a restore sets every clock back)."""
    import simpy

    from simdist.strategies.parameter_server.async_loop import AsyncTraining
    from simdist.strategies.parameter_server.progress import Progress

    strategy = SimpleNamespace(
        env=simpy.Environment(),
        n_workers=workers,
        progress=Progress(),
        total_steps=10**6,
        servers=SimpleNamespace(state=lambda: None),
    )
    training = AsyncTraining(strategy)
    saved = list(training.clock)
    for w, restore in moves:
        if restore:
            training.clock = saved
        else:
            training.tick(w % workers)
            saved = saved if w % 3 else list(training.clock)
        assert training.slowest == min(training.clock)


def test_a_hosts_updates_in_progress_share_its_cpu():
    """Processor sharing: an update of A alone takes A; two at once each go at half speed."""
    import simpy

    from simdist.strategies.parameter_server.host_updates import HostUpdates

    A = 2.0**-10
    env = simpy.Environment()
    host = HostUpdates(env)
    ended: list[tuple[str, float]] = []

    def submit(name: str, at: float) -> None:
        def start(_: object) -> None:
            host.submit(A, lambda: ended.append((name, env.now)))

        env.timeout(at).callbacks.append(start)

    # a alone for A/2 (half done); then a and b at half speed: a's other half takes A, so
    # a ends at 3A/2 with b half done, and b's other half alone ends at 2A. c and d, equal
    # and together from 4A, end together at 6A, in arrival order.
    submit("a", 0.0)
    submit("b", A / 2)
    submit("c", 4 * A)
    submit("d", 4 * A)
    env.run()
    assert ended == [("a", 3 * A / 2), ("b", 2 * A), ("c", 6 * A), ("d", 6 * A)]
