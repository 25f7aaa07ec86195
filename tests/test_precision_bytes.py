"""Collectives carry the training precision, model state is 2/2/12 bytes a parameter under
mixed precision for every strategy, and the optimizer step is on the clock.

The hand model: two layers of 200 parameters (800 float32 bytes each), Ψ = 400; under fp16
a gradient or parameter element moves in 2 bytes (Megatron and DeepSpeed reduce fp16
gradients; ``grad_reduce: fp32`` as Megatron's ``--accumulate-allreduce-grads-in-fp32``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simdist.hardware.profiles import DEVICE_PROFILES
from simdist.layers import LayerProfile, ModelProfile, write_layers_csv
from simdist.memory.accounting import optimizer_step_nbytes
from simdist.runtime.costs import measure_costs
from simdist.runtime.engine import run
from simdist.scenario import resolve_scenario

PSI = 400
BATCH = 8


def hand_profile(folder: Path) -> Path:
    layers = tuple(
        LayerProfile(name, 1e3, 2e3, 1e3, 2e3, output_nbytes=512, param_nbytes=800)
        for name in ("fc1", "fc2")
    )
    return write_layers_csv(ModelProfile("hand", BATCH, (4,), layers, "test"), folder / "l.csv")


def scenario(
    folder: Path, strategy: dict, hosts: int = 2, precision: str = "fp16", ps: int = 0, **more
):
    data = {
        "name": "precision",
        "numerics": False,
        "cluster": {
            "hosts": hosts,
            "ps": ps,
            "device": {"profile": "a100", "precision": precision, "variability": 0},
            "links": {"network": {"bandwidth": "1GB/s", "latency": "0us"}},
        },
        "strategy": strategy,
        "workload": {
            "profile": str(hand_profile(folder)),
            "batch_size": BATCH,
            "optimizer": {"name": "adam", "learning_rate": 0.1},
            "steps": 1,
            **more,
        },
    }
    return resolve_scenario(data)


@pytest.mark.parametrize(
    ("precision", "grad_reduce", "per"),
    [
        ("fp16", "precision", 2),
        ("bf16", "precision", 2),
        ("fp16", "fp32", 4),
        ("fp32", "precision", 4),
        ("tf32", "precision", 4),
    ],
)
def test_an_all_reduce_moves_the_gradient_at_its_precision(
    tmp_path: Path, precision: str, grad_reduce: str, per: int
) -> None:
    """A ring over 2 hosts: the message is Ψ × bytes an element, and each NIC sends
    2(N − 1)/N of it: Ψ × bytes (links.csv)."""
    strategy = {"kind": "multi_worker_mirrored", "communication": "ring"}
    strategy["grad_reduce"] = grad_reduce
    result = run(scenario(tmp_path, strategy, precision=precision))
    comm = result.events[result.events["kind"] == "comm"]
    assert set(comm["nbytes"]) == {per * PSI}
    links = result.tables["links"].set_index("link")
    assert links.loc["worker0/nic/tx", "bytes"] == pytest.approx(per * PSI, rel=1e-12)


def test_costs_count_parameters_gradients_and_outputs_at_the_precision(tmp_path: Path) -> None:
    half = measure_costs(scenario(tmp_path, {"kind": "multi_worker_mirrored"}), None)
    full = measure_costs(
        scenario(tmp_path, {"kind": "multi_worker_mirrored"}, precision="fp32"), None
    )
    assert (half.grad_nbytes, half.param_nbytes, half.element_nbytes) == (2 * PSI, 2 * PSI, 2)
    assert (full.grad_nbytes, full.param_nbytes, full.element_nbytes) == (4 * PSI, 4 * PSI, 4)
    assert [x.output_nbytes for x in half.layers] == [256, 256]
    assert [x.output_nbytes for x in full.layers] == [512, 512]
    assert half.checkpoint_nbytes == full.checkpoint_nbytes  # float32 master and moments


def test_zero3_sends_three_half_precision_copies_per_step(tmp_path: Path) -> None:
    """ZeRO paper Sec. 7: stage 3 moves 3Ψ elements per device per step (a parameter
    all-gather in the forward and in the backward, a gradient reduce-scatter), 1.5× data
    parallelism's 2Ψ; each ring collective of S bytes sends (N − 1)/N·S from each device."""
    N = 4
    zero3 = run(scenario(tmp_path, {"kind": "zero", "stage": 3}, hosts=N))
    moved = zero3.summary
    assert moved["all_gather_nbytes_per_step"] == 2 * 2 * PSI
    assert moved["reduce_scatter_nbytes_per_step"] == 2 * PSI
    sent = zero3.tables["links"].set_index("link").loc["worker1/nic/tx", "bytes"]
    assert sent == pytest.approx(3 * PSI * 2 * (N - 1) / N, rel=1e-9)
    data = run(
        scenario(tmp_path, {"kind": "multi_worker_mirrored", "communication": "ring"}, hosts=N)
    )
    ring = data.tables["links"].set_index("link").loc["worker1/nic/tx", "bytes"]
    assert sent / ring == pytest.approx(1.5)


