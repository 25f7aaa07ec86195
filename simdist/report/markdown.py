"""``report.md``: the page a person opens first — what ran, the key numbers, the plots.

The scenario is summarised from its resolved form (``scenario.yaml``), the
numbers come from ``summary.json`` and the tables (the same figures
``simdist compare`` tabulates), and the plots are linked by relative path so
the folder can be moved or zipped as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from simdist.report.compare import DEFAULT_TARGET, device_shares, time_to_target
from simdist.report.links import link_lines
from simdist.report.memory import device_capacities, memory_rows
from simdist.report.table_figures import captions, key_number_rows, table_notes
from simdist.units import format_bandwidth, format_duration, format_number, format_size

if TYPE_CHECKING:
    import pandas as pd

    from simdist.runtime.engine import Result
    from simdist.scenario.schema import Scenario

#: Plot file → (heading, one line on how to read it), in the order report.md shows them.
PLOT_CAPTIONS: dict[str, tuple[str, str]] = {
    "loss_vs_time.png": (
        "Loss and accuracy vs simulated time",
        "Train loss (left axis) and test accuracy (right axis) as the simulated clock runs.",
    ),
    "loss_vs_step.png": (
        "Loss and accuracy vs step",
        "The same against applied updates: a run can learn well per step yet slowly per "
        "second (communication), or fast per second yet poorly per step (stale gradients).",
    ),
    "throughput.png": (
        "Throughput",
        "Training examples per second of simulated time, over the run.",
    ),
    "staleness_hist.png": (
        "Staleness",
        "How many parameter versions behind each applied gradient was; beside it, how many "
        "iterations its worker was ahead of the slowest (what a staleness bound limits).",
    ),
    "pipeline_staleness.png": (
        "Weight staleness per pipeline stage",
        "pipedream: how many updates of its stage each micro-batch's gradient missed "
        "(mean and largest per stage; the first updates as the pipeline fills).",
    ),
    "memory.png": (
        "Peak memory per device",
        "What each device holds at its peak (parameters, gradients, optimizer state, "
        "activations, a pipeline's stashed weight versions) against its capacity; devices "
        "that hold the same share a bar, parameter servers and the host come last.",
    ),
    "timeline.png": (
        "Timeline of the first steps",
        "What each device and parameter server did, span by span "
        "(the whole run is in `trace.json`).",
    ),
    "time_split.png": (
        "Where the time goes",
        "Share of simulated time each device spends computing, communicating, waiting, idle.",
    ),
    "link_utilisation.png": (
        "Link utilisation over time",
        "Each link (and direction) that carried traffic, against simulated time in fixed "
        "buckets: the share of its bandwidth in use (`link_buckets.csv`).",
    ),
}

#: Files of a report folder and what they hold, listed at the end of report.md when present.
FILE_NOTES: dict[str, str] = {
    "summary.json": "the headline figures",
    "metrics.csv": "`time_s, step, metric, value`: train loss, test loss / accuracy, examples/s",
    "events.csv": "one row per simulated interval: "
    "`start_s, end_s, host, device, kind, nbytes, step, detail`",
    "updates.csv": "one row per applied gradient shard, with its staleness",
    "dropped.csv": "gradients dropped by backup workers",
    "stage_updates.csv": "pipedream: one row per update of a pipeline stage, with the weight "
    "version its forward used and its staleness",
    "links.csv": "per link and direction: bytes carried, busy time, mean and peak utilisation",
    "link_buckets.csv": "per link and time bucket: bytes and utilisation (the heatmap's data)",
    "link_load.csv": "every change of each link's load: `link, time_s, rate_Bps`",
    "trace.json": "the timeline: open it in https://ui.perfetto.dev or chrome://tracing",
    "params.npz": "final parameters, keys = pytree paths (usable as `workload.init_from`)",
    "scenario.yaml": "the fully resolved scenario: `simdist run` it to reproduce this run",
}


def _options(mapping: Mapping[str, Any], skip: Sequence[str] = ()) -> str:
    parts = [f"{k} {v}" for k, v in mapping.items() if k not in skip and v not in (None, [], {})]
    return ", ".join(parts)


def scenario_lines(scenario: Scenario) -> list[str]:
    """The scenario in a few bullet lines: strategy, cluster, workload, seed."""
    from simdist.scenario import dump_scenario

    data = yaml.safe_load(dump_scenario(scenario))
    cluster, workload, strategy = data["cluster"], data["workload"], data["strategy"]
    workers = [*cluster.get("chief", []), *cluster.get("worker", [])]
    ps = cluster.get("ps", [])
    per_host = cluster.get("devices_per_host", 1)
    device = cluster.get("device", {})
    device_text = device.get("profile", "cpu")
    if "compute_time" in device:
        device_text += f", compute fixed at {format_duration(device['compute_time'])}/step"
    spread = scenario.cluster.device.variability
    device_text += (
        f", step-time variability σ {spread.step:g} per step, {spread.device:g} per device"
        if spread.step or spread.device
        else ", no step-time variability"
    )
    hosts = f"{len(workers)} worker host{'s' if len(workers) != 1 else ''}"
    if len(workers) <= 8:
        hosts += f" ({', '.join(workers)})"
    line = (
        f"- **Cluster**: {hosts} × {per_host} device{'s' if per_host != 1 else ''} ({device_text})"
    )
    listed = cluster.get("hosts")
    if isinstance(listed, list):  # hosts listed one by one, each with its own devices
        parts = [
            f"{h['name']} {h.get('devices', per_host)} × "
            f"{h.get('profile') or h.get('device', {}).get('profile') or device_text}"
            for h in listed[:8]
        ]
        more = f", … ({len(listed) - 8} more)" if len(listed) > 8 else ""
        line = (
            f"- **Cluster**: {len(listed)} worker host{'s' if len(listed) != 1 else ''} "
            f"({', '.join(parts)}{more})"
        )
    if ps:
        line += f" + {len(ps)} parameter server{'s' if len(ps) != 1 else ''} ({', '.join(ps)})"
    links = cluster.get("links", {})
    link_text = "; ".join(
        f"{label} {format_bandwidth(links[key]['bandwidth'])}, "
        f"{format_duration(links[key]['latency'])} latency"
        for key, label in (("intra_host", "intra-host"), ("network", "network"))
        if key in links
    )
    model = workload.get("model")
    if model is None:
        model_text = f"the layers of {workload['profile']}"
    else:
        model_text = model["name"] + _model_sizes(model)
    clock = workload.get("timing_model", {}).get("name") or workload.get("profile")
    if model is not None and clock:
        model_text += f", timed as {clock}"
    dataset = workload.get("dataset")
    dataset_text = (
        "no data set"
        if dataset is None
        else dataset["name"]
        if isinstance(dataset, dict)
        else str(dataset)
    )
    optimizer = workload["optimizer"]
    length = (
        f"{workload['steps']} steps" if "steps" in workload else f"{workload.get('epochs')} epochs"
    )
    options = _options(strategy, skip=("kind",))
    if data.get("numerics", True):
        data_text = f" on {dataset_text}"
        length += f", evaluated every {workload['eval_every']}"
    else:  # nothing trained, nothing evaluated: only the clock ran
        data_text = ""
        length += ", timed only (numerics: false: no data, no loss, no evaluation)"
    return [
        f"- **Strategy**: `{strategy['kind']}`" + (f" — {options}" if options else ""),
        line + (f"; links: {link_text}" if link_text else ""),
        f"- **Workload**: {model_text}{data_text}; batch {workload['batch_size']} "
        f"per replica (global {scenario.global_batch}); {optimizer['name']} learning rate "
        f"{optimizer['learning_rate']:g}; {length}",
        f"- **Seed** {data['seed']}; numerics {'on' if data.get('numerics', True) else 'off'}",
    ]


def _model_sizes(model: Mapping[str, Any]) -> str:
    """The sizes a model's options set, in brackets: the mlp's hidden widths, a gpt's
    layers, width, heads and sequence; nothing for the models of fixed size (gpt2, resnet50:
    ``hidden`` is an mlp option that the others carry unused)."""
    if model["name"] == "mlp" and model.get("hidden"):
        return f" (hidden {model['hidden']})"
    if model["name"] == "gpt":
        width = model["hidden"][0] if isinstance(model.get("hidden"), list) else model.get("hidden")
        return (
            f" ({model.get('layers')} layers, hidden {width}, {model.get('heads')} heads, "
            f"sequence {model.get('seq_len')})"
        )
    return ""


def key_numbers(result: Result, target: float = DEFAULT_TARGET) -> list[tuple[str, str]]:
    """(what, value) rows of the key-numbers table, formatted for people."""
    s = result.summary
    rows = [
        ("simulated time", format_duration(s["simulated_time_s"])),
        ("steps (applied updates)", str(s["steps"])),
        ("training examples / s (simulated)", format_number(s.get("examples_per_s"), "{:,.0f}")),
    ]
    if s.get("numerics", True):
        reached = time_to_target(result.metrics, target)
        rows += [
            ("final train loss", format_number(s.get("final_train_loss"))),
            ("final test loss", format_number(s.get("final_test_loss"))),
            ("final test accuracy", format_number(s.get("final_test_accuracy"), "{:.2%}")),
            (
                f"time to {target:.0%} test accuracy",
                "not reached"
                if reached is None
                else f"{format_duration(reached[0])} (step {reached[1]})",
            ),
        ]
    else:
        rows.append(("numerics", "off: timing-only run, no loss or accuracy"))
    shares = device_shares(result)
    rows.append(
        (
            "time split (training devices, mean)",
            " · ".join(
                f"{label} {shares.get(key, 0.0):.1%}"
                for key, label in (
                    ("compute", "compute"),
                    ("comm", "communication"),
                    ("waiting", "waiting"),
                    ("idle", "idle"),
                )
            ),
        )
    )
    staleness = s.get("staleness")
    if isinstance(staleness, dict) and staleness.get("mean") is not None:
        rows.append(
            (
                "staleness (mean / p50 / p95 / max)",
                " / ".join(
                    format_number(staleness.get(k), "{:.3g}") for k in ("mean", "p50", "p95", "max")
                ),
            )
        )
        by_worker = staleness_by_worker(result.tables.get("updates"))
        if by_worker:
            rows.append(("staleness by worker (mean)", by_worker))
    rows += key_number_rows(s)  # a strategy's own (simdist.report.table_figures)
    if s.get("dropped_gradients"):
        rows.append(("dropped gradients (backup workers)", str(s["dropped_gradients"])))
    rows += [
        ("compute per replica step", format_duration(s["compute_s_per_replica_step"])),
        ("parameters", format_size(s["param_bytes"])),
    ]
    if s.get("memory_per_device"):
        rows += memory_rows(s, device_capacities(result.scenario))
        activations = activations_line(s["memory_per_device"])
        if activations:
            rows.append(("activations (fullest device)", activations))
    if s.get("numerics", True) and not s.get("diverged"):
        # collapsed: finite, but learned nothing (summary.collapse_reason says why)
        reason = s.get("collapse_reason")
        rows.append(("collapsed", f"**yes**: {reason}" if s.get("collapsed") else "no"))
    if s.get("diverged"):
        rows.append(("**diverged**", f"loss not finite at step {s.get('diverged_at_step')}"))
    return rows


def activations_line(per_device: Mapping[str, Mapping[str, Any]]) -> str:
    """The fullest device's activations by kind and what recomputation freed (summary.json's
    ``memory_per_device``, ``activations_by_kind``); empty when it has no breakdown."""
    if not per_device:
        return ""
    _, held = max(per_device.items(), key=lambda item: item[1].get("total", 0))
    kinds = held.get("activations_by_kind") or {}
    if not kinds:
        return ""
    parts = [
        f"{label} {format_size(kinds.get(key, 0))}"
        for key, label in (
            ("stored_inputs", "stored inputs"),
            ("attention_scores", "attention scores"),
            ("masks", "masks"),
            ("recompute_working_set", "recomputed"),
        )
        if kinds.get(key)
    ]
    freed = kinds.get("freed_by_recompute", 0)
    text = ", ".join(parts) or "0 B"
    return text + (f"; recomputation freed {format_size(freed)}" if freed else "")


def staleness_by_worker(updates: pd.DataFrame | None, most: int = 8) -> str:
    """Each worker's mean staleness (``w0 2.75 · w1 2.28 · …``), or the range of these means
    beyond ``most`` workers: whether staleness is a property of the worker (a straggler's
    gradients are staler) or of chance. "" without an updates table."""
    if updates is None or not len(updates) or "worker" not in updates:
        return ""
    means = updates.groupby("worker")["staleness"].mean()
    if len(means) > most:
        return f"{means.min():.3g} – {means.max():.3g} over {len(means)} workers"
    return " · ".join(f"w{worker} {mean:.3g}" for worker, mean in means.items())


def device_rows(result: Result) -> list[tuple[str, str, int, str, str, str, str]]:
    """One row per worker host of a mixed cluster: (host, profile, devices, compute per
    replica step, share of time computing, share waiting, gradients applied); none on a
    homogeneous cluster, whose report stays as it was.

    Synchronous strategies show the fast devices waiting for the slowest; asynchronous
    parameter servers show the fast workers' gradients applied more often (from the
    ``updates`` table: distinct iterations of each worker; "" when there is none).
    """
    from simdist.hardware.cluster import Cluster
    from simdist.summary import time_split_by_device

    per_profile = result.summary.get("compute_s_per_profile")
    if not per_profile:
        return []
    cluster = Cluster(result.scenario.cluster)
    sim_time_s = float(result.summary["simulated_time_s"])
    names = [d.name for d in cluster.devices]
    present = set(result.events["device"].unique()) if len(result.events) else set()
    split = time_split_by_device(result.events, sim_time_s, [n for n in names if n in present])
    updates = result.tables.get("updates")
    applied: dict[int, int] = {}
    if updates is not None and len(updates):
        counts = updates.groupby("worker")["iteration"].nunique()
        applied = {int(w): int(n) for w, n in counts.items()}
    rows = []
    for w, host in enumerate(cluster.workers):
        used = [d.name for d in host.devices if d.name in split.index]
        share = split.loc[used].mean() / sim_time_s if used and sim_time_s > 0 else None
        rows.append(
            (
                host.name,
                str(host.profile),
                len(host.devices),
                format_duration(per_profile.get(host.profile)),
                "" if share is None else f"{share['compute']:.1%}",
                "" if share is None else f"{share['waiting']:.1%}",
                str(applied.get(w, 0)) if applied else "",
            )
        )
    return rows


def device_lines(result: Result) -> list[str]:
    """The ``## Devices`` section of a mixed cluster's report.md (nothing otherwise)."""
    rows = device_rows(result)
    if not rows:
        return []
    with_updates = any(row[-1] for row in rows)
    head = ["host", "profile", "devices", "compute / replica step", "computing", "waiting"]
    if with_updates:
        head.append("gradients applied")
    lines = [
        "## Devices",
        "",
        "A mixed cluster: each device computes at its own profile's speed. Synchronous "
        "strategies wait for the slowest device at every step; asynchronous parameter "
        "servers apply the faster workers' gradients more often.",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join("---" for _ in head) + " |",
    ]
    for row in rows:
        cells = [str(x) for x in (row if with_updates else row[:-1])]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def render_markdown(
    result: Result, plots: Sequence[str], files: Sequence[str] = (), target: float = DEFAULT_TARGET
) -> str:
    """The text of report.md; ``plots`` and ``files`` are the names present in the folder."""
    s = result.summary
    lines = [f"# {s['name']} — {s['strategy']}", ""]
    if s.get("_surrogate"):
        lines += [f"> **Surrogate timing**: {s['_surrogate']}.", ""]
    if s.get("_shared"):  # a job of a scenario with jobs: (simdist.runtime.jobs)
        lines += [f"> **Shared cluster**: {s['_shared']}.", ""]
    lines += [*scenario_lines(result.scenario), ""]
    lines += ["## Key numbers", "", "| | |", "| --- | --- |"]
    lines += [f"| {what} | {value} |" for what, value in key_numbers(result, target)]
    lines.append("")
    lines += device_lines(result)
    lines += link_lines(result)
    ordered = [p for p in PLOT_CAPTIONS if p in plots] + [
        p for p in plots if p not in PLOT_CAPTIONS
    ]
    own, notes = captions(s), table_notes(s)
    for plot in ordered:
        default = own.get(plot, (Path(plot).stem.replace("_", " "), ""))
        heading, caption = PLOT_CAPTIONS.get(plot, default)
        lines += [f"## {heading}", "", caption, "", f"![{heading}]({plot})", ""]
    listed = [f for f in FILE_NOTES if f in files]
    present = listed + [f for f in files if f not in listed and f not in plots and f != "report.md"]
    if present:
        lines += ["## Files", ""]
        lines += [
            f"- [`{f}`]({f}): {FILE_NOTES.get(f) or notes.get(f) or _unknown(f)}" for f in present
        ]
        lines.append("")
    return "\n".join(lines)


def _unknown(name: str) -> str:
    return "extra table" if name.endswith(".csv") else "file"


def write_markdown(
    result: Result, path: Path, plots: Sequence[str], target: float = DEFAULT_TARGET
) -> None:
    """Write report.md next to the files already in its folder (only those are linked)."""
    path = Path(path)
    files = sorted(p.name for p in path.parent.iterdir() if p.is_file())
    plots = [p for p in plots if p in files]
    path.write_text(render_markdown(result, plots, files, target))
