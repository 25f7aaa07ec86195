"""A model as the clock sees it: one row per layer, in forward order, and its two file formats.

A :class:`ModelProfile` is what the timing needs to know about a model and no more: per layer,
the FLOPs and bytes of its forward and backward pass, the bytes of its output activation and of
its gradient. It comes from XLA's cost analysis of a Flax model
(:func:`simdist.numerics.profile.profile_model`) or from a file:

* ``layers.csv`` (:func:`write_layers_csv`; columns in README.md, "Per-layer profiles"), which a
  user can also fill from a framework profiler for a model that is not in the zoo;
* ASTRA-sim's text workload format (:func:`write_astra`), so that the DATA-parallel workload files
  of ASTRA-sim 1.0 (e.g. ``examples/text_converter/text_workloads/Resnet50_DataParallel.txt`` of
  https://github.com/astra-sim/astra-sim) run unchanged.

:func:`read_profile` reads either, telling them apart by content. Pure data: no JAX, no SimPy.
"""

from __future__ import annotations

import csv
import io
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simdist.errors import SimdistError

__all__ = [
    "ASTRA_CYCLE_S",
    "CSV_COLUMNS",
    "LayerProfile",
    "ModelProfile",
    "format_shape",
    "parse_shape",
    "read_profile",
    "write_astra",
    "write_layers_csv",
]

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
#: The largest number a layer may have, by the unit its name ends in: far above any real
#: layer (GPT-3's whole forward pass is about 3.5e14 FLOPs per sequence), far below what
#: breaks the clock (1e308 bytes made simulated times NaN) or the int64 columns of the
#: tables (1e19 bytes).
_CAPS = {"flops": 1e21, "bytes": float(2**50), "nbytes": float(2**50), "s": 86_400.0}


@dataclass(frozen=True)
class LayerProfile:
    """One layer's costs for the whole batch.

    ``backward_flops`` covers both gradients a layer computes: with respect to its input (to pass
    on to the layer before it) and to its weights (``weight_grad_fraction`` of it, when the
    source says; the first layer computes no input gradient). ``forward_s``/``backward_s`` are
    times given by the source (an ASTRA-sim file, a profiler export); when set, they are used as
    they are instead of a roofline estimate from FLOPs and bytes.
    """

    name: str
    forward_flops: float
    backward_flops: float
    forward_bytes: float
    backward_bytes: float
    output_nbytes: int
    param_nbytes: int
    param_paths: tuple[str, ...] = ()
    weight_grad_fraction: float | None = None
    forward_s: float | None = None
    backward_s: float | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "\n\r"):
            raise SimdistError(f"layer name {self.name!r}: expected a non-empty single line")
        numbers = {
            "forward_flops": self.forward_flops,
            "backward_flops": self.backward_flops,
            "forward_bytes": self.forward_bytes,
            "backward_bytes": self.backward_bytes,
            "output_nbytes": self.output_nbytes,
            "param_nbytes": self.param_nbytes,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
        }
        for key, value in numbers.items():
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise SimdistError(f"layer {self.name!r}: {key} = {value}; expected a number >= 0")
            cap = _CAPS[key.rpartition("_")[2]]
            if value is not None and value > cap:
                raise SimdistError(
                    f"layer {self.name!r}: {key} = {value:g}; expected at most {cap:g}"
                )
        f = self.weight_grad_fraction
        if f is not None and not 0 <= f <= 1:
            raise SimdistError(
                f"layer {self.name!r}: weight_grad_fraction = {f}; expected a share in [0, 1]"
            )
        object.__setattr__(self, "param_paths", tuple(self.param_paths))

    @property
    def weight_grad_flops(self) -> float | None:
        """FLOPs of the weight gradient (None when the source does not split the backward)."""
        f = self.weight_grad_fraction
        return None if f is None else self.backward_flops * f

    @property
    def input_grad_flops(self) -> float | None:
        """FLOPs of the input gradient (None when the source does not split the backward)."""
        f = self.weight_grad_fraction
        return None if f is None else self.backward_flops * (1.0 - f)

    @property
    def has_times(self) -> bool:
        """True when the source gave this layer's forward and backward times."""
        return self.forward_s is not None and self.backward_s is not None


