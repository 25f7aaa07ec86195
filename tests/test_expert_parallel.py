"""expert_parallel and the zoo's moe: numerics ≡ one device, the routing rule, all-to-all
bytes and the slowest expert by hand, the routing tables, bad input."""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd
import pytest
from helpers import tiny

from simdist.errors import ScenarioError, SimdistError
from simdist.numerics.executor import Workload
from simdist.numerics.moe import ExpertParallelTrainer, capacity, kept_counts, route
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from simdist.scenario.workload import DatasetSpec, ModelSpec, OptimizerSpec
from simdist.strategies.expert_parallel.plan import (
    draw_routing,
    exchange_tokens,
    keep_in_capacity,
    received_tokens,
)
from simdist.strategies.expert_parallel.strategy import ExpertParallelStrategy
from simdist.strategies.sync_trainer import SyncState, SyncTrainer

OPTIMIZERS = {
    "sgd": {"name": "sgd", "learning_rate": 0.1},
    "adam": {"name": "adam", "learning_rate": 0.01},
}


def ep(expert: int = 4, data: int = 1, **changes: object) -> dict:
    """tiny with the default moe (8 experts, top-2) on expert × data devices of one host."""
    return tiny(
        **{
            "strategy": {"kind": "expert_parallel", "expert": expert, "data": data},
            "cluster.devices_per_host": expert * data,
            "workload.model": {"name": "moe"},
            **changes,
        }
    )


# ------------------------------------------------------------------ numerics


def one_device_routing(workload: Workload, params, x, devices: int) -> tuple:
    """The one-device model's routing of ``x``: tokens routed and kept per expert, each
    device's share of the batch (its rows) counted apart ``[G, E]``."""
    model = workload.model
    p = params["params"]
    tokens = np.asarray(x).reshape((x.shape[0] * model.tokens, -1))
    h = tokens @ np.asarray(p["embed"]["kernel"]) + np.asarray(p["embed"]["bias"])
    slots = capacity(len(tokens), model.experts, model.top_k, model.capacity_factor)
    r = route(jax.numpy.asarray(h @ np.asarray(p["router"]["kernel"])), model.top_k, slots)
    onehot = np.asarray(jax.nn.one_hot(r.expert, model.experts, dtype=np.int32))
    kept = onehot * np.asarray(r.kept)[..., None]
    by_device = lambda a: a.sum(axis=1).reshape(devices, -1, model.experts).sum(axis=1)  # noqa: E731
    return by_device(onehot), by_device(kept)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("data, expert", [(1, 4), (2, 2)], ids=["X4", "D2xX2"])
def test_expert_parallel_equals_one_device_step_by_step(optimizer, data, expert):
    """Same routing decisions (tokens routed and kept per device and expert) and the same
    loss within 1e-5 at each of 20 steps as the model on one device with the global batch."""
    workload = Workload(
        ModelSpec(name="moe"),
        DatasetSpec(name="digits"),
        OptimizerSpec(**OPTIMIZERS[optimizer]),
        seed=0,
        total_steps=20,
    )
    devices = data * expert
    one = SyncTrainer(workload, 1, 8 * devices, "batched")
    split = ExpertParallelTrainer(workload, data, expert, 8, SyncState)
    a, b = one.init(), split.init()
    dropped = 0
    for step in range(20):
        batch = one.batch(step)
        routed, kept = one_device_routing(workload, a.params, batch[0], devices)
        a, loss_one = one.update(a, batch)
        b, loss_split, counts = split.step(b, split.batch(step))
        assert np.array_equal(counts.routed, routed) and np.array_equal(counts.kept, kept)
        assert float(loss_split) == pytest.approx(loss_one, abs=1e-5)
        dropped += int(routed.sum() - kept.sum())
    assert dropped > 0  # capacity 1.25 drops tokens: the rule was exercised


