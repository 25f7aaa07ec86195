"""The configurable ``gpt`` against Narayanan et al. 2021 (arXiv:2104.04473): Table 1's
parameter counts and Sec. 5.1's FLOP formula; and its options' errors."""

from __future__ import annotations

import pytest

from simdist.errors import ScenarioError
from simdist.numerics import fullsize
from simdist.numerics.profile import profile_model
from simdist.scenario import scenario_from_dict
from simdist.scenario.workload import ModelSpec

SEQ, VOCAB = 2048, 51200  # Narayanan et al. 2021, Sec. 5.1

# Table 1: (billions of parameters as printed, heads, hidden, layers).
TABLE_1 = [
    (1.7, 24, 2304, 24),
    (3.6, 32, 3072, 30),
    (7.5, 32, 4096, 36),
    (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48),
    (76.1, 80, 10240, 60),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]


def formula_params(layers: int, hidden: int) -> int:
    """12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) = 12lh² + 13lh + (V + s)h, exactly."""
    return 12 * layers * hidden**2 + 13 * layers * hidden + (VOCAB + SEQ) * hidden


@pytest.mark.parametrize(("billions", "heads", "hidden", "layers"), TABLE_1)
def test_param_count_is_table_1(billions: float, heads: int, hidden: int, layers: int) -> None:
    sizes = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": SEQ, "vocab": VOCAB}
    count = fullsize.param_count(fullsize.build("gpt", sizes=sizes))
    # the formula leaves out the final LayerNorm's scale and bias
    assert count == formula_params(layers, hidden) + 2 * hidden
    assert round(count / 1e9, 1) == billions


def test_flops_match_the_formula_without_recomputation() -> None:
    spec = ModelSpec(name="gpt", layers=2, hidden=256, heads=4, seq_len=128, vocab=1000)
    batch, s, n, h, v = 2, 128, 2, 256, 1000
    profile = profile_model(spec, batch, use_cache=False)
    total = sum(layer.forward_flops + layer.backward_flops for layer in profile.layers)
    published = 72 * batch * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
    assert total == pytest.approx(published, rel=0.03)


def test_hidden_is_one_width_and_defaults_are_gpt2() -> None:
    spec = ModelSpec.model_validate({"name": "gpt", "hidden": 2304, "heads": 24})
    assert spec.gpt_sizes() == {
        "layers": 12,
        "hidden": 2304,
        "heads": 24,
        "seq_len": 1024,
        "vocab": 50257,
    }
    assert ModelSpec(name="mlp").gpt_sizes() is None


def _load(model: dict) -> None:
    scenario_from_dict(
        {
            "name": "t",
            "numerics": False,
            "cluster": {"hosts": 1, "devices_per_host": 1},
            "workload": {
                "model": model,
                "batch_size": 1,
                "optimizer": {"name": "sgd", "learning_rate": 0.1},
                "steps": 1,
            },
            "strategy": {"kind": "one_device"},
        }
    )


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ({"name": "gpt", "hidden": 100, "heads": 7}, "heads must divide hidden"),
        ({"name": "gpt", "hidden": [64, 64]}, "one width"),
        ({"name": "mlp", "layers": 4}, "option of model gpt only"),
        ({"name": "gpt", "layers": 0}, "workload.model.layers"),
    ],
)
def test_bad_options_are_refused(model: dict, words: str) -> None:
    with pytest.raises(ScenarioError, match=words):
        _load(model)


def test_profiles_of_two_sizes_are_cached_apart() -> None:
    small = ModelSpec(name="gpt", layers=1, hidden=64, heads=2, seq_len=16, vocab=100)
    wider = ModelSpec(name="gpt", layers=1, hidden=128, heads=2, seq_len=16, vocab=100)
    a, b = profile_model(small, 1), profile_model(wider, 1)
    assert a.param_count == 12 * 64**2 + 13 * 64 + 116 * 64 + 2 * 64
    assert b.param_count == 12 * 128**2 + 13 * 128 + 116 * 128 + 2 * 128


def test_tensor_parallel_splits_gpt_by_its_own_heads() -> None:
    with pytest.raises(ScenarioError, match="attention heads"):
        scenario_from_dict(
            {
                "name": "t",
                "numerics": False,
                "cluster": {"hosts": 1, "devices_per_host": 8},
                "workload": {
                    "model": {"name": "gpt", "layers": 1, "hidden": 96, "heads": 6},
                    "batch_size": 1,
                    "optimizer": {"name": "sgd", "learning_rate": 0.1},
                    "steps": 1,
                },
                "strategy": {"kind": "tensor_parallel", "tensor": 4},
            }
        )
