"""Seeds share compiled programs: the PRNG key data is an argument of the jitted
initialisation, not a constant closed over, so a second seed compiles no new init;
Workloads differing only in seed share every other jitted program too.

Compilations are counted from JAX's own log (``jax_log_compiles``), which names
every jitted function it traces and compiles.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest
import yaml

from simdist.engine import run
from simdist.numerics import Workload
from simdist.scenario import scenario_from_dict
from simdist.scenario.workload import ModelSpec

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

DIGITS = SimpleNamespace(name="digits", path=None, test_fraction=0.2)
SGD = SimpleNamespace(name="sgd", learning_rate=0.1, momentum=0.9, schedule=None)
# A width no other test uses, so the first Workload here compiles its init.
MLP = ModelSpec(name="mlp", hidden=[23])


class _Compiles(logging.Handler):
    """Collects the "Compiling jit(name) ..." messages of ``jax_log_compiles``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Compiling "):
            self.names.append(message.split(" ")[1])


@contextmanager
def counting_compiles() -> Iterator[_Compiles]:
    """Collect the jitted functions compiled inside the block."""
    handler = _Compiles()
    logger = logging.getLogger("jax")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    jax.config.update("jax_log_compiles", True)
    try:
        yield handler
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.setLevel(level)
        logger.removeHandler(handler)


def test_second_seed_compiles_no_new_init() -> None:
    with counting_compiles() as first:
        w0 = Workload(MLP, DIGITS, SGD, seed=0, total_steps=10)
    with counting_compiles() as second:
        w1 = Workload(MLP, DIGITS, SGD, seed=1, total_steps=10)
    assert first.names.count("jit(init)") == 1
    assert second.names.count("jit(init)") == 0
    # The same program, other key data: other parameters.
    kernels0 = [np.asarray(x) for x in jax.tree_util.tree_leaves(w0.params) if x.ndim == 2]
    kernels1 = [np.asarray(x) for x in jax.tree_util.tree_leaves(w1.params) if x.ndim == 2]
    assert [k.shape for k in kernels0] == [k.shape for k in kernels1] == [(64, 23), (23, 10)]
    assert all(a.tobytes() != b.tobytes() for a, b in zip(kernels0, kernels1, strict=True))


@pytest.mark.parametrize("name", ["mirrored_4dev", "ps_4w2s"])
def test_second_seed_of_a_run_compiles_nothing(name: str) -> None:
    """A whole run with seed 1 after seed 0 (model, steps, batches all equal) compiles
    nothing: init, gradients, updates, evaluation and the PS replay's programs are shared."""
    scenario = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    scenario["workload"].update(steps=12, eval_every=6)
    compiled = []
    for seed in (0, 1):
        scenario["seed"] = seed
        with counting_compiles() as compiles:
            run(scenario_from_dict(scenario))
        compiled.append(compiles.names)
    assert compiled[1] == []
