"""Gradient compression: the compressors against hand-computed examples and a NumPy
reference, the bytes on the wire, the compressor's time, ``method: none`` unchanged, and bad
input refused."""

from __future__ import annotations

import filecmp

import jax.numpy as jnp
import numpy as np
import pytest

from simdist.compressors import METHODS
from simdist.compressors.base import powersgd_factors
from simdist.compressors.methods import orthogonalise, powersgd_round
from simdist.errors import ScenarioError
from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.numerics.compression import compression
from simdist.runtime.engine import simulate
from simdist.scenario import dump_scenario, load_scenario
from simdist.step_costs import Costs, LayerCost
from simdist.strategies.compression import (
    CompressionSpec,
    Method,
    compressor_s,
    compressor_work,
    wire,
)
from simdist.studies.runs import run

EXACT = "cluster.device.variability=0"


def stacked(*replicas: list[float]) -> jnp.ndarray:
    return jnp.asarray(np.array(replicas, dtype=np.float32))


def init(method: str, params: dict, replicas: int, **kw: object):
    c = compression(method, **kw)
    return c, c.init(params, replicas, np.random.SeedSequence(0))


def test_topk_picks_the_largest_and_error_feedback_accumulates_over_two_steps():
    c, state = init("topk", {"w": jnp.zeros(4)}, 2, ratio=0.5)  # k = 2 of 4
    g = {"w": stacked([1, -3, 2, 0.5], [0.1, 0.2, -0.3, 4])}
    # replica 0 sends -3 and 2, keeps 1 and 0.5; replica 1 sends 4 and -0.3, keeps 0.1, 0.2
    total, state = c.update(g, state)
    np.testing.assert_allclose(total["w"], [0, -3, 1.7, 4], rtol=1e-6)
    np.testing.assert_allclose(state.error["w"], [[1, 0, 0, 0.5], [0.1, 0.2, 0, 0]], rtol=1e-6)
    # step 2, replica 0's second gradient: 1 + 1 = 2, -3, 2.5, 0.5 + 0.5 = 1 → -3 and 2.5 go,
    # 2 and 1 stay; replica 1: 0.2, 0.4, -0.3, 4 → 4 and 0.4 go, 0.2 and -0.3 stay
    g2 = {"w": stacked([1, -3, 2.5, 0.5], [0.1, 0.2, -0.3, 4])}
    total, state = c.update(g2, state)
    np.testing.assert_allclose(total["w"], [0, -2.6, 2.5, 4], rtol=1e-6)
    np.testing.assert_allclose(state.error["w"], [[2, 0, 0, 1], [0.2, 0, -0.3, 0]], rtol=1e-6)


def test_topk_without_error_feedback_keeps_nothing():
    c, state = init("topk", {"w": jnp.zeros(4)}, 2, ratio=0.5, error_feedback=False)
    total, state = c.update({"w": stacked([1, -3, 2, 0.5], [0.1, 0.2, -0.3, 4])}, state)
    np.testing.assert_allclose(total["w"], [0, -3, 1.7, 4], rtol=1e-6)
    assert not np.asarray(state.error["w"]).any()


def test_sign_sends_the_mean_magnitude_times_the_sign_and_keeps_the_rest():
    c, state = init("sign", {"w": jnp.zeros(2)}, 2)
    # replica 0: |1| + |-3| = 4, scale 2 → sends (2, -2), keeps (-1, -1);
    # replica 1: scale 2 → sends (2, 2), keeps (0, 0)
    total, state = c.update({"w": stacked([1, -3], [2, 2])}, state)
    np.testing.assert_allclose(total["w"], [4, 0])
    np.testing.assert_allclose(state.error["w"], [[-1, -1], [0, 0]])


def numpy_powersgd(ms: np.ndarray, q: np.ndarray) -> tuple:
    """Vogels et al. 2019, Algorithm 1, in float64 NumPy; P̂ by QR with a positive diagonal
    (what Gram–Schmidt gives)."""
    p = sum(m @ q for m in ms)
    p_hat, r = np.linalg.qr(p)
    p_hat = p_hat * np.sign(np.diag(r))
    qs = np.stack([m.T @ p_hat for m in ms])
    q_sum = qs.sum(0)
    residual = np.stack([m - p_hat @ qw.T for m, qw in zip(ms, qs, strict=True)])
    return p_hat, q_sum, p_hat @ q_sum.T, residual


