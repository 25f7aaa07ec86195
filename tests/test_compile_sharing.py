"""Seeds share compiled programs: the PRNG key data is an argument of the jitted
initialisation, not a constant closed over, so a second seed compiles no new init;
Workloads differing only in seed share every other jitted program too, those the
strategies build (pipeline stages, ZeRO's step, tensor and hybrid parallelism, local SGD,
compression) included; and so do the points of a sweep differing only in a timing field
(bandwidth, stragglers), run one after the other in one process as a sweep's worker does.

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
from helpers import tiny, write

from simdist.numerics import Workload
from simdist.runtime.engine import run
from simdist.scenario import scenario_from_dict
from simdist.scenario.workload import ModelSpec
from simdist.sweep import load_sweep, prepare, run_point

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


def scenario_file(name: str, steps: int = 3, **changes: object) -> dict:
    """``scenarios/<name>.yaml`` cut to ``steps`` steps, one evaluation in the middle."""
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    data["workload"].update(steps=steps, eval_every=2)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[leaf] = value
    return data


def tiny_on(devices: int, strategy: dict, **changes: object) -> dict:
    """tests/helpers' tiny on ``devices`` devices of one host, 3 steps."""
    return tiny(
        **{
            "strategy": strategy,
            "cluster.devices_per_host": devices,
            "workload.steps": 3,
            "workload.eval_every": 2,
            **changes,
        }
    )


HYBRID = {
    "kind": "hybrid",
    "mesh": {"data": 2, "tensor": 2, "pipeline": 2},
    "micro_batches": 2,
    "partition": [2, 2],
    "zero": 1,
}

#: One scenario of each strategy family that builds programs of its own (and the plain
#: synchronous ones), each a few steps long.
FAMILIES = {
    "pipeline_gpipe": lambda: scenario_file("pipeline_gpipe"),
    "pipedream": lambda: scenario_file("pipedream"),
    "zero3_4dev": lambda: scenario_file("zero3_4dev"),
    "zero1_batched": lambda: tiny_on(4, {"kind": "zero", "stage": 1, "execution": "batched"}),
    "fsdp": lambda: tiny_on(4, {"kind": "fsdp"}),
    "tensor_parallel_4dev": lambda: scenario_file("tensor_parallel_4dev"),
    "hybrid": lambda: tiny_on(
        8, HYBRID, **{"workload.model": {"name": "mlp", "hidden": [16, 8, 12]}}
    ),
    "diloco": lambda: scenario_file("diloco", steps=4),
    "powersgd_mwm": lambda: scenario_file("powersgd_mwm"),
    "topk_mirrored": lambda: tiny_on(
        4, {"kind": "mirrored", "compression": {"method": "topk", "ratio": 0.1}}
    ),
    "central_storage_4dev": lambda: scenario_file("central_storage_4dev"),
    "tpu_2x2": lambda: scenario_file("tpu_2x2"),
    "one_device_digits": lambda: scenario_file("one_device_digits"),
}


def leaves_bytes(params: object) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(params)]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_strategys_own_programs_are_shared_by_seeds(family: str) -> None:
    """Seed 1 after seed 0 compiles nothing, and still trains from its own initial
    parameters (the seed is an argument of the shared programs, not a constant in them)."""
    scenario = FAMILIES[family]()
    compiled, params = [], []
    for seed in (0, 1):
        with counting_compiles() as compiles:
            result = run(scenario_from_dict({**scenario, "seed": seed}))
        compiled.append(compiles.names)
        params.append(leaves_bytes(result.params))
    assert compiled[1] == []
    assert all(a != b for a, b in zip(*params, strict=True))


@pytest.mark.parametrize(
    "base, path, values",
    [
        ("ps_4w2s", "cluster.links.network.bandwidth", ["10Gbit/s", "1Gbit/s"]),
        ("pipeline_gpipe", "cluster.links.intra_host.bandwidth", ["300GB/s", "1GB/s"]),
        ("zero3_4dev", "cluster.links.intra_host.latency", ["5us", "500us"]),
        ("ps_4w2s", "faults.stragglers", [[], [{"device": 1, "slowdown": 3.0}]]),
        ("diloco", "faults.stragglers", [[], [{"device": 1, "slowdown": 3.0}]]),
    ],
    ids=[
        "ps_bandwidth",
        "pipeline_bandwidth",
        "zero_latency",
        "ps_stragglers",
        "diloco_stragglers",
    ],
)
def test_sweep_points_differing_in_a_timing_field_share_programs(
    tmp_path: Path, base: str, path: str, values: list
) -> None:
    """A sweep's second point, run in the same process as its first (as one Dask worker
    runs the points it is given), compiles nothing: the timing changes, the programs not."""
    write(tmp_path, scenario_file(base, steps=4), "base.yaml")
    write(tmp_path, {"base": "base.yaml", "grid": {path: values}}, "sweep.yaml")
    points = prepare(load_sweep(tmp_path / "sweep.yaml"))
    compiled, times = [], []
    for point in points:
        assert point.scenario is not None, point.error
        with counting_compiles() as compiles:
            record = run_point(point.scenario, devices=8)
        assert record["status"] == "ok", record
        compiled.append(compiles.names)
        times.append(record["summary"]["simulated_time_s"])
    assert compiled[1] == []
    assert times[0] != times[1]