def test_keep_in_capacity_is_the_models_rule():
    """The clock's capacity rule (numpy) keeps exactly what the model's router keeps, for
    devices routing with the counts of all (the all-gather) and for one device."""
    logits = jax.random.normal(jax.random.PRNGKey(3), (4 * 24, 8)) * 2.0
    slots = capacity(96, 8, 2, 1.0)
    shards = logits.reshape(4, 24, 8)
    every = np.stack([np.asarray(route(s, 2, slots).counts) for s in shards])  # [G, k, E]
    kept = [
        np.asarray(kept_counts(route(s, 2, slots, lambda c: jax.numpy.asarray(every), g), 8))
        for g, s in enumerate(shards)
    ]
    assert np.array_equal(np.stack(kept), keep_in_capacity(every, slots))
    whole = np.asarray(kept_counts(route(logits, 2, slots), 8))
    assert np.array_equal(whole, keep_in_capacity(every, slots).sum(axis=0))
    assert whole.max() == slots and whole.sum() < 2 * 96


def test_exchange_tokens_by_hand():
    kept = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])  # 2 devices (D 1, X 2), 4 experts
    tokens = exchange_tokens(kept, 1, 2)
    assert tokens.tolist() == [[[3, 7], [11, 15]]]
    assert received_tokens(tokens).tolist() == [[14, 22]]


def test_drawn_routing_is_seeded_and_zipf_favours_the_first_experts():
    uniform = draw_routing(np.random.default_rng(0), [1.0] * 8, 4, 256, 2)
    again = draw_routing(np.random.default_rng(0), [1.0] * 8, 4, 256, 2)
    zipf = draw_routing(np.random.default_rng(0), [1 / (i + 1) ** 1.5 for i in range(8)], 4, 256, 2)
    assert np.array_equal(uniform, again) and uniform.shape == (4, 2, 8)
    assert (uniform.sum(axis=2) == 256).all()  # each token once as each choice
    per_expert = zipf.sum(axis=(0, 1))
    assert per_expert[0] == per_expert.max() and per_expert[-1] == per_expert.min()


# ------------------------------------------------------------------ the clock

#: Tokens each device routes to each expert (4 devices, 8 experts, first choice only).
FIXED = np.array(
    [
        [10, 0, 0, 5, 0, 0, 0, 1],
        [0, 0, 20, 0, 3, 0, 0, 0],
        [0, 7, 0, 0, 0, 0, 2, 0],
        [1, 4, 0, 0, 0, 0, 0, 9],
    ]
)


def fixed_routing(self, step):
    """The router of the hand case: FIXED every step, all kept (the moe model's one layer)."""
    del self, step
    return [(FIXED.copy(), FIXED.copy())]


def hand_case(monkeypatch) -> tuple:
    """4 hosts of one device (each device its own NIC), timing-only, FIXED routing."""
    monkeypatch.setattr(ExpertParallelStrategy, "routing", fixed_routing)
    data = ep(
        **{
            "numerics": False,
            "cluster.hosts": 4,
            "cluster.devices_per_host": 1,
            "cluster.links.network": {"bandwidth": "1GB/s", "latency": "10us"},
            "workload.steps": 3,
        }
    )
    return run(scenario_from_dict(data))