def test_powersgd_factors_equal_a_numpy_reference():
    rng = np.random.default_rng(3)
    ms = rng.standard_normal((2, 6, 5))
    q = rng.standard_normal((5, 2))
    ours = powersgd_round(jnp.asarray(ms, jnp.float32), jnp.asarray(q, jnp.float32))
    for got, want in zip(ours, numpy_powersgd(ms, q), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    p_hat = np.asarray(orthogonalise(jnp.asarray(ms[0] @ q, jnp.float32)))
    np.testing.assert_allclose(p_hat.T @ p_hat, np.eye(2), atol=1e-6)


def test_powersgd_factors_matrices_and_sends_vectors_whole():
    params = {"bias": jnp.zeros(10), "kernel": jnp.zeros((12, 10))}
    c, state = init("powersgd", params, 2, rank=1)
    assert state.q["bias"] is None and state.q["kernel"].shape == (10, 1)
    rng = np.random.default_rng(1)
    g = {"bias": rng.standard_normal((2, 10)), "kernel": rng.standard_normal((2, 12, 10))}
    g = {k: jnp.asarray(v, jnp.float32) for k, v in g.items()}
    total, new = c.update(g, state)
    np.testing.assert_allclose(total["bias"], g["bias"].sum(0), rtol=1e-6)
    _, q_sum, m_hat, residual = numpy_powersgd(
        np.asarray(g["kernel"], np.float64), np.asarray(state.q["kernel"], np.float64)
    )
    np.testing.assert_allclose(total["kernel"], m_hat, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(new.q["kernel"], q_sum, rtol=1e-4, atol=1e-5)  # warm start
    np.testing.assert_allclose(new.error["kernel"], residual, rtol=1e-4, atol=1e-5)
    # the draw of Q is the named stream's: the same seed, the same Q
    again = c.init(params, 2, np.random.SeedSequence(0))
    np.testing.assert_array_equal(again.q["kernel"], state.q["kernel"])


def test_fp16_and_bf16_are_the_sum_within_half_precision():
    rng = np.random.default_rng(0)
    g = {"w": jnp.asarray(rng.standard_normal((4, 100)), jnp.float32)}
    exact = np.asarray(g["w"]).sum(0)
    for method, tol in (("fp16", 2e-3), ("bf16", 2e-2)):
        c, state = init(method, {"w": jnp.zeros(100)}, 4)
        total, _ = c.update(g, state)
        np.testing.assert_allclose(total["w"], exact, rtol=tol, atol=tol)


# -- the wire and the clock ---------------------------------------------------------------

MiB = 1024 * 1024
# One layer, a 256 × 128 kernel and a 128 bias: 32,896 float32 entries.
LEAVES = (("params/d/bias", (128,), 512), ("params/d/kernel", (256, 128), 131072))
LAYER = LayerCost("d", 1e-3, 2e-3, 131584, param_paths=("params/d/bias", "params/d/kernel"))


def hand_costs(steps: int = 2) -> Costs:
    return Costs(
        compute_s=3e-3,
        grad_nbytes=131584,
        flops_per_replica_step=0.0,
        total_steps=steps,
        param_leaves=LEAVES,
        layers=(LAYER,),
    )


def mwm(compression_yaml: str) -> object:
    return load_scenario(
        "scenarios/mwm_2x4_ring.yaml",
        [
            "numerics=false",
            EXACT,
            "workload.eval_every=0",
            f"strategy.compression={compression_yaml}",
        ],
    )


@pytest.mark.parametrize(
    "spec, rows",
    [
        # 32,896 entries × 2 bytes
        ("{method: fp16}", [("allreduce", 65792, "fp16")]),
        # k = ⌊0.01 · 128⌋ = 1 and ⌊0.01 · 32768⌋ = 327; 8 bytes each; 8 replicas gathered
        ("{method: topk, ratio: 0.01}", [("all_gather", 8 * 328 * 8, "top-k values+indices")]),
        # ⌈128/8⌉ + 4 and ⌈32768/8⌉ + 4 bytes per replica, 8 replicas
        ("{method: sign}", [("all_gather", 8 * (20 + 4100), "signs+scales")]),
        # the bias whole (512 bytes); P 256 × 2, Q 128 × 2 entries
        (
            "{method: powersgd, rank: 2}",
            [
                ("allreduce", 512, "uncompressed"),
                ("allreduce", 2048, "P"),
                ("allreduce", 1024, "Q"),
            ],
        ),
    ],
)
def test_the_wire_carries_the_compressed_sizes(spec, rows):
    scenario = mwm(spec)
    plan = wire(scenario.strategy.compression, [s for _, s, _ in LEAVES], 8)
    assert [tuple(c) for c in plan] == rows
    result = simulate(scenario, hand_costs())
    comm = result.events[result.events["kind"] == "comm"]
    assert comm.groupby("step")["nbytes"].sum().tolist() == [8 * sum(r[1] for r in rows)] * 2
    # a ring over 2 hosts × 4: each NIC carries 2·7/8 of an all-reduce, 7/8 of an all-gather
    share = {"allreduce": 2 * 7 / 8, "all_gather": 7 / 8}
    nic = sum(share[op] * n for op, n, _ in rows) * 2  # two steps
    links = result.tables["links"].set_index("link")
    assert links.loc["worker0/nic/tx", "bytes"] == pytest.approx(nic, rel=1e-12)


def test_the_clock_charges_the_compressor_through_the_roofline():
    scenario = mwm("{method: powersgd, rank: 2}")
    spec = scenario.strategy.compression
    shapes = [s for _, s, _ in LEAVES]
    flops, nbytes = compressor_work(spec, shapes)
    # three matmuls of 2·256·128·2 FLOPs and Gram–Schmidt's 4·256·2²
    assert flops == 3 * 2 * 256 * 128 * 2 + 4 * 256 * 4
    # p = g + e and the residual (4 × 4 bytes per entry), M read by three matmuls, P and Q
    assert nbytes == 4 * 4 * 128 * 256 + 3 * 4 * 128 * 256 + 4 * 2 * (256 + 128) * 2
    v100 = DEVICE_PROFILES["v100"]
    seconds = max(flops / (v100.peak_flops * v100.efficiency), nbytes / v100.achieved_bandwidth_Bps)
    assert compressor_s(flops, nbytes, v100) == seconds + v100.launch_s
    result = simulate(scenario, hand_costs(steps=1))
    first = result.events[(result.events["kind"] == "comm")]["start_s"].min()
    assert first == pytest.approx(3e-3 + seconds + v100.launch_s, rel=1e-12)


def test_powersgd_leaves_small_matrices_whole_as_pytorch_does():
    assert powersgd_factors((128,), 4) is None
    assert powersgd_factors((6, 5), 2) is None  # 30 ≤ 2 · (6 + 5) · 2
    assert powersgd_factors((3, 3, 16, 32), 2) == (144, 32, 2)


# -- method: none, and bad input ----------------------------------------------------------

REPORT_FILES = ["events.csv", "metrics.csv", "links.csv", "summary.json", "scenario.yaml"]


def test_method_none_writes_the_same_report_as_no_compression(tmp_path):
    small = ["workload.steps=6", "workload.eval_every=3"]
    run("scenarios/mirrored_4dev.yaml", out=tmp_path / "a", overrides=small)
    run(
        "scenarios/mirrored_4dev.yaml",
        out=tmp_path / "b",
        overrides=[*small, "strategy.compression={method: none}"],
    )
    _, mismatch, errors = filecmp.cmpfiles(
        tmp_path / "a", tmp_path / "b", REPORT_FILES, shallow=False
    )
    assert mismatch == [] and errors == []


def test_compressed_training_keeps_learning_and_is_deterministic():
    over = ["workload.steps=20", "workload.eval_every=0", EXACT]
    comp = "strategy.compression={method: powersgd, rank: 2}"
    a = run("scenarios/mirrored_4dev.yaml", overrides=[*over, comp])
    b = run("scenarios/mirrored_4dev.yaml", overrides=[*over, comp])
    plain = run("scenarios/mirrored_4dev.yaml", overrides=over)
    loss = a.metrics[a.metrics["metric"] == "train_loss"]["value"].tolist()
    assert loss == b.metrics[b.metrics["metric"] == "train_loss"]["value"].tolist()
    assert loss[-1] < loss[0] / 2
    assert loss != plain.metrics[plain.metrics["metric"] == "train_loss"]["value"].tolist()


def test_the_resolved_scenario_names_the_compression_and_loads_back():
    text = dump_scenario(mwm("{method: topk, ratio: 0.05}"))
    assert "compression:\n    method: topk\n    ratio: 0.05" in text
    assert "compression" not in dump_scenario(mwm("{method: none}"))


@pytest.mark.parametrize(
    "value, field, hint",
    [
        ("{method: powersgd, ratio: 0.1}", "ratio", "rank: 2"),
        ("{method: topk, rank: 2}", "rank", "ratio: 0.01"),
        ("{method: topk, ratio: 1.5}", "ratio", "ratio: 0.01"),
        ("{method: topk, ratio: 0}", "ratio", "ratio: 0.01"),
        ("{method: powersgd, rank: 0}", "rank", "rank: 2"),
        ("{method: fp16, error_feedback: false}", "error_feedback", "remove it"),
        ("{method: gzip}", "method", "powersgd"),
    ],
)
def test_fields_that_do_not_apply_are_refused(value, field, hint):
    with pytest.raises(ScenarioError, match=f"strategy.compression.{field}: .*{hint}"):
        mwm(value)


def test_packs_and_compression_are_refused():
    with pytest.raises(ScenarioError, match=r"strategy\.bytes_per_pack: "):
        load_scenario(
            "scenarios/mwm_2x4_ring.yaml",
            ["strategy.bytes_per_pack=8KiB", "strategy.compression={method: fp16}"],
        )


def test_spec_defaults():
    spec = CompressionSpec(method="topk")
    assert (spec.topk_ratio, spec.powersgd_rank, spec.feedback) == (0.01, 1, True)


def test_overlapped_buckets_each_carry_their_own_compressed_tensors():
    # Two layers, a bucket each (bucket_bytes below either): backward produces layer e's
    # gradient first, so bucket 1 holds e's tensors and bucket 2 d's.
    e = LayerCost("e", 1e-3, 1e-3, 4 * 64 * 32, param_paths=("params/e/kernel",))
    costs = Costs(
        compute_s=5e-3,
        grad_nbytes=LAYER.grad_nbytes + e.grad_nbytes,
        flops_per_replica_step=0.0,
        total_steps=1,
        param_leaves=(*LEAVES, ("params/e/kernel", (64, 32), 4 * 64 * 32)),
        layers=(LAYER, e),
    )
    scenario = load_scenario(
        "scenarios/mwm_2x4_ring.yaml",
        [
            "numerics=false",
            EXACT,
            "workload.eval_every=0",
            "strategy.bucket_bytes=1KiB",
            "strategy.compression={method: fp16}",
        ],
    )
    result = simulate(scenario, costs)
    comm = result.events[result.events["kind"] == "comm"].drop_duplicates("detail")
    assert comm[["detail", "nbytes"]].values.tolist() == [
        ["all-reduce ring bucket 1/2 fp16", 2 * 64 * 32],
        ["all-reduce ring bucket 2/2 fp16", 2 * (128 + 256 * 128)],
    ]


def test_tradeoff_compressed_variants_are_labelled_and_parsed():
    from simdist.studies.tradeoff import STRATEGIES, compressed_strategy, tradeoff_runs

    assert compressed_strategy("topk:0.01:noef") == (
        "all-reduce + topk:0.01:noef",
        "{method: topk, ratio: 0.01, error_feedback: false}",
    )
    assert compressed_strategy("powersgd:2")[1] == "{method: powersgd, rank: 2}"
    with pytest.raises(ValueError, match="only topk takes a ratio"):
        compressed_strategy("fp16:2")
    runs = tradeoff_runs([0], workers=[4], severities=[1], compression=["fp16"])
    assert [r.strategy for r in runs] == [*STRATEGIES, "all-reduce + fp16"]
    assert "cluster.ps=0" in runs[-1].overrides
    assert [r.strategy for r in tradeoff_runs([0], workers=[4], severities=[1])] == list(STRATEGIES)


def test_a_method_alone_is_a_compression_section():
    assert mwm("fp16").strategy.compression.method == "fp16"


def test_fp16_training_stays_within_half_precision_of_uncompressed():
    import jax

    over = ["workload.steps=10", "workload.eval_every=0", EXACT]
    plain = run("scenarios/mirrored_4dev.yaml", overrides=over)
    half = run("scenarios/mirrored_4dev.yaml", overrides=[*over, "strategy.compression=fp16"])
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-2, atol=2e-3),
        plain.params,
        half.params,
    )
    leaves = zip(jax.tree.leaves(plain.params), jax.tree.leaves(half.params), strict=True)
    assert any(not np.array_equal(a, b) for a, b in leaves)  # the casts did happen


def test_the_scenario_offers_exactly_the_registered_compressors():
    import typing

    assert typing.get_args(Method) == METHODS
    with pytest.raises(ValueError, match="expected one of"):
        compression("gzip")
