"""The links in a report: the ``link_utilisation.png`` heatmap and report.md's links section.

Both read the run's telemetry tables only (``links`` and ``link_buckets``, see
:mod:`simdist.network.telemetry`), so a loaded report draws the same figure as
the live run. matplotlib is imported when a figure is drawn, not with this
module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simdist.units import format_bandwidth, format_duration, format_size

if TYPE_CHECKING:
    from simdist.runtime.engine import Result

#: The heatmap shows at most this many links: the ones that carried the most bytes.
MAX_HEATMAP_LINKS = 40
#: report.md's links section lists this many of the busiest links.
TOP_LINKS = 5


def used_links(links: pd.DataFrame | None) -> pd.DataFrame:
    """The rows of ``links.csv`` whose link carried bytes, in the table's order."""
    if links is None or links.empty or "bytes" not in links:
        return pd.DataFrame()
    return links[links["bytes"] > 0]


def heatmap_matrix(
    links: pd.DataFrame, buckets: pd.DataFrame, max_links: int = MAX_HEATMAP_LINKS
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(link names, bucket edges, utilisation[link, bucket]) of the heatmap.

    Links in ``links.csv``'s order (host by host), keeping the ``max_links`` that
    carried the most bytes (ties: the first); buckets from ``link_buckets.csv``.
    """
    used = used_links(links)
    if len(used) > max_links:
        keep = np.argsort(-used["bytes"].to_numpy(), kind="stable")[:max_links]
        used = used.iloc[np.sort(keep)]
    names = used["link"].tolist()
    edges = np.unique(
        np.concatenate([buckets["bucket_start_s"].to_numpy(), buckets["bucket_end_s"].to_numpy()])
    )
    grid = buckets.pivot(index="link", columns="bucket_start_s", values="utilisation")
    grid = grid.reindex(index=names, columns=edges[:-1]).fillna(0.0)
    return names, edges, grid.to_numpy(dtype=float)


def plot_link_utilisation(
    links: pd.DataFrame, buckets: pd.DataFrame, title: str, path: Path
) -> None:
    """Heatmap: one row per link (and direction), one column per time bucket, colour = load."""
    from matplotlib.figure import Figure

    from simdist.report.figures import save_figure, time_unit

    names, edges, values = heatmap_matrix(links, buckets)
    factor, unit = time_unit(float(edges[-1]))
    fig = Figure(figsize=(9, 1.6 + 0.24 * max(2, len(names))), layout="constrained")
    ax = fig.subplots()
    mesh = ax.pcolormesh(
        edges * factor,
        np.arange(len(names) + 1),
        values * 100,
        cmap="viridis",
        vmin=0,
        vmax=100,
        shading="flat",
    )
    ax.set_yticks(np.arange(len(names)) + 0.5, names, fontsize=7 if len(names) > 16 else 8)
    ax.invert_yaxis()
    ax.set_xlabel(f"simulated time ({unit})")
    width = format_duration(float(edges[1] - edges[0])) if len(edges) > 1 else ""
    total = len(used_links(links))
    shown = f", the {len(names)} busiest of {total} links" if total > len(names) else ""
    ax.set_title(f"{title}: link utilisation{shown} ({width} buckets)", fontsize=10)
    over = bool((values > 1 + 1e-9).any())  # a shared intra-host link in a collective
    fig.colorbar(
        mesh,
        ax=ax,
        label="utilisation (% of bandwidth)",
        fraction=0.04,
        pad=0.01,
        extend="max" if over else "neither",
    )
    save_figure(fig, path)


def write_link_plots(result: Result, out_dir: Path) -> list[str]:
    """``link_utilisation.png`` when some link carried bytes; returns the names written."""
    links, buckets = result.tables.get("links"), result.tables.get("link_buckets")
    if buckets is None or buckets.empty or used_links(links).empty:
        return []
    plot_link_utilisation(
        links, buckets, result.scenario.name, Path(out_dir) / "link_utilisation.png"
    )
    return ["link_utilisation.png"]


def link_lines(result: Result, top: int = TOP_LINKS) -> list[str]:
    """report.md's ``## Links`` section: the busiest links and their load (none if idle)."""
    used = used_links(result.tables.get("links"))
    if used.empty:
        return []
    order = np.lexsort((-used["bytes"].to_numpy(), -used["utilisation"].to_numpy()))
    busiest = used.iloc[order[:top]]
    lines = [
        "## Links",
        "",
        f"{len(used)} of {len(result.tables['links'])} links (per direction) carried traffic. "
        "The busiest, by mean utilisation over the run (bytes over bandwidth × simulated "
        "time); busy = time carrying anything; peak = the highest load. Every link is in "
        "`links.csv`, its load over time in `link_buckets.csv` and `trace.json`.",
        "",
        "| link | bandwidth | bytes | busy | utilisation | peak |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in busiest.itertuples(index=False):
        lines.append(
            f"| `{row.link}` | {format_bandwidth(row.bandwidth_Bps)} | {format_size(row.bytes)} "
            f"| {format_duration(row.busy_s)} ({row.busy_share:.1%}) | {row.utilisation:.1%} "
            f"| {row.peak_utilisation:.0%} |"
        )
    if (busiest["peak_utilisation"] > 1 + 1e-9).any():
        lines += [
            "",
            "Above 100%: a `shared` intra-host link, whose collectives' closed forms give "
            "every ring edge inside the host the link's full bandwidth.",
        ]
    return [*lines, ""]