def test_all_to_all_bytes_are_the_routed_tokens_step_by_step(monkeypatch):
    """Each device's NIC sends, every step, the tokens it keeps for other devices' experts
    (dispatch forward, combine backward) and the tokens others kept for its experts
    (combine forward, dispatch backward), × width 32 × 4 bytes; plus the dense all-reduce."""
    result = hand_case(monkeypatch)
    tokens = exchange_tokens(FIXED, 1, 4)[0]
    assert tokens.tolist() == [[10, 5, 0, 1], [0, 20, 3, 0], [7, 0, 0, 2], [5, 0, 0, 9]]
    token_nbytes = 32 * 4
    events = result.events
    for step in range(3):
        rows = events[(events.step == step) & (events.kind == "comm")]
        for detail in ("dispatch forward", "combine forward", "combine backward"):
            moved = rows[rows.detail == detail].nbytes.sum()  # each message on both ends
            off_diagonal = tokens.sum() - np.trace(tokens)
            assert moved == 2 * off_diagonal * token_nbytes
    links = result.tables["links"].set_index("link")
    dense = (8 * 32 + 32 + 32 * 8 + 8 * 32 * 10 + 10) * 4  # embed, router, head
    for i in range(4):
        sent = tokens[i].sum() - tokens[i, i] + tokens[:, i].sum() - tokens[i, i]
        ring = 2 * 3 * dense // 4  # ring all-reduce: 2 (N - 1) / N of the gradient
        assert links.loc[f"worker{i}/nic/tx", "bytes"] == pytest.approx(
            3 * (2 * sent * token_nbytes + ring)
        )


def test_the_step_waits_for_the_busiest_expert(monkeypatch):
    """Device 1 receives the most tokens (25): its experts' span is the longest, the
    others wait for it (idle: barrier) and the combine all-to-all starts when it ends."""
    result = hand_case(monkeypatch)
    ev = result.events[result.events.step == 0]
    spans = ev[(ev.kind == "compute") & (ev.detail == "forward experts")].set_index("device")
    seconds = spans.end_s - spans.start_s
    received = received_tokens(exchange_tokens(FIXED, 1, 4))[0]
    assert received.tolist() == [22, 25, 3, 12]
    assert seconds.idxmax() == "worker1/gpu0"
    assert seconds.rank().tolist() == pd.Series(received, index=seconds.index).rank().tolist()
    combine = ev[(ev.kind == "comm") & (ev.detail == "combine forward")]
    assert combine.start_s.min() == pytest.approx(spans.end_s.max())


def test_moe_8experts_tables_and_summary():
    result = run(
        scenario_from_dict(
            ep(**{"workload.steps": 4, "workload.eval_every": 0, "workload.batch_size": 8})
        )
    )
    steps = result.tables["moe_steps"]
    per_expert = result.tables["moe_routing"]
    assert steps.step.tolist() == [0, 1, 2, 3] and (steps.tokens == 4 * 8 * 8 * 2).all()
    assert len(per_expert) == 4 * 8
    summed = per_expert.groupby("step")[["tokens", "kept"]].sum()
    assert summed.tokens.tolist() == steps.tokens.tolist()
    assert summed.kept.tolist() == steps.kept.tolist()
    dropped = (1 - steps.kept / steps.tokens).tolist()
    assert steps.dropped_fraction.tolist() == pytest.approx(dropped)
    top = per_expert.groupby("step").tokens.max()
    assert steps.imbalance.tolist() == pytest.approx((top / (steps.tokens / 8)).tolist())
    s = result.summary
    assert s["moe_routing"] == "model" and s["expert_capacity"] == capacity(256, 8, 2, 1.25)
    assert s["moe_imbalance_mean"] == pytest.approx(steps.imbalance.mean())


