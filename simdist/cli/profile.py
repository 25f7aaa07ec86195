"""``simdist profile``: a model's per-layer FLOPs, bytes and gradient sizes, printed
and written as layers.csv or an ASTRA-sim workload."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from simdist.cli.common import command, console, err_console, guarded, print_table
from simdist.errors import SimdistError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from simdist.layers import LayerProfile, ModelProfile


@command("profile")
def profile_(
    model: Annotated[
        str, typer.Argument(help="A model name (see simdist list), or a layers.csv / ASTRA file.")
    ],
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per batch.")] = 32,
    input_shape: Annotated[
        str | None,
        typer.Option(help="One example: 224x224x3 (images) or 128 (tokens); default the model's."),
    ] = None,
    n_outputs: Annotated[
        int | None, typer.Option(min=1, help="Classifier outputs (default 1000; zoo: 10).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the table to this file.")] = None,
    format_: Annotated[
        str, typer.Option("--format", help="File format of --out: csv (layers.csv) or astra.")
    ] = "csv",
    device: Annotated[
        str, typer.Option(help="Device whose roofline times an ASTRA-sim file gets.")
    ] = "v100",
    precision: Annotated[
        str | None, typer.Option(help="Precision for those times (default: the device's).")
    ] = None,
) -> None:
    """Print a model's per-layer FLOPs, bytes and gradient sizes; write layers.csv or ASTRA-sim."""
    from simdist.layers import parse_shape, read_profile, write_astra, write_layers_csv

    def load() -> ModelProfile:
        if format_ not in ("csv", "astra"):
            raise SimdistError(f"--format: got {format_!r}; expected csv or astra")
        if out is not None and out.is_dir():  # checked before the work, not after the table
            raise SimdistError(
                f"--out: {out} is a folder; give a file, e.g. --out {out / 'layers.csv'}"
            )
        if out is not None and not out.parent.is_dir():
            raise SimdistError(f"--out: the folder {out.parent} does not exist")
        if Path(model).is_file():
            return read_profile(model)
        from simdist.numerics.profile import profile_model

        shape = None if input_shape is None else parse_shape(input_shape)
        with err_console.status(f"profiling {model} at batch {batch_size} …"):
            return profile_model(model, batch_size, shape, n_outputs)

    profile = guarded(load)
    print_table(_profile_table(profile))
    if out is None:
        return
    if format_ == "csv":
        guarded(lambda: write_layers_csv(profile, out))
    else:

        def astra() -> None:
            from simdist.hardware.profiles import DEVICE_PROFILES
            from simdist.hardware.roofline import layer_times

            if device not in DEVICE_PROFILES:
                raise SimdistError(
                    f"--device: got {device!r}; expected one of {', '.join(DEVICE_PROFILES)}"
                )
            spec = DEVICE_PROFILES[device]
            times = layer_times(profile, spec, precision or spec.precision)
            write_astra(profile, out, times)

        guarded(astra)
    console.print(f"wrote {out}", highlight=False)


def _profile_table(profile: ModelProfile) -> Table:
    """The per-layer table of a :class:`~simdist.layers.ModelProfile`, with a total row."""
    from simdist.layers import format_shape

    shape = format_shape(profile.input_shape) or "?"
    batch = profile.batch_size or "?"
    table = Table(
        title=f"{profile.model} · {len(profile.layers)} layers · batch {batch} · input {shape}",
        caption=f"{profile.source}; whole batch; backward = input + weight gradient; "
        "MB = 1e6 bytes; grad = the layer's parameters",
    )
    timed = profile.has_times
    # A profile of times only (an ASTRA-sim file) has no FLOPs or bytes to show.
    costed = any(x.forward_flops or x.backward_flops for x in profile.layers)
    columns = ["layer"]
    columns += ["fwd GFLOP", "bwd GFLOP", "fwd MB", "bwd MB", "out MB"] if costed else []
    columns += ["grad MB"] + (["fwd ms", "bwd ms"] if timed else [])
    for column in columns:
        table.add_column(column, justify="left" if column == "layer" else "right")

    def number(value: float) -> str:
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"

    def row(name: str, layers: Sequence[LayerProfile]) -> list[str]:
        def total(attr: str, scale: float) -> str:
            return number(sum(getattr(x, attr) for x in layers) / scale)

        cells = [name]
        if costed:
            cells += [total("forward_flops", 1e9), total("backward_flops", 1e9)]
            cells += [total(a, 1e6) for a in ("forward_bytes", "backward_bytes", "output_nbytes")]
        cells.append(total("param_nbytes", 1e6))
        if timed:
            cells += [total("forward_s", 1e-3), total("backward_s", 1e-3)]
        return cells

    for layer in profile.layers:
        table.add_row(*row(layer.name, [layer]))
    table.add_section()
    table.add_row(*row("total", profile.layers), style="bold")
    return table
