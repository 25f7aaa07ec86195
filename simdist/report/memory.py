"""Memory in a report: ``memory.png`` (what each device holds at its peak, against its
capacity) and the memory rows of report.md's key numbers, for every strategy.

Both read summary.json's ``memory_per_device`` (device → parts: ``params``, ``gradients``,
``optimizer``, ``activations``, ``weight_versions``, ``total``; the memory model may add
parts) and ``memory_off_device`` (what parameter-server tasks or the host CPU hold), and
the device capacities of the scenario's profiles (:func:`device_capacities`; a pipeline's
``device_memory_bytes`` where none is known). Parts are read generically: the known ones
are stacked in :data:`PARTS`' order, whatever the total holds beyond them is one "other"
segment (never double-counted: a new key may itemise a part already stacked), and
report.md names every numeric part, known or not. Devices that hold exactly the same are
one bar ("worker0/gpu0 + 31 alike"): a data-parallel job's replicas, a pipeline's stages.
:func:`memory_layout` returns what is drawn, so that it can be checked without pixels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from simdist.report.figures import no_data, save_figure
from simdist.summary import natural_key
from simdist.units import format_size

if TYPE_CHECKING:
    from simdist.scenario.schema import Scenario

#: summary.json's parts → (label, colour), stacked in this order.
PARTS = {
    "params": ("parameters", "#1f77b4"),
    "gradients": ("gradients", "#aec7e8"),
    "optimizer": ("optimizer state", "#9467bd"),
    "activations": ("activations", "#ff7f0e"),
    "weight_versions": ("stashed weight versions", "#d62728"),
}
#: The segment of a total beyond the parts of :data:`PARTS`.
OTHER = ("other (the total beyond the parts above)", "#bcbd22")
#: The tallest figure (inches), and the inches one row label needs.
MAX_HEIGHT_IN = 14.0
LABEL_IN = 0.16


@dataclass(frozen=True)
class MemoryGroup:
    """Devices (or off-device tasks) that hold exactly the same: their names, their numeric
    parts (``total`` included; nested mappings flattened as ``key.sub``) and capacity (0:
    not known)."""

    devices: list[str]
    parts: dict[str, float]
    capacity: float
    off_device: bool = False

    @property
    def label(self) -> str:
        """``worker0/gpu0``, ``worker0/gpu0 + 7 alike``, or ``ps0 (host memory)``."""
        name = self.devices[0] + (f" + {len(self.devices) - 1} alike" if self.devices[1:] else "")
        return f"{name} (host memory)" if self.off_device else name

    @property
    def total(self) -> float:
        """The total, or the sum of the known parts when no total is recorded."""
        return self.parts.get("total", sum(self.parts.get(k, 0.0) for k in PARTS))


def _numeric(parts: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric entries of ``parts``, nested mappings flattened to ``key.sub``."""
    out: dict[str, float] = {}
    for key, value in parts.items():
        if isinstance(value, Mapping):
            out |= _numeric(value, f"{prefix}{key}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = float(value)
    return out


def device_capacities(scenario: Scenario | None) -> dict[str, float]:
    """Each device's memory capacity in bytes from its profile (0 where not known)."""
    if scenario is None:
        return {}
    from simdist.hardware.cluster import Cluster

    try:
        cluster = Cluster(scenario.cluster)
    except Exception:  # a report from another version: draw without capacities
        return {}
    return {d.name: float(cluster.profile_of(d).memory_nbytes) for d in cluster.devices}


def memory_groups(
    summary: Mapping[str, Any], capacities: Mapping[str, float] | None = None
) -> list[MemoryGroup]:
    """Devices grouped by identical parts and capacity, in device order; then the
    off-device tasks, one each."""
    per_device: Mapping[str, Mapping[str, Any]] = summary.get("memory_per_device") or {}
    fallback = float(summary.get("device_memory_bytes") or 0.0)
    capacities = capacities or {}
    groups: dict[tuple[Any, ...], MemoryGroup] = {}
    for device in sorted(per_device, key=natural_key):
        parts = _numeric(per_device[device])
        capacity = float(capacities.get(device) or fallback)
        key = (tuple(sorted(parts.items())), capacity)
        if key in groups:
            groups[key].devices.append(device)
        else:
            groups[key] = MemoryGroup([device], parts, capacity)
    off: Mapping[str, Mapping[str, Any]] = summary.get("memory_off_device") or {}
    extra = [MemoryGroup([n], _numeric(off[n]), 0.0, True) for n in sorted(off, key=natural_key)]
    return [*groups.values(), *extra]


@dataclass(frozen=True)
class MemoryLayout:
    """What ``memory.png`` draws. ``rows``: the groups, top row first. ``bars``: one per
    (row, part) drawn, columns ``row, part, label, color, left, width`` in bytes.
    ``capacity``: one line at that many bytes (every device has it and it is within 4× of
    the fullest), else 0; ``capacity_note``: what the x axis' label says of it when it is not
    drawn as a line ("" when no capacity is known). ``legend``: (label, colour) per part drawn."""

    rows: list[MemoryGroup]
    bars: pd.DataFrame
    capacity: float
    capacity_note: str
    legend: list[tuple[str, str]]


def memory_layout(
    summary: Mapping[str, Any], capacities: Mapping[str, float] | None = None
) -> MemoryLayout:
    """The rows, stacked segments and capacity of :func:`plot_memory`."""
    rows = memory_groups(summary, capacities)
    bars = []
    for i, group in enumerate(rows):
        left = 0.0
        for key, (label, color) in PARTS.items():
            value = group.parts.get(key, 0.0)
            if value > 0:
                bars.append((i, key, label, color, left, value))
                left += value
        if group.total > left:
            bars.append((i, "other", *OTHER, left, group.total - left))
    frame = pd.DataFrame(bars, columns=["row", "part", "label", "color", "left", "width"])
    legend = list(dict.fromkeys(zip(frame["label"], frame["color"], strict=True)))
    on_device = [g for g in rows if not g.off_device]
    top = max((g.total for g in on_device), default=0.0)
    known = {g.capacity for g in on_device}
    capacity, note = 0.0, ""
    if on_device and len(known) == 1 and 0 not in known:
        (one,) = known
        if one <= 4 * top:
            capacity = one
        else:
            note = f"device capacity {format_size(one)}: the fullest device uses {_share(top, one)}"
    elif len(known - {0.0}) > 1:
        fullest = max(on_device, key=lambda g: g.total / g.capacity if g.capacity else 0.0)
        if fullest.capacity:
            note = (
                f"capacities differ; the fullest, {fullest.devices[0]}, uses "
                f"{_share(fullest.total, fullest.capacity)} of {format_size(fullest.capacity)}"
            )
    return MemoryLayout(rows, frame, capacity, note, legend)


def _byte_unit(nbytes: float) -> tuple[float, str]:
    """``(divisor, unit)`` in binary units so that ``nbytes / divisor`` reads well."""
    for power, unit in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if nbytes >= 1024.0**power:
            return 1024.0**power, unit
    return 1.0, "B"


def plot_memory(
    summary: Mapping[str, Any],
    title: str,
    path: Path,
    capacities: Mapping[str, float] | None = None,
) -> MemoryLayout:
    """Peak memory of each device (devices alike share a bar), stacked by what it holds,
    against the device's capacity; parameter-server tasks and the host below them."""
    from matplotlib.figure import Figure

    layout = memory_layout(summary, capacities)
    rows = len(layout.rows)
    height = min(MAX_HEIGHT_IN, 2.4 + 0.4 * max(1, rows))
    fig = Figure(figsize=(8, height), layout="constrained")
    ax = fig.subplots()
    if not rows:
        no_data(ax, "no per-device memory recorded")
        save_figure(fig, path)
        return layout
    totals = np.array([g.total for g in layout.rows])
    reach = max(float(totals.max()), layout.capacity)
    scale, unit = _byte_unit(reach)
    y = np.arange(rows)[::-1]
    bars = layout.bars
    for label, color in layout.legend:
        part = bars[bars["label"] == label]
        ax.barh(y[part["row"].to_numpy()], part["width"] / scale, left=part["left"] / scale,
                color=color, edgecolor="0.6", linewidth=0.4, label=label)  # fmt: skip
    for yi, total in zip(y, totals, strict=True):
        ax.text(total / scale, yi, f" {total / scale:.3g}", va="center", fontsize=8)
    if layout.capacity:
        ax.axvline(layout.capacity / scale, color="black", ls="--", lw=1.2,
                   label=f"device capacity {layout.capacity / scale:.3g} {unit}")  # fmt: skip
    ax.set_xlim(0, reach / scale * 1.15)
    every = max(1, int(np.ceil(LABEL_IN * rows / max(height - 2.4, 1e-9))))
    ax.set_yticks(y[::every], [g.label for g in layout.rows][::every])
    note = f"\n{layout.capacity_note}" if layout.capacity_note else ""
    ax.set_xlabel(f"peak memory ({unit}){note}")
    ax.set_title(f"{title}: peak memory per device")
    fig.legend(loc="outside lower center", ncol=min(4, len(layout.legend) + 1), frameon=False,
               fontsize=8)  # fmt: skip
    save_figure(fig, path)
    return layout


def _share(part: float, whole: float) -> str:
    """``12.5%``; two significant digits below 0.1% (``0.00042%``), never a bare 0.0%."""
    share = 100 * part / whole
    return f"{share:.1f}%" if share >= 0.1 or share == 0 else f"{share:.2g}%"


def _part_name(key: str) -> str:
    return PARTS[key][0] if key in PARTS else key.replace("_", " ")


def memory_rows(
    summary: Mapping[str, Any], capacities: Mapping[str, float] | None = None
) -> list[tuple[str, str]]:
    """report.md's key-number rows on memory: the fullest device's peak (against its
    capacity) and the least full, what the fullest holds (every numeric part, known or
    not; its parameters as a share of the model's when it holds a part of them, as ZeRO,
    tensor and pipeline parallelism do), and what the off-device tasks hold. None without
    ``memory_per_device``."""
    groups = memory_groups(summary, capacities)
    on_device = [g for g in groups if not g.off_device]
    if not on_device:
        return []
    fullest = max(on_device, key=lambda g: g.total)
    count = sum(len(g.devices) for g in on_device)
    where = fullest.devices[0] + (
        f" and {len(fullest.devices) - 1} more alike" if fullest.devices[1:] else ""
    )
    peak = f"{format_size(fullest.total)} on {where}"
    if fullest.capacity:
        peak += (
            f", of its {format_size(fullest.capacity)} ({_share(fullest.total, fullest.capacity)})"
        )
    if len(on_device) > 1:
        least = min(on_device, key=lambda g: g.total)
        peak += f"; least {format_size(least.total)} ({least.devices[0]})"
    rows = [(f"peak memory per device ({count} devices)", peak)]
    known = [k for k in PARTS if k in fullest.parts]
    # activations by kind have a row of their own (report.md's "activations")
    rest = sorted(
        k
        for k in fullest.parts
        if k not in PARTS and k != "total" and not k.startswith("activations_by_kind.")
    )
    held = [f"{_part_name(k)} {format_size(fullest.parts[k])}" for k in [*known, *rest]]
    model = float(summary.get("param_bytes") or 0.0)
    params = fullest.parts.get("params", 0.0)
    if "params" in known and 0 < params < model:  # sharded or split: ZeRO, tensor, pipeline
        held[0] += f" ({_share(params, model)} of the model's {format_size(model)})"
    rows.append(("the fullest device holds", " · ".join(held)))
    off = [g for g in groups if g.off_device]
    if off:
        shown = " · ".join(f"{g.devices[0]} {format_size(g.total)}" for g in off[:8])
        more = f" · … ({len(off) - 8} more)" if len(off) > 8 else ""
        rows.append(("memory off the devices (parameter servers, host)", shown + more))
    return rows
