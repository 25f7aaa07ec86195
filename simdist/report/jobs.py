"""The report folder of a scenario with several jobs on one cluster.

Layout (``reports/<scenario>/``)::

    report.md          the interference table, the jobs and their hosts, the busiest links
    summary.json       the shared network, and per job its throughput alone and together
    interference.csv   one row per job (simdist.runtime.jobs.INTERFERENCE_COLUMNS)
    interference.png   examples/s alone and together, per job
    links.csv, link_buckets.csv, link_load.csv, link_utilisation.png
                       the whole network's telemetry while the jobs ran together
    scenario.yaml      the resolved scenario, jobs and all
    <job>/             each job's own report of its run in company: the usual files
                       (metrics.csv, events.csv, summary.json, report.md, plots,
                       trace.json) and its scenario as a scenario of its own; its
                       links.csv has its own machines' links (NICs, intra-host), while
                       links shared with other jobs (uplinks) are in the top folder's

A subfolder per job keeps each job's report exactly the shape of a single run's, so
``simdist.load_report("reports/<scenario>/<job>")`` and ``simdist compare`` read it. Its
``scenario.yaml`` is the job as a scenario of its own (its hosts as the whole cluster):
run from that file it is alone, and on a leaf–spine network its machines then fill the
racks anew, whereas the alone run of the interference table keeps the shared cluster's
racks. The folder is written atomically as a whole. Writing only: no engine, no API.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from simdist.report.tables import AtomicFolder, write_csv, write_json
from simdist.units import format_duration, format_number

if TYPE_CHECKING:
    import pandas as pd

    from simdist.runtime.jobs import JobsResult

#: The caption of the interference plot in report.md.
_PLOT = (
    "interference.png",
    "Throughput alone and together",
    "Each job's training examples per second of simulated time, alone on the cluster and "
    "while the other jobs ran.",
)


def write_jobs_report(result: JobsResult, out_dir: Path) -> Path:
    """Write a :class:`simdist.runtime.jobs.JobsResult` into ``out_dir`` atomically; return it."""
    import simdist.report as report
    from simdist.scenario import dump_scenario

    out_dir = Path(out_dir)
    with AtomicFolder(out_dir) as tmp:
        for name, job in result.jobs.items():
            report.write_report(job, tmp / name)
            job.out_dir = out_dir / name
        for name, frame in result.tables.items():
            write_csv(frame, tmp / f"{name}.csv")
        write_json(result.summary, tmp / "summary.json")
        (tmp / "scenario.yaml").write_text(dump_scenario(result.scenario))
        plot_interference(result.interference, result.scenario.name, tmp / _PLOT[0])
        plots = [_PLOT[0], *report.write_link_plots(result, tmp)]
        (tmp / "report.md").write_text("\n".join(jobs_markdown(result, plots)))
    result.out_dir = out_dir
    return out_dir


def plot_interference(table: pd.DataFrame, title: str, path: Path) -> None:
    """Grouped bars: each job's examples/s alone and together, the slowdown above."""
    import numpy as np
    from matplotlib.figure import Figure

    from simdist.report.figures import save_figure

    fig = Figure(figsize=(max(6.0, 1.6 * len(table) + 3), 4))
    ax = fig.subplots()
    x = np.arange(len(table))
    alone = table["examples_per_s_alone"].fillna(0).to_numpy(float)
    together = table["examples_per_s_together"].fillna(0).to_numpy(float)
    ax.bar(x - 0.2, alone, 0.4, label="alone", color="#1f77b4")
    ax.bar(x + 0.2, together, 0.4, label="together", color="#ff7f0e")
    for i, slowdown in enumerate(table["slowdown"]):
        if slowdown == slowdown:  # not NaN
            top = max(alone[i], together[i])
            ax.annotate(f"×{slowdown:.2f}", (x[i], top), ha="center", va="bottom")
    ax.set_xticks(x, list(table["job"]))
    ax.set_ylabel("examples / s (simulated)")
    ax.set_ylim(0, max([*alone, *together, 1.0]) * 1.15)
    ax.set_title(f"{title}: throughput alone vs together (×slowdown)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    save_figure(fig, path)


def jobs_markdown(result: JobsResult, plots: list[str]) -> list[str]:
    """The lines of the top-level report.md."""
    from simdist.report.links import link_lines

    s, summary = result.scenario, result.summary
    network = summary["network"]
    lines = [
        f"# {s.name}: {len(result.jobs)} jobs on one cluster",
        "",
        f"{s.cluster.hosts} worker host(s) and {s.cluster.ps} parameter-server task(s) on a "
        f"`{network['topology']}` network ({network['duplex']} duplex, {network['sharing']} "
        f"sharing). The jobs ran at once from time 0, their flows sharing whatever links "
        f"their routes have in common; then each ran alone on the same cluster (the same "
        f"hosts, no other job, timing only) for comparison. Together the last job ended at "
        f"simulated t = {format_duration(summary['simulated_time_s'])}. "
        f"{'Numerics on.' if s.numerics else 'Timing only (numerics: false).'}",
        "",
        "## Interference",
        "",
        "Slowdown = examples/s alone ÷ examples/s together: 1.00 when a job shares no link "
        "with another (a non-blocking switch gives each host its own NIC), 2.00 when it got "
        "half its bandwidth-bound speed. It is over the job's whole run: a job that outlasts "
        "the others runs alone for the rest of it. Also in `interference.csv` and "
        "`summary.json`.",
        "",
        "| job | strategy | hosts | steps | time alone | time together | examples/s alone "
        "| examples/s together | slowdown |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result.interference.itertuples(index=False):
        slowdown = "–" if row.slowdown != row.slowdown else f"×{row.slowdown:.3f}"
        lines.append(
            f"| [{row.job}]({row.job}/report.md) | {row.strategy} | {row.hosts} | {row.steps} "
            f"| {format_duration(row.time_alone_s)} | {format_duration(row.time_together_s)} "
            f"| {format_number(_given(row.examples_per_s_alone), '{:,.1f}')} "
            f"| {format_number(_given(row.examples_per_s_together), '{:,.1f}')} | {slowdown} |"
        )
    lines += ["", "## Jobs", "", "| job | hosts | parameter servers | report |"]
    lines.append("| --- | --- | --- | --- |")
    for job in s.jobs:
        ps = ", ".join(job.ps) or "–"
        lines.append(
            f"| {job.name} | {', '.join(job.hosts)} | {ps} | [{job.name}/]({job.name}/report.md) |"
        )
    lines.append("")
    idle = [h for h in s.cluster.worker_names if not any(h in job.hosts for job in s.jobs)]
    if idle:
        lines += [f"Idle hosts (in no job): {', '.join(idle)}.", ""]
    network_lines = link_lines(result)
    lines += [
        line.replace(" and `trace.json`", " (and each job's `trace.json`)")
        for line in network_lines
    ]
    for name in plots:
        if name == _PLOT[0]:
            heading, caption = _PLOT[1], _PLOT[2]
        else:
            heading, caption = "Link utilisation over time", "Every link's load while the jobs ran."
        lines += [f"## {heading}", "", caption, "", f"![{heading}]({name})", ""]
    return lines


def _given(value: float) -> float | None:
    """None for a NaN cell (not measured: a run of no simulated time)."""
    return None if value != value else value
