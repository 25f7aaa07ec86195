"""Compressed parameter-server pushes: the bytes each PS receives, the compressor's time on
the worker, the numerics against a hand-rolled loop, ``method: none`` unchanged, and the
combinations refused."""

from __future__ import annotations

import filecmp

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_trees_close, ps

from simdist.errors import ScenarioError
from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.numerics.compression import compression
from simdist.runtime.engine import build_workload, run
from simdist.scenario import scenario_from_dict
from simdist.strategies.compression import CompressionSpec, compressor_s, compressor_work
from simdist.studies.runs import run as run_report

# tests/helpers' mlp with hidden [16], leaves in tree order: Dense_0 bias (16,), kernel
# (64, 16), Dense_1 bias (10,), kernel (16, 10); round_robin over 2 PS tasks puts the biases
# on ps0 and the kernels on ps1.
SHAPES = [(16,), (64, 16), (10,), (16, 10)]


def pushed(result, ps: int) -> list[int]:
    """The bytes of every push ps ``ps`` received, in order."""
    rows = result.events.query(f"host == 'ps{ps}' and detail == 'push ps{ps}'")
    return [int(b) for b in rows["nbytes"]]


@pytest.mark.parametrize(
    "comp, ps0, ps1",
    [
        # top-k 5 %: k = max(1, ⌊0.05·d⌋) of each tensor, 8 bytes each (value + int32 index):
        # biases 1 + 1, kernels ⌊51.2⌋ + ⌊8⌋ = 59
        ({"method": "topk", "ratio": 0.05}, 2 * 8, 59 * 8),
        # sign: ⌈d/8⌉ bytes of signs + a 4-byte scale per tensor
        ({"method": "sign"}, (2 + 4) + (2 + 4), (128 + 4) + (20 + 4)),
        # fp16: 2 bytes an entry
        ({"method": "fp16"}, 2 * 26, 2 * (1024 + 160)),
        # PowerSGD rank 2: each kernel as P (m×2) and Q (n×2), 4 bytes an entry (both are
        # factored: 64·16 > 2·(64 + 16)·2 and 16·10 = 160 > 2·(16 + 10)·2 = 104); biases whole
        ({"method": "powersgd", "rank": 2}, 4 * 26, 4 * (64 + 16) * 2 + 4 * (16 + 10) * 2),
    ],
)
def test_each_ps_receives_its_shards_compressed_bytes(comp, ps0, ps1):
    data = ps(workers=2, servers=2, steps=3, mode="sync", compression=comp)
    data["numerics"] = False
    result = run(scenario_from_dict(data))
    assert pushed(result, 0) == [ps0] * 6
    assert pushed(result, 1) == [ps1] * 6
    assert result.summary["compressed_wire_nbytes"] == ps0 + ps1


def test_the_worker_computes_its_compressor_before_it_pushes():
    comp = {"method": "topk", "ratio": 0.05}
    data = ps(workers=1, servers=2, steps=2, mode="sync", compression=comp)
    data["numerics"] = False
    result = run(scenario_from_dict(data))
    spans = result.events.query("detail == 'compress'")
    work = compressor_work(CompressionSpec(**comp), SHAPES)
    seconds = compressor_s(*work, DEVICE_PROFILES["v100"])
    assert list(spans["kind"]) == ["compute", "compute"]
    assert (spans["end_s"] - spans["start_s"]).tolist() == pytest.approx([seconds] * 2, rel=1e-12)
    assert result.summary["compressor_s"] == seconds


def whole(g):
    return [a[None] for a in jax.tree.leaves(g)]


def halves(g):
    """min_size's pieces (below): the first kernel in two row shards of 32 rows."""
    b0, k0, b1, k1 = jax.tree.leaves(g)
    return [a[None] for a in (b0, k0[:32], k0[32:], b1, k1)]


