"""``layers.csv``: a per-layer profile as a CSV file a user can write by hand.

One row per layer in forward order (columns :data:`CSV_COLUMNS`; docs/devices.md, "`layers.csv`",
documents each), which a user can also fill from a framework profiler for a model
that is not in the zoo. ``#`` lines at the top carry the model name, batch size, input shape
and bytes per parameter.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from simdist.errors import SimdistError
from simdist.layers.atomic import write_atomic
from simdist.layers.profile import LayerProfile, ModelProfile, format_shape, parse_shape

# The columns of layers.csv, in the order written; docs/devices.md documents each.
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
    "conv3x3_flops",
    "conv3x3_nbytes",
    "elementwise_forward_nbytes",
    "elementwise_backward_nbytes",
)
_CSV_HEADER_KEYS = ("model", "batch_size", "input_shape", "bytes_per_param")


def _number(value: float) -> str:
    """Shortest text that reads back as the same float; integers without a decimal point."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


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
                _number(layer.conv3x3_flops),
                _number(layer.conv3x3_nbytes),
                _number(layer.elementwise_forward_nbytes),
                _number(layer.elementwise_backward_nbytes),
            ]
        )
    return out.getvalue()


def write_layers_csv(profile: ModelProfile, path: str | Path) -> Path:
    """Write ``profile`` as ``layers.csv`` (atomically); :func:`read_profile` reads it back.

    ``#`` lines at the top carry the model name, batch size, input shape and bytes per
    parameter; then a header row and one row per layer (columns :data:`CSV_COLUMNS`).
    """
    path = Path(path)
    write_atomic(path, layers_csv_text(profile))
    return path


def read_layers_csv(path: Path, text: str) -> ModelProfile:
    """The profile in ``text``, the contents of the ``layers.csv`` at ``path``."""
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
    _check_columns(path, header)
    layers = [_layer(path, i, header, row) for i, row in enumerate(rows[1:], start=2)]
    batch, per_param, shape = _header_lines(path, meta)
    return ModelProfile(
        model=meta.get("model") or path.stem,
        batch_size=batch,
        input_shape=shape,
        layers=tuple(layers),
        source=f"layers.csv:{path}",
        bytes_per_param=per_param,
    )


def _check_columns(path: Path, header: list[str]) -> None:
    """Known columns only, with a name, the bytes, and FLOPs or times per layer."""
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


def _layer(path: Path, i: int, header: list[str], row: list[str]) -> LayerProfile:
    """The layer of row ``i`` (counted from the header row, 1); a bad cell names its place."""
    if len(row) != len(header):
        raise SimdistError(f"{path}: row {i} has {len(row)} cells; the header has {len(header)}")
    cells = dict(zip(header, (c.strip() for c in row), strict=True))

    def num(key: str, default: float | None = 0.0) -> float | None:
        text = cells.get(key, "")
        if text == "":
            return default
        try:
            value = float(text)
        except ValueError:
            raise SimdistError(f"{path}: row {i}, column {key}: {text!r} is not a number") from None
        if not math.isfinite(value):  # before int(): it cannot take NaN or inf
            raise SimdistError(f"{path}: row {i}, column {key}: {text!r}; expected a finite number")
        return value

    paths = tuple(p for p in cells.get("param_paths", "").split(";") if p)
    fields = {
        "name": cells["name"],
        "forward_flops": num("forward_flops"),
        "backward_flops": num("backward_flops"),
        "forward_bytes": num("forward_bytes"),
        "backward_bytes": num("backward_bytes"),
        "output_nbytes": int(num("output_nbytes")),  # type: ignore[arg-type]
        "param_nbytes": int(num("param_nbytes")),  # type: ignore[arg-type]
        "param_paths": paths,
        "weight_grad_fraction": num("weight_grad_fraction", None),
        "forward_s": num("forward_s", None),
        "backward_s": num("backward_s", None),
        "conv3x3_flops": num("conv3x3_flops"),
        "conv3x3_nbytes": num("conv3x3_nbytes"),
        "elementwise_forward_nbytes": num("elementwise_forward_nbytes"),
        "elementwise_backward_nbytes": num("elementwise_backward_nbytes"),
    }
    try:
        return LayerProfile(**fields)  # type: ignore[arg-type]
    except SimdistError as error:  # a value out of range: say where it is
        raise SimdistError(f"{path}: row {i}: {error}") from None


def _header_lines(path: Path, meta: dict[str, str]) -> tuple[int, int, tuple[int, ...]]:
    """Batch size, bytes per parameter and input shape from the ``#`` lines, checked."""
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
    return batch, per_param, shape
