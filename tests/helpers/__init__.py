"""What several test files share: small scenario builders and assertions.

The package's modules hold the larger shared sets: ``helpers.malformed`` (broken scenario
files), ``helpers.network`` (a hand-made cluster section) and ``helpers.ps_timing``
(parameter-server scenarios with exact, power-of-two times).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

#: The tests' small hand-checkable scenario: variability off, so a step takes exactly the
#: calibrated 1 ms (tiny(**{"cluster.device.variability": {...}}) turns it back on).
TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 0,
    "cluster": {
        "hosts": 1,
        "devices_per_host": 1,
        "device": {"profile": "v100", "compute_time": "1ms", "variability": 0},
        "links": {"intra_host": {"bandwidth": "1GB/s", "latency": "10us"}},
    },
    "workload": {
        "model": {"name": "mlp", "hidden": [16]},
        "dataset": "digits",
        "batch_size": 8,
        "optimizer": {"name": "sgd", "learning_rate": 0.1},
        "steps": 12,
        "eval_every": 5,
    },
    "strategy": {"kind": "one_device"},
}


def tiny(**changes: Any) -> dict[str, Any]:
    """TINY with dotted-path changes applied: tiny(**{"strategy.kind": "mirrored"})."""
    data = copy.deepcopy(TINY)
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return data


#: The network between hosts of :func:`ps` scenarios.
PS_NETWORK = {"bandwidth": "1GB/s", "latency": "10us"}


def ps(workers: int = 4, servers: int = 1, steps: int = 40, **strategy: Any) -> dict[str, Any]:
    """TINY as a parameter-server run: ``workers`` hosts, ``servers`` PS tasks, ``steps``
    steps; ``strategy`` adds fields of the strategy section."""
    return tiny(
        **{
            "strategy": {"kind": "parameter_server", **strategy},
            "cluster.hosts": workers,
            "cluster.ps": servers,
            "cluster.links.network": PS_NETWORK,
            "workload.steps": steps,
        }
    )


def write(tmp_path: Path, data: dict[str, Any], filename: str = "scenario.yaml") -> Path:
    """Write a scenario dict as YAML; return the path."""
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def assert_trees_close(a: Any, b: Any, atol: float = 1e-6) -> None:
    """Two parameter pytrees agree leaf by leaf within ``atol``."""
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def count_steps(env: Any) -> list[int]:
    """Count ``env``'s SimPy steps from now on: the returned list's one entry."""
    steps = [0]
    step = env.step

    def counted_step() -> None:
        steps[0] += 1
        step()

    env.step = counted_step
    return steps