def test_model_state_is_2_2_12_for_pipeline_and_hybrid(tmp_path: Path) -> None:
    """Each stage holds one layer of 200 parameters: 2, 2 and 12 bytes each in fp16."""
    pipe = run(scenario(tmp_path, {"kind": "pipeline", "stages": 2}))
    for held in pipe.summary["memory_per_device"].values():
        assert (held["params"], held["gradients"], held["optimizer"]) == (400, 400, 2400)


def test_the_optimizer_step_is_memory_bound_on_the_clock(tmp_path: Path) -> None:
    """Adam in mixed precision reads and writes 28 bytes a parameter; one_device's step is
    its compute, then the update at the A100's achieved bandwidth."""
    assert optimizer_step_nbytes(PSI, precision="fp16", optimizer="adam") == 28 * PSI
    assert optimizer_step_nbytes(PSI, precision="fp32", optimizer="adam") == 28 * PSI
    assert optimizer_step_nbytes(PSI, precision="fp32", optimizer="sgd") == 12 * PSI
    assert optimizer_step_nbytes(PSI, precision="fp16", optimizer="adam", shards=4) == 7 * PSI
    one = scenario(tmp_path, {"kind": "one_device"}, hosts=1)
    costs = measure_costs(one, None)
    a100 = DEVICE_PROFILES["a100"]
    assert costs.optimizer_step_s == 28 * PSI / a100.achieved_bandwidth_Bps
    result = run(one)
    apply = result.events[result.events["kind"] == "apply"]
    assert list(apply["detail"]) == ["optimizer step"]
    assert float(apply["end_s"].iloc[0] - apply["start_s"].iloc[0]) == pytest.approx(
        costs.optimizer_step_s, rel=1e-12
    )
    assert result.summary["simulated_time_s"] == pytest.approx(
        costs.compute_s + costs.optimizer_step_s, rel=1e-12
    )


def test_zero_divides_the_optimizer_step(tmp_path: Path) -> None:
    N = 4
    result = run(scenario(tmp_path, {"kind": "zero", "stage": 1}, hosts=N))
    apply = result.events[result.events["kind"] == "apply"]
    costs = measure_costs(scenario(tmp_path, {"kind": "zero", "stage": 1}, hosts=N), None)
    spans = (apply["end_s"] - apply["start_s"]).tolist()
    assert spans == pytest.approx([costs.optimizer_step_s / N] * N, rel=1e-12)


def test_parameter_servers_apply_the_optimizer_step_on_their_hosts(tmp_path: Path) -> None:
    """A PS host's update is memory-bound at the cpu profile's bandwidth: the float32
    variable and Adam's two copies read and written, the fp16 gradient read (26 bytes a
    parameter); one PS applies all of it per gradient, on its host's CPU row."""
    ps = scenario(tmp_path, {"kind": "parameter_server"}, ps=1)
    costs = measure_costs(ps, None)
    cpu = DEVICE_PROFILES["cpu"]
    assert optimizer_step_nbytes(PSI, precision="fp32", optimizer="adam", grad_nbytes=2) == 26 * PSI
    assert costs.host_optimizer_step_s == 26 * PSI / cpu.achieved_bandwidth_Bps
    assert costs.optimizer_step_s == 0.0  # nothing on the workers' devices
    result = run(ps)
    apply = result.events[result.events["kind"] == "apply"]
    assert set(apply["device"]) == {"ps0/host-cpu"}
    assert list(apply["detail"]) == ["apply worker 0"]  # steps: 1, the first gradient in
    spans = (apply["end_s"] - apply["start_s"]).tolist()
    assert spans == pytest.approx([costs.host_optimizer_step_s], rel=1e-12)
