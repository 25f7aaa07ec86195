"""parameter_server scenarios without JAX: hand-made Costs, powers of two, exact times.

Every quantity is a power of two, so the simulated times are exact binary fractions and
expected times can be compared with ``==``. The model (simdist.network): a pull or push of
S bytes between a worker and a PS crosses both NICs, occupies each for σ = S/B and arrives
L = α_w + α_ps later. With :data:`FIFO` (``sharing: fifo``, ``duplex: half``) a NIC
serialises one message at a time, first come first served, and latency does not occupy it.
Used by tests/test_ps_timing.py, and by the fair-sharing, transport and telemetry tests,
which check their own models against the same hand cases.
"""

from __future__ import annotations

from typing import Any

from simdist.scenario import Scenario, scenario_from_dict
from simdist.step_costs import Costs

B = 2.0**30  # NIC bandwidth, bytes/s
ALPHA = 2.0**-16  # latency of one NIC, s
S = 2**20  # bytes of the parameters (= of a gradient)
SIGMA = S / B  # 2**-10 s on a NIC per message
L = 2 * ALPHA  # a message pays the worker's and the PS's NIC latency
B_INTRA = 2.0**32
ALPHA_INTRA = 2.0**-16


FIFO = {"duplex": "half", "sharing": "fifo"}


def scenario(
    workers: int,
    ps: int = 1,
    devices_per_host: int = 1,
    network: dict[str, Any] = FIFO,
    profile: str = "cpu",
    **extra: object,
) -> Scenario:
    """A timing-only parameter-server scenario: ``workers`` hosts, ``ps`` PS tasks, the NICs
    above and no step-time variability; ``extra`` adds or replaces top-level sections.
    ``profile``: the devices' (the compute time is the costs' whatever the profile)."""
    data = {
        "name": "ps_timing",
        "seed": 0,
        "numerics": False,
        "cluster": {
            "hosts": workers,
            "ps": ps,
            "devices_per_host": devices_per_host,
            # step-time variability off: exact, hand-checkable times
            "device": {"profile": profile, "variability": 0},
            "links": {
                "network": {"bandwidth": B, "latency": ALPHA},
                "intra_host": {"bandwidth": B_INTRA, "latency": ALPHA_INTRA},
            },
            "network": network,
        },
        "workload": {
            "model": "mlp",
            "dataset": "digits",
            "batch_size": 8,
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "steps": 1,
        },
        "strategy": {"kind": "parameter_server"},
        **extra,
    }
    return scenario_from_dict(data)


def costs(compute_s: float, steps: int, leaves: tuple[int, ...] = (S,)) -> Costs:
    """Costs of ``steps`` steps of ``compute_s`` each, with parameter leaves of ``leaves``
    bytes (one leaf of S bytes by default)."""
    param_leaves = tuple((f"params/w{i}", (n // 4,), n) for i, n in enumerate(leaves))
    return Costs(
        compute_s=compute_s,
        grad_nbytes=sum(leaves),
        flops_per_replica_step=0,
        total_steps=steps,
        param_leaves=param_leaves,
    )


def applied_times(result: Any) -> list[float]:
    """The simulated times at which the PS applied each update, in order."""
    return result.tables["updates"]["time_s"].tolist()