def hand_rolled(data: dict, method: str, steps: int, cut=whole, **kw) -> object:
    """One worker's SGD: its gradient cut into the pieces the PS tasks hold, compressed with
    its own residual, decompressed and applied."""
    wl = build_workload(scenario_from_dict(data))
    params, opt = wl.params, wl.init_opt_state(wl.params)
    comp = compression(method, **kw)
    treedef = jax.tree.structure(params)
    state = comp.init([a[0] for a in cut(params)], 1, None)
    batch = data["workload"]["batch_size"]
    for i in range(steps):
        x, y = wl.batches.batch(i, batch)
        _, g = wl.loss_and_grads(params, x, y, batch)
        sent, state = comp.update(cut(g), state)
        if cut is halves:
            sent = [sent[0], jnp.concatenate(sent[1:3]), sent[3], sent[4]]
        params, opt = wl.apply(params, opt, jax.tree.unflatten(treedef, sent))
    return params


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_one_worker_topk_with_error_feedback_equals_a_hand_rolled_loop(mode):
    comp = {"method": "topk", "ratio": 0.1}
    data = ps(workers=1, servers=1, steps=12, mode=mode, compression=comp)
    result = run(scenario_from_dict(data))
    assert_trees_close(result.params, hand_rolled(data, "topk", 12, ratio=0.1), atol=1e-6)


MIN_SIZE = {"partitioner": "min_size", "min_shard_bytes": 1024}


def test_min_size_shards_are_compressed_each_on_its_own():
    # min_size with 1 KiB shards cuts only the 64×16 kernel (4 KiB), into 2 × 32 rows; the
    # shards are dealt round-robin: bias16 → ps0, rows 0-31 → ps1, rows 32-63 → ps0,
    # bias10 → ps1, kernel 16×10 → ps0. Top-k 5 %: k = 1, 25, 25, 1, 8.
    comp = {"method": "topk", "ratio": 0.05}
    data = ps(workers=2, servers=2, steps=2, mode="sync", compression=comp, **MIN_SIZE)
    data["numerics"] = False
    result = run(scenario_from_dict(data))
    assert pushed(result, 0) == [(1 + 25 + 8) * 8] * 4
    assert pushed(result, 1) == [(25 + 1) * 8] * 4


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_one_worker_sign_on_row_shards_equals_a_hand_rolled_loop(mode):
    comp = {"method": "sign"}
    data = ps(workers=1, servers=2, steps=10, mode=mode, compression=comp, **MIN_SIZE)
    result = run(scenario_from_dict(data))
    assert_trees_close(result.params, hand_rolled(data, "sign", 10, halves), atol=1e-6)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_fp16_pushes_train_as_the_uncompressed_ones(mode):
    plain = run(scenario_from_dict(ps(workers=4, servers=2, steps=20, mode=mode)))
    half = run(
        scenario_from_dict(ps(workers=4, servers=2, steps=20, mode=mode, compression="fp16"))
    )
    assert_trees_close(half.params, plain.params, atol=1e-3)


REPORT_FILES = ["events.csv", "metrics.csv", "links.csv", "summary.json", "scenario.yaml"]


def test_method_none_writes_the_same_report_as_no_compression(tmp_path):
    small = ["workload.steps=8", "workload.eval_every=4"]
    run_report("scenarios/ps_4w2s.yaml", out=tmp_path / "a", overrides=small)
    run_report(
        "scenarios/ps_4w2s.yaml",
        out=tmp_path / "b",
        overrides=[*small, "strategy.compression={method: none}"],
    )
    _, mismatch, errors = filecmp.cmpfiles(
        tmp_path / "a", tmp_path / "b", REPORT_FILES, shallow=False
    )
    assert mismatch == [] and errors == []


@pytest.mark.parametrize(
    "strategy, field",
    [
        ({"mode": "sync", "push": "per_device"}, "push"),
        ({"overlap": True}, "overlap"),
        ({"mode": "sync", "backup_workers": 1}, "backup_workers"),
    ],
)
def test_unsupported_combinations_are_refused(strategy, field):
    data = ps(workers=2, servers=1, steps=4, compression="topk", **strategy)
    with pytest.raises(ScenarioError, match=rf"strategy\.{field}: .*compression: topk"):
        scenario_from_dict(data)


def test_failures_with_compressed_pushes_are_refused():
    data = ps(workers=2, servers=1, steps=4, compression="topk")
    data["faults"] = {"failures": [{"target": "worker 1", "at": "1ms", "restart_after": "1ms"}]}
    with pytest.raises(ScenarioError, match=r"faults\.failures\[0\]: .*compression: topk"):
        scenario_from_dict(data)


def test_powersgd_pushes_train_and_are_deterministic():
    data = ps(workers=2, servers=2, steps=30, compression={"method": "powersgd", "rank": 2})
    a, b = run(scenario_from_dict(data)), run(scenario_from_dict(data))
    assert_trees_close(a.params, b.params, atol=0)
    loss = a.metrics.query("metric == 'train_loss'")["value"].to_numpy()
    assert loss[-5:].mean() < loss[:5].mean()
