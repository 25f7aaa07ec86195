"""The generated ``teacher`` data set: deterministic by seed, its stated size, exact class
balance, a difficulty knob that moves the best reachable accuracy, shapes known without JAX."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import tiny

from simdist.errors import ScenarioError
from simdist.numerics.data import load_dataset
from simdist.numerics.generated import TEACHER_WIDTH, _Teacher, class_quotas, teacher_arrays
from simdist.numerics.sizes import model_inputs, train_examples
from simdist.scenario import scenario_from_dict


def _spec(**dataset: object):
    """The DatasetSpec of a tiny scenario training on ``teacher`` with these options."""
    data = tiny(**{"workload.dataset": {"name": "teacher", **dataset}})
    return scenario_from_dict(data).workload.dataset


@pytest.fixture(scope="module")
def default_set():
    spec = _spec()
    return spec, load_dataset(spec, seed=0)


def test_defaults_give_60k_examples_of_32_features_in_10_classes(default_set) -> None:
    spec, data = default_set
    assert (spec.n_examples, spec.n_features, spec.n_classes, spec.noise) == (60_000, 32, 10, 0.0)
    assert data.x_train.shape == (48_000, 32) and data.x_test.shape == (12_000, 32)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int32
    assert (data.task, data.n_outputs, data.input_shape) == ("classification", 10, (32,))
    assert train_examples(spec, seed=0) == data.n_train == 48_000


def test_classes_are_exactly_balanced(default_set) -> None:
    _, data = default_set
    assert np.bincount(data.y_train).tolist() == [4_800] * 10
    assert np.bincount(data.y_test).tolist() == [1_200] * 10
    # 1,001 over 3 classes: 334, 334, 333; the test set (250) likewise.
    small = teacher_arrays(1_001, 250, 8, 3, 0.2, seed=4)
    assert np.bincount(small.y_train).tolist() == [334, 334, 333]
    assert np.bincount(small.y_test).tolist() == [84, 83, 83]
    assert class_quotas(7, 3).tolist() == [3, 2, 2]


def test_same_seed_same_arrays_other_seed_other_arrays(default_set) -> None:
    spec, data = default_set
    again = load_dataset(spec, seed=0)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(again, key), getattr(data, key))
    other = load_dataset(spec, seed=1)
    assert not np.array_equal(other.x_train, data.x_train)
    assert not np.array_equal(other.y_train, data.y_train)


def test_noise_zero_labels_are_the_teachers_argmax() -> None:
    data = teacher_arrays(2_000, 500, 12, 5, 0.0, seed=7)
    teacher = _Teacher(12, 5, seed=7)
    assert teacher.w1.shape == (12, TEACHER_WIDTH)
    np.testing.assert_array_equal(
        np.argmax(teacher.logits(data.x_test.astype(np.float64)), axis=1), data.y_test
    )
    assert data.bayes_accuracy == 1.0


def test_noise_sets_the_difficulty() -> None:
    """A hotter teacher flips more labels: the best reachable accuracy falls towards chance
    (0.1 for 10 classes), and the teacher's own argmax agrees less with the labels."""
    bayes, agree = [], []
    for noise in (0.0, 0.1, 0.3, 3.0):
        data = teacher_arrays(4_000, 4_000, 16, 10, noise, seed=2)
        teacher_says = np.argmax(_Teacher(16, 10, seed=2).logits(data.x_test), axis=1)
        bayes.append(data.bayes_accuracy)
        agree.append(float(np.mean(teacher_says == data.y_test)))
    assert bayes[0] == 1.0 and agree[0] == 1.0
    assert bayes == sorted(bayes, reverse=True) and agree == sorted(agree, reverse=True)
    assert 0.1 < bayes[-1] < 0.2 and agree[-1] < 0.2
    # The labels agree with the Bayes rule about as often as the Bayes accuracy says.
    assert agree[1] == pytest.approx(bayes[1], abs=0.02)


def test_scenario_options_and_errors() -> None:
    spec = _spec(n_examples=5_000, n_features=8, n_classes=4, noise=0.2, test_fraction=0.1)
    assert model_inputs(spec, seed=0) == ((8,), 4)
    assert train_examples(spec, seed=0) == 4_500
    data = load_dataset(spec, seed=0)
    assert data.x_train.shape == (4_500, 8) and np.bincount(data.y_train).tolist() == [1_125] * 4
    # A scenario written out by dump_scenario (every field) reads back the same.
    again = scenario_from_dict(tiny(**{"workload.dataset": spec.model_dump(mode="json")}))
    assert again.workload.dataset == spec
    with pytest.raises(ScenarioError) as info:
        _spec(n_classes=1)
    assert info.value.field == "workload.dataset.n_classes"


@pytest.mark.parametrize("test_fraction", [0.1, 0.2, 0.25, 0.33, 0.5])
def test_the_digits_training_set_size_is_read_from_the_labels_alone(test_fraction: float) -> None:
    spec = SimpleNamespace(name="digits", test_fraction=test_fraction)
    assert train_examples(spec, 0) == load_dataset(spec, 0).n_train


def test_shapes_and_size_are_known_without_jax_or_drawing_data() -> None:
    code = (
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from simdist.numerics import sizes\n"
        "spec = SimpleNamespace(name='teacher', n_examples=10_000_000, n_features=5,\n"
        "                       n_classes=7, noise=0.0, test_fraction=0.2)\n"
        "assert sizes.model_inputs(spec, 0) == ((5,), 7)\n"
        "assert sizes.train_examples(spec, 0) == 8_000_000\n"
        "assert 'jax' not in sys.modules and 'simdist.numerics.generated' not in sys.modules\n"
        "assert 'numpy' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