@dataclass(frozen=True)
class ModelProfile:
    """A model's layers in forward order, for ``batch_size`` examples of ``input_shape``.

    ``batch_size`` is 0 when the source does not say (ASTRA-sim files): the costs are then those
    of one training step as given. ``source`` is ``"xla"``, ``"layers.csv:<path>"`` or
    ``"astra:<path>"``. ``bytes_per_param`` converts gradient bytes to a parameter count.
    """

    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    layers: tuple[LayerProfile, ...]
    source: str
    bytes_per_param: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))
        if not self.layers:
            raise SimdistError(f"profile of {self.model!r} has no layers")
        if self.batch_size < 0:
            raise SimdistError(f"profile of {self.model!r}: batch_size {self.batch_size} < 0")
        names = [layer.name for layer in self.layers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise SimdistError(f"profile of {self.model!r}: layer name {twice[0]!r} is used twice")

    @property
    def param_nbytes(self) -> int:
        """Bytes of all parameters (= of the gradient a replica communicates each step)."""
        return sum(layer.param_nbytes for layer in self.layers)

    @property
    def param_count(self) -> int:
        """Number of parameters."""
        return self.param_nbytes // self.bytes_per_param

    @property
    def forward_flops(self) -> float:
        """FLOPs of the forward pass over the whole batch."""
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> float:
        """FLOPs of the backward pass over the whole batch."""
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def flops(self) -> float:
        """FLOPs of one training step's forward and backward over the whole batch."""
        return self.forward_flops + self.backward_flops

    @property
    def forward_flops_per_example(self) -> float | None:
        """Forward FLOPs of one example (None when the batch size is not known)."""
        return self.forward_flops / self.batch_size if self.batch_size else None

    @property
    def has_times(self) -> bool:
        """True when every layer carries its own times (e.g. read from an ASTRA-sim file)."""
        return all(layer.has_times for layer in self.layers)


# ------------------------------------------------------------------ shapes


def parse_shape(text: str) -> tuple[int, ...]:
    """``"224x224x3"``, ``"224,224,3"`` or ``"128"`` as a tuple of positive ints."""
    parts = [p for p in text.replace(",", "x").replace("×", "x").split("x") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise SimdistError(
            f"input shape {text!r}: expected positive whole numbers joined by 'x', "
            "e.g. 224x224x3 (an image) or 128 (a token sequence)"
        )
    return shape


def format_shape(shape: Sequence[int]) -> str:
    """The inverse of :func:`parse_shape`: ``(224, 224, 3)`` → ``"224x224x3"``."""
    return "x".join(str(int(d)) for d in shape)


# ------------------------------------------------------------------ layers.csv

# The columns of layers.csv, in the order written; README.md documents each.
CSV_COLUMNS: tuple[str, ...] = (
    "name",
    "forward_flops",
    "backward_flops",
    "forward_bytes",
    "backward_bytes",
    "output_nbytes",
    "param_nbytes",
    "weight_grad_fraction",
    "forward_s",
    "backward_s",
    "param_paths",
)
_CSV_HEADER_KEYS = ("model", "batch_size", "input_shape", "bytes_per_param")


def _number(value: float) -> str:
    """Shortest text that reads back as the same float; integers without a decimal point."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def layers_csv_text(profile: ModelProfile) -> str:
    """The ``layers.csv`` text of ``profile`` (see :func:`write_layers_csv`)."""
    out = io.StringIO()
    out.write("# simdist per-layer profile: one row per layer in forward order, whole batch\n")
    out.write(f"# model: {profile.model}\n")
    out.write(f"# batch_size: {profile.batch_size}\n")
    out.write(f"# input_shape: {format_shape(profile.input_shape)}\n")
    out.write(f"# bytes_per_param: {profile.bytes_per_param}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for layer in profile.layers:
        optional = (layer.weight_grad_fraction, layer.forward_s, layer.backward_s)
        writer.writerow(
            [
                layer.name,
                _number(layer.forward_flops),
                _number(layer.backward_flops),
                _number(layer.forward_bytes),
                _number(layer.backward_bytes),
                str(int(layer.output_nbytes)),
                str(int(layer.param_nbytes)),
                *("" if v is None else _number(v) for v in optional),
                ";".join(layer.param_paths),
            ]
        )
    return out.getvalue()


def write_layers_csv(profile: ModelProfile, path: str | Path) -> Path:
    """Write ``profile`` as ``layers.csv`` (atomically); :func:`read_profile` reads it back.

    ``#`` lines at the top carry the model name, batch size, input shape and bytes per
    parameter; then a header row and one row per layer (columns :data:`CSV_COLUMNS`).
    """
    path = Path(path)
    _write_atomic(path, layers_csv_text(profile))
    return path


def _read_csv(path: Path, text: str) -> ModelProfile:
    meta: dict[str, str] = {}
    body: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            key, sep, value = stripped.lstrip("#").partition(":")
            if sep and key.strip() in _CSV_HEADER_KEYS:
                meta[key.strip()] = value.strip()
        elif stripped:
            body.append(line)
    if not body:
        raise SimdistError(f"{path}: no header row; expected columns {', '.join(CSV_COLUMNS)}")
    rows = list(csv.reader(body))
    header = [h.strip() for h in rows[0]]
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if unknown:
        raise SimdistError(
            f"{path}: unknown column {unknown[0]!r}; the columns are {', '.join(CSV_COLUMNS)}"
        )
    have = set(header)
    if "name" not in have or "param_nbytes" not in have:
        raise SimdistError(f"{path}: columns name and param_nbytes are required")
    by_flops = {"forward_flops", "backward_flops"} <= have
    by_time = {"forward_s", "backward_s"} <= have
    if not (by_flops or by_time):
        raise SimdistError(
            f"{path}: give forward_flops and backward_flops (and bytes for the roofline), "
            "or measured forward_s and backward_s, per layer"
        )
    layers = []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise SimdistError(
                f"{path}: row {i} has {len(row)} cells; the header has {len(header)}"
            )
        cells = dict(zip(header, (c.strip() for c in row), strict=True))

        def num(key: str, default: float | None = 0.0, row_no: int = i, c: dict = cells):
            text = c.get(key, "")
            if text == "":
                return default
            try:
                value = float(text)
            except ValueError:
                raise SimdistError(
                    f"{path}: row {row_no}, column {key}: {text!r} is not a number"
                ) from None
            if not math.isfinite(value):  # before int(): it cannot take NaN or inf
                raise SimdistError(
                    f"{path}: row {row_no}, column {key}: {text!r}; expected a finite number"
                )
            return value

        paths = tuple(p for p in cells.get("param_paths", "").split(";") if p)
        fields = {
            "name": cells["name"],
            "forward_flops": num("forward_flops"),
            "backward_flops": num("backward_flops"),
            "forward_bytes": num("forward_bytes"),
            "backward_bytes": num("backward_bytes"),
            "output_nbytes": int(num("output_nbytes")),
            "param_nbytes": int(num("param_nbytes")),
            "param_paths": paths,
            "weight_grad_fraction": num("weight_grad_fraction", None),
            "forward_s": num("forward_s", None),
            "backward_s": num("backward_s", None),
        }
        try:
            layers.append(LayerProfile(**fields))
        except SimdistError as error:  # a value out of range: say where it is
            raise SimdistError(f"{path}: row {i}: {error}") from None
    try:
        batch = int(meta.get("batch_size", "0"))
        per_param = int(meta.get("bytes_per_param", "4"))
        shape = parse_shape(meta["input_shape"]) if meta.get("input_shape") else ()
    except (ValueError, SimdistError) as error:
        raise SimdistError(f"{path}: header line: {error}") from None
    if not 1 <= per_param <= 16:
        raise SimdistError(
            f"{path}: header line bytes_per_param: {per_param}; expected 1 to 16, "
            "e.g. # bytes_per_param: 4 (float32)"
        )
    if batch < 0:
        raise SimdistError(f"{path}: header line batch_size: {batch}; expected 0 or more")
    return ModelProfile(
        model=meta.get("model") or path.stem,
        batch_size=batch,
        input_shape=shape,
        layers=tuple(layers),
        source=f"layers.csv:{path}",
        bytes_per_param=per_param,
    )


# ------------------------------------------------------------------ ASTRA-sim text workloads


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
                "(forward_s, backward_s) of a device, e.g. simdist.roofline.layer_times"
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
    :func:`simdist.roofline.layer_times`) or the layers' own times, in cycles of ``cycle_s``;
    the backward is split by ``weight_grad_fraction`` (when unknown: all of it on the weight
    gradient for the first layer, which computes no input gradient, else half and half).
    """
    path = Path(path)
    _write_atomic(path, astra_text(profile, times, cycle_s))
    return path


def _read_astra(path: Path, text: str, cycle_s: float) -> ModelProfile:
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


def _is_astra(text: str) -> bool:
    lines = [line.split() for line in text.splitlines() if line.strip()]
    return (
        len(lines) >= 2
        and lines[0][0] in _ASTRA_TYPES
        and len(lines[1]) == 1
        and lines[1][0].isdigit()
    )


def read_profile(path: str | Path, cycle_s: float = ASTRA_CYCLE_S) -> ModelProfile:
    """Read a ``layers.csv`` or an ASTRA-sim text workload, told apart by content.

    ASTRA-sim compute times are in cycles of ``cycle_s`` seconds (1 ns: the analytical
    backend's tick); its forward and input-gradient communication (model parallelism) and
    update delays are not read, as ASTRA-sim's own DATA-parallel loop ignores the former.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SimdistError(f"profile file not found: {str(path)!r}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SimdistError(f"cannot read profile file {str(path)!r}: {error}") from None
    if not text.strip():
        raise SimdistError(f"{path}: empty; expected a layers.csv or an ASTRA-sim workload")
    if _is_astra(text):
        return _read_astra(path, text, cycle_s)
    return _read_csv(path, text)


def stage_bounds(counts: Sequence[int]) -> list[tuple[int, int]]:
    """``[first, stop)`` of each stage (a contiguous run of layers) from its layer count.

    ``(2, 1) -> [(0, 2), (2, 3)]``: the clock (pipeline plans) and the numerics (stages)
    cut a model at the same layers.
    """
    out, first = [], 0
    for n in counts:
        out.append((first, first + int(n)))
        first += int(n)
    return out