def test_timing_only_zipf_routing_is_more_imbalanced_than_uniform():
    def imbalance(routing):
        data = ep(**{"numerics": False, "workload.steps": 5, "strategy.routing": routing})
        return run(scenario_from_dict(data)).summary["moe_imbalance_mean"]

    uniform, zipf = imbalance("uniform"), imbalance({"zipf": 1.5})
    assert uniform < 1.3 < 2.0 < zipf


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"strategy.expert": 3, "cluster.devices_per_host": 3},
            "strategy.expert: got 3; the expert axis must divide the model's experts (8) so "
            "that each device holds as many, e.g. expert: 2",
        ),
        (
            {"workload.model": {"name": "moe", "capacity_factor": 0}},
            "workload.model.capacity_factor: got 0.0; each expert takes capacity_factor x "
            "top_k x tokens / experts tokens, so it must be > 0, e.g. capacity_factor: 1.25",
        ),
        (
            {"workload.model": {"name": "moe", "top_k": 3}},
            "workload.model.top_k: got 3; each token goes to its top_k experts: 1 (Switch) or "
            "2 (GShard), at most experts (8), e.g. top_k: 2",
        ),
        (
            {"workload.model": {"name": "moe", "experts": 1, "top_k": 2}},
            "workload.model.top_k: got 2; each token goes to its top_k experts: 1 (Switch) or "
            "2 (GShard), at most experts (1), e.g. top_k: 1",
        ),
        (
            {"workload.model": "mlp"},
            "workload.model: got mlp; expert_parallel spreads the experts of mixture-of-experts "
            "layers over devices, e.g. model: {name: moe, experts: 8, top_k: 2} or {name: gpt, "
            "experts: 8} (timing-only)",
        ),
        (
            {"workload.model": {"name": "mlp", "experts": 4}},
            "workload.model.experts: is an option of model moe only, not of mlp",
        ),
        (
            {"strategy.data": 2},
            "strategy.expert: expert 4 x data 2 needs 8 devices; the cluster has 4, "
            "e.g. expert: 4, data: 1",
        ),
        (
            {"strategy.routing": "unifrom"},
            "strategy.routing: got 'unifrom'; did you mean 'uniform'? Expected one of "
            "'uniform', e.g. routing: uniform",
        ),
        (
            {"strategy.routing": {"zipf": 0}},
            "strategy.routing.zipf: got 0; expected a value > 0.0, e.g. zipf: 1.2",
        ),
    ],
    ids=[
        "expert-axis",
        "capacity",
        "top-k",
        "top-k-experts",
        "not-moe",
        "moe-option",
        "devices",
        "routing-word",
        "zipf",
    ],
)
def test_bad_input_is_one_clear_error(changes, message):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(ep(**changes))
    assert str(info.value) == f"<scenario>: {message}"


def test_memory_divides_the_experts_over_the_expert_axis():
    """36,650 parameters: 3,114 dense (embed 8·32 + 32, router 32·8, head 256·10 + 10) and 8
    experts of 2·32·64 + 64 + 32 = 4,192; a device of 4 holds the dense ones and 2 experts,
    with their gradients and Adam's two moments."""
    data = ep(
        **{
            "numerics": False,
            "workload.steps": 1,
            "workload.optimizer": {"name": "adam", "learning_rate": 0.01},
        }
    )
    result = run(scenario_from_dict(data))
    assert result.summary["param_bytes"] == 36_650 * 4
    held = result.summary["memory_per_device"]["worker0/gpu0"]
    mine = 3_114 + 2 * 4_192
    assert (held["params"], held["gradients"], held["optimizer"]) == (
        4 * mine,
        4 * mine,
        8 * mine,
    )


def test_reruns_are_byte_identical_and_the_drawn_routing_follows_the_seed():
    data = ep(**{"numerics": False, "workload.steps": 3, "strategy.routing": {"zipf": 1.0}})
    a, b = run(scenario_from_dict(data)), run(scenario_from_dict(data))
    assert a.events.equals(b.events) and a.tables["moe_routing"].equals(b.tables["moe_routing"])
    other = run(scenario_from_dict({**data, "seed": 1}))
    assert not other.tables["moe_routing"].equals(a.tables["moe_routing"])


def test_pipeline_stages_refuse_the_moe_model_in_one_line():
    data = tiny(
        **{
            "workload.model": {"name": "moe"},
            "strategy": {"kind": "pipeline", "stages": 2},
            "cluster.devices_per_host": 2,
        }
    )
    with pytest.raises(SimdistError) as info:
        run(scenario_from_dict(data))
    assert str(info.value) == (
        "model MoE adds a loss term of its own over its layers (a mixture of experts' load "
        "balancing) and computes between them: it cannot be cut into pipeline stages; run it "
        "timing-only (numerics: false), or use strategy: expert_parallel"
    )
