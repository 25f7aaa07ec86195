"""``simdist list``: the strategies, models, datasets, optimizers, schedules and device
profiles a scenario may name, and each model's size and FLOPs."""

from __future__ import annotations

from rich.table import Table

from simdist.cli.common import command, console, err_console, guarded, print_table


@command("list")
def list_() -> None:
    """Show strategies, models, datasets, optimizers and device profiles."""
    from simdist.catalog import DATASETS, GPT_PRESETS, MODELS, OPTIMIZERS, SCHEDULES
    from simdist.hardware.profiles import DEVICE_PROFILES
    from simdist.strategies import STRATEGIES

    table = Table(title="simdist building blocks", show_lines=False)
    table.add_column("kind", style="bold")
    table.add_column("names")
    table.add_row("strategies", ", ".join(STRATEGIES))
    table.add_row("models", ", ".join(MODELS))
    table.add_row("gpt presets", ", ".join(GPT_PRESETS))
    table.add_row("datasets", ", ".join(DATASETS))
    table.add_row("optimizers", ", ".join(OPTIMIZERS))
    table.add_row("schedules", ", ".join(SCHEDULES))
    print_table(table)

    profiles = Table(title="device profiles (peak × measured efficiency; * the default)")
    for column in ("profile", "kind", "precisions: TFLOP/s × efficiency", "memory", "launch"):
        profiles.add_column(column)
    for p in DEVICE_PROFILES.values():
        peaks = ", ".join(
            f"{k.precision}{'*' if k.precision == p.precision else ''} "
            f"{k.flops / 1e12:.4g} × {k.efficiency:.3g}"
            for k in p.peaks
        )
        memory = (
            f"{p.memory_nbytes / 1e9:.3g} GB, "
            f"{p.memory_bandwidth_Bps / 1e9:.4g} GB/s × {p.memory_efficiency:.3g}"
        )
        profiles.add_row(p.name, p.kind, peaks, memory, f"{p.launch_s * 1e6:g} us")
    print_table(profiles)
    console.print(
        "sources: simdist/hardware/profiles.py and docs/devices.md, Device profiles", soft_wrap=True
    )
    print_table(_models_table())


def _models_table() -> Table:
    """Each model's input, parameter count and forward GFLOPs per example (profiled once at
    batch 1, then read from the disk cache)."""
    from simdist.catalog import FULLSIZE_MODELS, MODELS
    from simdist.layers import format_shape
    from simdist.numerics.profile import cache_dir, profile_model

    table = Table(
        title="models",
        caption=f"XLA cost analysis, batch 1 (zoo: digits-sized input); cached in {cache_dir()}",
    )
    for column in ("model", "kind", "input", "layers", "parameters", "GFLOPs / example"):
        table.add_column(column, justify="left" if column in ("model", "kind") else "right")
    with err_console.status("profiling models (once: cached afterwards) …") as status:
        for i, name in enumerate(MODELS, 1):
            said = f"profiling model {name} ({i} of {len(MODELS)}; once: cached afterwards) …"
            if err_console.is_terminal:
                status.update(said)
            else:  # no spinner off a terminal: a line per model, so a cold cache is not silent
                err_console.print(said, soft_wrap=True, highlight=False)
            p = guarded(lambda name=name: profile_model(name, 1))
            table.add_row(
                name,
                "full-size" if name in FULLSIZE_MODELS else "zoo",
                format_shape(p.input_shape),
                str(len(p.layers)),
                f"{p.param_count:,}",
                f"{p.forward_flops / 1e9:.4g}",
            )
    return table
