"""ASTRA-sim's text workload format, read and written.

The DATA-parallel workload files of ASTRA-sim 1.0 (e.g.
``examples/text_converter/text_workloads/Resnet50_DataParallel.txt`` of
https://github.com/astra-sim/astra-sim) run unchanged, and a profile can be written as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from simdist.errors import SimdistError
from simdist.layers.atomic import write_atomic
from simdist.layers.profile import LayerProfile, ModelProfile

# ASTRA-sim counts compute in cycles; its analytical backend ticks once per nanosecond.
ASTRA_CYCLE_S = 1e-9
# ASTRA-sim 1.0's training-loop types (first line of a text workload; Workload.cc).
_ASTRA_TYPES = (
    "DATA",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_TRANSFORMER",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
    "HYBRID_CUSTOMIZED",
    "MICRO",
    "DISTRIBUTED_INFERENCE",
)
_ASTRA_COMMS = ("NONE", "ALLREDUCE", "ALLGATHER", "ALLTOALL", "REDUCESCATTER", "ALLREDUCEALLTOALL")
_ASTRA_FIELDS = 12  # name, reserved, then (compute, comm type, comm size) x 3, update delay


def astra_text(
    profile: ModelProfile,
    times: Sequence[tuple[float, float]] | None = None,
    cycle_s: float = ASTRA_CYCLE_S,
) -> str:
    """The ASTRA-sim text workload of ``profile`` (see :func:`write_astra`)."""
    if times is None:
        missing = [layer.name for layer in profile.layers if not layer.has_times]
        if missing:
            raise SimdistError(
                f"profile of {profile.model!r}: layer {missing[0]!r} has FLOPs but no times; "
                "an ASTRA-sim workload needs compute times: pass the per-layer "
                "(forward_s, backward_s) of a device, e.g. simdist.hardware.roofline.layer_times"
            )
        times = [(layer.forward_s, layer.backward_s) for layer in profile.layers]
    if len(times) != len(profile.layers):
        raise SimdistError(f"got {len(times)} layer times for {len(profile.layers)} layers")
    lines = ["DATA", str(len(profile.layers))]
    for index, (layer, (forward_s, backward_s)) in enumerate(
        zip(profile.layers, times, strict=True)
    ):
        share = layer.weight_grad_fraction
        if share is None:  # not split: the first layer computes no input gradient
            share = 0.0 if layer.param_nbytes == 0 else (1.0 if index == 0 else 0.5)
        backward = float(backward_s) / cycle_s
        weight_grad = round(backward * share)
        input_grad = max(round(backward) - weight_grad, 0)
        comm = ("ALLREDUCE", layer.param_nbytes) if layer.param_nbytes else ("NONE", 0)
        name = "_".join(layer.name.split())
        cells = [
            name,
            "-1",
            str(round(float(forward_s) / cycle_s)),
            "NONE",
            "0",
            str(input_grad),
            "NONE",
            "0",
            str(weight_grad),
            comm[0],
            str(int(comm[1])),
            "0",
        ]
        lines.append("\t".join(cells))
    return "\n".join(lines) + "\n"


def write_astra(
    profile: ModelProfile,
    path: str | Path,
    times: Sequence[tuple[float, float]] | None = None,
    cycle_s: float = ASTRA_CYCLE_S,
) -> Path:
    """Write ``profile`` as an ASTRA-sim 1.0 DATA-parallel text workload (atomically).

    Format (ASTRA-sim ``workload_inputs/README.md``): a line ``DATA``, the number of layers,
    then per layer: name, a reserved ``-1``, and three (compute cycles, communication type,
    bytes) triples for the forward pass, the input gradient and the weight gradient, then the
    update delay (written as 0). Only the weight gradient communicates: an ``ALLREDUCE`` of the
    layer's gradient bytes. Compute times are ``times[i] = (forward_s, backward_s)`` (e.g. from
    :func:`simdist.hardware.roofline.layer_times`) or the layers' own times, in cycles of
    ``cycle_s``; the backward is split by ``weight_grad_fraction`` (when unknown: all of it on the
    weight
    gradient for the first layer, which computes no input gradient, else half and half).
    """
    path = Path(path)
    write_atomic(path, astra_text(profile, times, cycle_s))
    return path


def read_astra(path: Path, text: str, cycle_s: float) -> ModelProfile:
    """The profile in ``text``, the contents of the ASTRA-sim workload at ``path``."""
    lines = [line for line in text.splitlines() if line.strip()]
    kind = lines[0].split()[0]
    if kind != "DATA":
        raise SimdistError(
            f"{path}: an ASTRA-sim {kind} workload; simdist reads DATA-parallel workloads "
            "(first line DATA), whose only communication is the weight-gradient all-reduce"
        )
    try:
        count = int(lines[1].split()[0]) if len(lines) > 1 else -1
    except ValueError:
        count = -1
    if count < 1:
        raise SimdistError(f"{path}: line 2 must be the number of layers, e.g. 54")
    rows = lines[2:]
    if len(rows) != count:
        raise SimdistError(f"{path}: line 2 announces {count} layers; found {len(rows)} lines")
    layers = []
    for number, line in enumerate(rows, start=3):
        cells = line.split()
        if len(cells) < _ASTRA_FIELDS:
            raise SimdistError(
                f"{path}: line {number}: {len(cells)} fields; expected {_ASTRA_FIELDS}: name, "
                "reserved, then forward, input-gradient and weight-gradient (compute cycles, "
                "communication type, bytes), then the update delay"
            )
        name = cells[0]
        try:
            fwd, ig, wg = (float(cells[k]) for k in (2, 5, 8))
            comm_bytes = int(float(cells[10]))
        except (ValueError, OverflowError):  # not a number, NaN, or inf
            raise SimdistError(
                f"{path}: line {number}: compute times (fields 3, 6, 9) and the weight-gradient "
                "size (field 11) must be numbers"
            ) from None
        comm_types = (cells[3], cells[6], cells[9])
        for comm in comm_types:
            if comm not in _ASTRA_COMMS:
                raise SimdistError(
                    f"{path}: line {number}: communication type {comm!r}; expected one of "
                    f"{', '.join(_ASTRA_COMMS)}"
                )
        if comm_types[2] not in ("ALLREDUCE", "NONE"):
            raise SimdistError(
                f"{path}: line {number}: weight-gradient {comm_types[2]}; in a DATA-parallel "
                "workload simdist all-reduces the gradient: use ALLREDUCE (or NONE)"
            )
        grad_nbytes = comm_bytes if comm_types[2] == "ALLREDUCE" else 0
        backward = ig + wg
        try:  # a value out of range: say where it is
            layers.append(
                LayerProfile(
                    name=name,
                    forward_flops=0.0,
                    backward_flops=0.0,
                    forward_bytes=0.0,
                    backward_bytes=0.0,
                    output_nbytes=0,
                    param_nbytes=grad_nbytes,
                    weight_grad_fraction=wg / backward if backward > 0 else None,
                    forward_s=fwd * cycle_s,
                    backward_s=backward * cycle_s,
                )
            )
        except SimdistError as error:
            raise SimdistError(f"{path}: line {number}: {error}") from None
    return ModelProfile(
        model=path.stem,
        batch_size=0,
        input_shape=(),
        layers=tuple(layers),
        source=f"astra:{path}",
    )


def is_astra(text: str) -> bool:
    """True when ``text`` starts as an ASTRA-sim text workload: a type, then a count."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    return (
        len(lines) >= 2
        and lines[0][0] in _ASTRA_TYPES
        and len(lines[1]) == 1
        and lines[1][0].isdigit()
    )
