"""Numerics: data order, models, mirrored ≡ one_device, deferred gradients, params I/O."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from simdist.errors import SimdistError
from simdist.numerics import (
    BatchStream,
    DeferredGradients,
    Workload,
    load_dataset,
    load_params,
    make_model,
    make_optimizer,
    save_params,
    shard,
)
from simdist.numerics.optim import make_schedule
from simdist.scenario.workload import ModelSpec

DIGITS = SimpleNamespace(name="digits", path=None, test_fraction=0.2)
REGRESSION = SimpleNamespace(
    name="synthetic_regression",
    path=None,
    test_fraction=0.2,
    n_examples=512,
    n_features=16,
    noise=0.1,
)
MLP = ModelSpec(name="mlp", hidden=[32])
SGD = SimpleNamespace(name="sgd", learning_rate=0.1, momentum=0.9, schedule=None)
ADAM = SimpleNamespace(name="adam", learning_rate=0.01, momentum=0.9, schedule=None)


@pytest.fixture(scope="module")
def digits_sgd() -> Workload:
    return Workload(MLP, DIGITS, SGD, seed=3, total_steps=10)


def assert_trees_close(a, b, atol: float) -> None:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def assert_trees_equal(a, b) -> None:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# -- data ------------------------------------------------------------------


def test_digits_split_is_seeded_and_stratified() -> None:
    a, b, c = (load_dataset(DIGITS, s) for s in (0, 0, 1))
    assert a.x_train.shape[1:] == (8, 8, 1) and a.x_train.dtype == np.float32
    assert a.y_train.dtype == np.int32 and a.n_outputs == 10
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    assert len(a.y_test) == pytest.approx(0.2 * 1797, abs=10)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.y_train, c.y_train)
    counts = np.bincount(a.y_test, minlength=10)
    assert counts.min() >= 30  # every class is represented in proportion (~36 each)


def test_digits_read_without_sklearn_bit_identical_to_load_digits() -> None:
    """digits comes from the CSV scikit-learn ships, parsed without importing scikit-learn;
    the arrays must be the bits sklearn.datasets.load_digits gives."""
    code = (
        "import sys; from simdist.numerics.data import _digits_arrays; x, y = _digits_arrays(); "
        "print(x.shape, 'sklearn' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "(1797, 8, 8, 1) False"

    from sklearn.datasets import load_digits

    from simdist.numerics.data import _digits_arrays

    x, y = _digits_arrays()
    bunch = load_digits()
    ref_x = (bunch.images / 16.0).astype(np.float32)[..., None]
    ref_y = bunch.target.astype(np.int32)
    assert x.dtype == ref_x.dtype and y.dtype == ref_y.dtype
    assert x.tobytes() == ref_x.tobytes() and y.tobytes() == ref_y.tobytes()


@pytest.mark.parametrize(
    ("model", "seed"),
    [
        (MLP, 0),
        (MLP, 3),
        (ModelSpec(name="cnn"), 4),
        (ModelSpec(name="softmax"), 5),
    ],
)
def test_jitted_init_is_bit_identical_to_eager_init(model: ModelSpec, seed: int) -> None:
    """Workload initialises in one XLA program (19 programs fewer to compile); the
    parameters are the bits of the eager ``model.init`` (seeds 3-5 give key data ≥ 2**31)."""
    from simdist.seeds import jax_key_data

    w = Workload(model, DIGITS, SGD, seed=seed, total_steps=10)
    key = jax.random.PRNGKey(jax_key_data(seed, "init"))
    eager = w.model.init(key, jax.numpy.zeros((1, 8, 8, 1), jax.numpy.float32))
    la, ta = jax.tree_util.tree_flatten(w.params)
    lb, tb = jax.tree_util.tree_flatten(eager)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def test_batch_stream_deterministic_and_crosses_epochs() -> None:
    data = load_dataset(DIGITS, 0)
    s1, s2, other = BatchStream(data, 5), BatchStream(data, 5), BatchStream(data, 6)
    n = s1.n_train
    for i in (0, 1, 7, 100):
        np.testing.assert_array_equal(s1.batch(i, 32)[0], s2.batch(i, 32)[0])
    assert not np.array_equal(s1.indices(0, 32), other.indices(0, 32))
    # One epoch of batches of 1 is a permutation of the train set.
    epoch0 = np.concatenate([s1.indices(i, n) for i in range(1)])
    np.testing.assert_array_equal(np.sort(epoch0), np.arange(n))
    # A batch spanning the epoch boundary is the tail of epoch 0 + the head of epoch 1.
    size = 100
    i = n // size  # the first batch that crosses (n is not a multiple of 100)
    assert n % size
    idx = s1.indices(i, size)
    e0, e1 = s1.indices(0, n), s1.indices(1, n)
    np.testing.assert_array_equal(idx, np.concatenate([e0[i * size :], e1[: (i + 1) * size - n]]))
    assert not np.array_equal(e0, e1)
    x, y = s1.batch(i, size)
    np.testing.assert_array_equal(y, data.y_train[idx])
    assert shard(x, 4).shape == (4, 25, 8, 8, 1)
    with pytest.raises(SimdistError):
        shard(x, 3)


def test_npz_dataset_missing_key(tmp_path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, x_train=np.zeros((4, 3)), y_train=np.zeros(4, np.int64), x_test=np.zeros((2, 3)))
    with pytest.raises(SimdistError, match=r"d\.npz.*y_test"):
        load_dataset(SimpleNamespace(name="npz", path=path, test_fraction=0.2), 0)
    np.savez(
        path,
        x_train=np.zeros((4, 3)),
        y_train=np.arange(4),
        x_test=np.zeros((2, 3)),
        y_test=np.arange(2),
    )
    d = load_dataset(SimpleNamespace(name="npz", path=path, test_fraction=0.2), 0)
    assert d.task == "classification" and d.n_outputs == 4 and d.input_shape == (3,)


# -- models ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "mlp", "cnn"])
def test_model_output_shapes_on_digits(name: str) -> None:
    model = make_model(SimpleNamespace(name=name, hidden=[16, 8]), 10)
    x = np.zeros((5, 8, 8, 1), np.float32)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x[:1])
    assert jax.eval_shape(model.apply, shapes, x).shape == (5, 10)


def test_regression_with_mlp_learns() -> None:
    w = Workload(MLP, REGRESSION, SGD, seed=0, total_steps=50)
    assert w.task == "regression" and w.dataset.y_train.shape[1] == 1
    before = w.evaluate(w.params)["test_loss"]
    params, state = w.params, w.init_opt_state(w.params)
    for step in range(50):
        x, y = w.batches.batch(step, 32)
        _, g = w.loss_and_grads(params, x, y, 32)
        params, state = w.apply(params, state, g)
    after = w.evaluate(w.params | params)
    assert set(after) == {"test_loss"} and after["test_loss"] < before


_LR = 0.1
_COS = math.cos
#: learning rate at chosen steps for lr 0.1 over 100 steps, from each schedule's closed form:
#: cosine 0.1·½(1 + cos(πt/100)); exponential 0.1·0.5^(t/10); warmup_cosine linear 0 → 0.1
#: over 5 steps, then cosine over the remaining 95; piecewise ×0.1 from step 20 on.
SCHEDULE_VALUES = {
    "constant": {0: _LR, 50: _LR, 99: _LR},
    "cosine": {0: _LR, 25: _LR * 0.5 * (1 + _COS(math.pi / 4)), 50: _LR / 2, 100: 0.0},
    "exponential": {0: _LR, 5: _LR * 0.5**0.5, 10: _LR / 2, 20: _LR / 4},
    "warmup_cosine": {0: 0.0, 1: _LR / 5, 5: _LR, 24: _LR * 0.5 * (1 + _COS(math.pi / 5))},
    "piecewise_constant": {0: _LR, 19: _LR, 20: _LR * 0.1, 60: _LR * 0.1},
}


@pytest.mark.parametrize("kind", sorted(SCHEDULE_VALUES))
def test_schedule_learning_rates(kind: str) -> None:
    sched = SimpleNamespace(
        kind=kind,
        decay_steps=None,
        alpha=0.0,
        decay_rate=0.5,
        transition_steps=10,
        warmup_steps=5,
        boundaries=[20],
        scales=[0.1],
    )
    schedule = make_schedule(sched, _LR, total_steps=100)
    expected = SCHEDULE_VALUES[kind]
    got = {step: float(schedule(step)) for step in expected}
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)
    # The optimizer applies the rate of its own step count: plain sgd on a gradient of 1
    # moves the parameter by exactly -lr(t) at step t.
    opt = make_optimizer(SimpleNamespace(name="sgd", learning_rate=_LR, schedule=sched), 100)
    state = opt.init({"w": np.zeros((), np.float32)})
    moves = {}
    for step in range(max(expected) + 1):
        updates, state = opt.update({"w": np.ones((), np.float32)}, state)
        if step in expected:
            moves[step] = -float(updates["w"])
    assert moves == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_no_schedule_is_the_constant_rate() -> None:
    assert make_schedule(None, 0.25, total_steps=10) == 0.25


# -- execution -------------------------------------------------------------


def _train(w: Workload, n: int, b: int, steps: int, mode: str | None):
    params, state = w.params, w.init_opt_state(w.params)
    for step in range(steps):
        x, y = w.batches.batch(step, n * b)
        if mode is None:
            _, g = w.loss_and_grads(params, x, y, n * b)
        else:
            _, g = w.replica_grads(params, shard(x, n), shard(y, n), n * b, mode)
        params, state = w.apply(params, state, g)
    return params


@pytest.mark.parametrize("n", [2, 4, 8])
def test_mirrored_equals_one_device(digits_sgd: Workload, n: int) -> None:
    w, b = digits_sgd, 4
    one = _train(w, n, b, 5, None)
    for mode in ("batched", "devices"):
        assert_trees_close(_train(w, n, b, 5, mode), one, atol=1e-6)
    assert not np.allclose(
        one["params"]["Dense_0"]["kernel"], w.params["params"]["Dense_0"]["kernel"]
    )


def test_mirrored_equals_one_device_adam() -> None:
    w = Workload(ModelSpec(name="mlp", hidden=[16]), DIGITS, ADAM, seed=1, total_steps=5)
    one = _train(w, 4, 4, 5, None)
    for mode in ("batched", "devices"):
        assert_trees_close(_train(w, 4, 4, 5, mode), one, atol=1e-6)


def test_devices_mode_needs_enough_devices(digits_sgd: Workload) -> None:
    n = len(jax.devices()) + 1
    x, y = digits_sgd.batches.batch(0, n)
    with pytest.raises(SimdistError, match="xla_force_host_platform_device_count"):
        digits_sgd.replica_grads(digits_sgd.params, shard(x, n), shard(y, n), n, "devices")


def test_lr_scale(digits_sgd: Workload) -> None:
    w = digits_sgd
    x, y = w.batches.batch(0, 8)
    _, g = w.loss_and_grads(w.params, x, y, 8)
    state = w.init_opt_state(w.params)
    full, _ = w.apply(w.params, state, g)
    half, _ = w.apply(w.params, state, g, lr_scale=0.5)
    same, _ = w.apply(w.params, state, g, lr_scale=1.0)
    k = ("params", "Dense_0", "kernel")
    p0, pf, ph = (np.asarray(t[k[0]][k[1]][k[2]]) for t in (w.params, full, half))
    np.testing.assert_allclose(ph - p0, 0.5 * (pf - p0), atol=1e-7)
    assert_trees_equal(full, same)


@pytest.mark.parametrize("pending", [1, 3, 8, 11])
def test_deferred_gradients_match_direct(digits_sgd: Workload, pending: int) -> None:
    w, b = digits_sgd, 16
    # Distinct parameter versions, as asynchronous workers would pull them.
    versions = [jax.tree.map(lambda a, i=i: a * (1 + 0.01 * i), w.params) for i in range(pending)]
    batches = [w.batches.batch(i, b) for i in range(pending)]

    def run():
        dg = DeferredGradients(w, global_batch=b, bucket=8)
        tickets = [dg.submit(p, x, y) for p, (x, y) in zip(versions, batches, strict=True)]
        out = [dg.result(t) for t in reversed(tickets)][::-1]
        assert dg.calls == -(-pending // 8) and dg.pending == 0
        with pytest.raises(SimdistError):
            dg.result(tickets[0])
        return out

    first, second = run(), run()
    for (l1, g1), (l2, g2), p, (x, y) in zip(first, second, versions, batches, strict=True):
        assert_trees_equal((l1, g1), (l2, g2))  # reruns are bit-identical
        ld, gd = w.loss_and_grads(p, x, y, b)
        # vmap'd and single evaluations may round differently in XLA: compare closely.
        assert_trees_close((l1, g1), (ld, gd), atol=1e-6)


# -- costs and parameters I/O ------------------------------------------------


def test_parameter_leaves_and_finiteness(digits_sgd: Workload) -> None:
    assert digits_sgd.param_bytes == sum(n for _, n in digits_sgd.param_leaves)
    assert digits_sgd.param_leaves[0][0] == "params/Dense_0/bias"
    assert digits_sgd.is_finite(1.0) and not digits_sgd.is_finite(float("nan"))


def test_save_load_and_init_from(tmp_path, digits_sgd: Workload) -> None:
    path = tmp_path / "p.npz"
    params = jax.tree.map(lambda a: a + 1, digits_sgd.params)
    save_params(path, params)
    assert_trees_equal(load_params(path, digits_sgd.params), params)
    w = Workload(MLP, DIGITS, SGD, seed=3, total_steps=10, init_from=path)
    assert_trees_equal(w.params, params)
    bad = {"params": {"Dense_9": {"kernel": np.zeros((64, 32), np.float32)}}}
    save_params(path, bad)
    with pytest.raises(SimdistError, match=r"missing keys.*params/Dense_0/kernel"):
        Workload(MLP, DIGITS, SGD, seed=3, total_steps=10, init_from=path)


def _fresh_python(code: str, **env: str) -> str:
    """stdout of ``code`` run in a new interpreter (no JAX state, no conftest)."""
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=base | {"JAX_PLATFORMS": "cpu"} | env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_numerics_never_imports_simpy() -> None:
    code = (
        "import pkgutil, sys, simdist.numerics\n"
        "for m in pkgutil.iter_modules(simdist.numerics.__path__, 'simdist.numerics.'):\n"
        "    __import__(m.name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('simdist.numerics.')))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'simpy'))\n"
    )
    loaded, simpy_modules = _fresh_python(code).splitlines()
    assert "simdist.numerics.executor" in loaded  # the walk did import the submodules
    assert simpy_modules == "[]"


def test_ensure_devices_before_and_after_jax_starts() -> None:
    # conftest fixes 8 devices for the test process, so this runs in a fresh interpreter:
    # before the backend exists ensure_devices creates the devices asked for; once it
    # exists the count is fixed and a larger request changes nothing.
    code = (
        "import jax\n"
        "from simdist.numerics import ensure_devices\n"
        "print(ensure_devices(3), ensure_devices(6), len(jax.devices()))\n"
    )
    assert _fresh_python(code).split() == ["3", "3", "3"]
