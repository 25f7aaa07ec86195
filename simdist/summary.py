"""summary.json's figures and the per-device time split, built from the recorder's tables.

This sits next to the recorder, not in :mod:`simdist.report`: the engine
builds the summary of every run, and the engine never imports the report
writers (or matplotlib).  It needs pandas and NumPy only.

The time split answers "where did each device's time go": at each instant a
device is in the highest-priority :data:`SPLIT_CATEGORIES` of the events
covering it, overlaps counted once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # types only: the summary knows no strategy (tests/test_layers.py)
    from simdist.scenario.schema import Scenario
    from simdist.step_costs import Costs

SUMMARY_VERSION = 1

#: Time-split categories, in priority order: an instant in which a device both
#: computes and communicates counts as compute.
SPLIT_CATEGORIES = ("compute", "comm", "waiting", "other", "idle")


def split_category(kind: str) -> str:
    """The time-split category of an event kind.

    ``compute`` includes ``straggle`` (the slow excess of a straggler's
    compute: the device is still computing); ``waiting`` gathers recorded
    waits (``idle`` rows: barriers, staleness bounds; ``input_wait``; any kind
    mentioning "wait"); ``other`` is anything else recorded (eval, apply,
    checkpoint, failure, restart, …).  The category ``idle`` is time with no
    event at all.
    """
    if kind in ("compute", "straggle"):
        return "compute"
    if kind == "comm":
        return kind
    if kind == "idle" or "wait" in kind:
        return "waiting"
    return "other"


@functools.lru_cache(maxsize=4096)
def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key under which ``w2`` comes before ``w10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )


def union_seconds(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of intervals ``[starts[i], ends[i]]``."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, float)[order], np.asarray(ends, float)[order]
    reach = np.maximum.accumulate(e)
    before = np.concatenate(([-np.inf], reach[:-1]))
    return float(np.clip(e - np.maximum(s, before), 0.0, None).sum())


def time_split_by_device(
    events: pd.DataFrame, sim_time_s: float, devices: Iterable[str] | None = None
) -> pd.DataFrame:
    """Seconds each device spends in each :data:`SPLIT_CATEGORIES`, overlaps counted once.

    At each instant a device is in the highest-priority category of the
    events covering it (compute > comm > waiting > other); ``idle`` is the rest
    of ``[0, sim_time_s]``.  Unlike summing durations, parallel transfers
    (a worker pulling from two parameter servers at once) are not counted
    twice, so the categories add up to ``sim_time_s``.  ``devices`` defaults
    to every device with events, in natural order.
    """
    if devices is None:
        devices = sorted(pd.unique(events["device"].to_numpy(dtype=object)), key=natural_key)
    devices = list(devices)
    columns = _split_columns(events, sim_time_s, devices)
    return pd.DataFrame(columns, index=pd.Index(devices, name="device"), columns=SPLIT_CATEGORIES)


def _split_columns(
    events: pd.DataFrame, sim_time_s: float, devices: list[str]
) -> dict[str, np.ndarray]:
    """:func:`time_split_by_device`'s columns, one entry per device of ``devices`` (a device
    asked for twice gets its entry twice).

    NumPy, and pandas' hashing on NumPy arrays rather than on the frame's columns: a short
    run pays the fixed cost of each pandas operation, and every run builds its summary.
    """
    unique = list(dict.fromkeys(devices))
    kind_index, kinds = pd.factorize(events["kind"].to_numpy(dtype=object))  # no sort
    all_cats = np.array([split_category(k) for k in kinds] + [""], dtype=object)[kind_index]
    start = np.clip(events["start_s"].to_numpy(dtype=float), 0.0, sim_time_s)
    end = np.clip(events["end_s"].to_numpy(dtype=float), 0.0, sim_time_s)
    # Each event's position in ``unique`` (-1: a device not asked for).
    device_index, names = pd.factorize(events["device"].to_numpy(dtype=object))
    position = {name: i for i, name in enumerate(unique)}
    codes = np.array([position.get(name, -1) for name in names] + [-1])[device_index]
    asked = codes >= 0
    covered = np.zeros(len(unique))
    columns = {}
    mask = np.zeros(len(events), dtype=bool)
    for category in SPLIT_CATEGORIES[:-1]:
        mask |= all_cats == category
        total = _unions(codes[mask & asked], start[mask & asked], end[mask & asked], len(unique))
        columns[category] = np.maximum(0.0, total - covered)
        covered = np.maximum(covered, total)
    columns["idle"] = np.maximum(0.0, sim_time_s - covered)
    if len(unique) < len(devices):
        rows = [position[device] for device in devices]
        columns = {category: column[rows] for category, column in columns.items()}
    return columns


def _unions(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, groups: int) -> np.ndarray:
    """:func:`union_seconds` of each group's intervals at once: ``groups`` totals.

    Exactly the same floats: each group's intervals sorted stably by start, the same running
    reach (each group's running maximum of ends) and the same sums.
    """
    totals = np.zeros(groups)
    if len(group) == 0:
        return totals
    order = _by_group(group, starts, groups)  # stable: ties keep the table's order
    g, s, e = group[order], starts[order], ends[order]
    first = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    bounds = [*first[1:].tolist(), len(e)]
    # The running reach: each group's running maximum of ends (a maximum is exact).
    reach = np.empty_like(e)
    for a, b in zip(first.tolist(), bounds, strict=True):
        np.maximum.accumulate(e[a:b], out=reach[a:b])
    before = np.concatenate(([-np.inf], reach[:-1]))
    before[first] = -np.inf
    part = np.clip(e - np.maximum(s, before), 0.0, None)
    # ``np.sum`` of each segment: pairwise summation, as ``union_seconds`` adds (reduceat
    # adds in sequence, which rounds differently).
    totals[g[first]] = [part[a:b].sum() for a, b in zip(first.tolist(), bounds, strict=True)]
    return totals


def _by_group(group: np.ndarray, starts: np.ndarray, groups: int) -> np.ndarray:
    """``np.lexsort((starts, group))``: by group, then by start, ties in table order. When
    the starts are in order already (the events table is sorted by start), a stable sort by
    group alone gives that order, and NumPy sorts 16-bit integers by radix, in linear time."""
    if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():
        return np.lexsort((starts, group))
    if groups <= np.iinfo(np.int16).max:
        return np.argsort(group.astype(np.int16), kind="stable")
    return np.argsort(group, kind="stable")


def training_devices(events: pd.DataFrame) -> list[str]:
    """Devices that computed at least one gradient, in natural order."""
    computed = events["device"].to_numpy(dtype=object)[
        events["kind"].to_numpy(dtype=object) == "compute"
    ]
    return sorted(pd.unique(computed), key=natural_key)  # hashing, not a Python set of rows


def time_split(events: pd.DataFrame, devices: Sequence[str], sim_time_s: float) -> dict[str, float]:
    """Share of the training devices' time spent computing, communicating, and idle.

    Shares are of ``len(devices) × sim_time_s`` device-seconds, with
    overlapping spans on one device counted once (a worker pulling from two
    parameter servers at once communicates, not twice). Compute includes a
    straggler's excess; idle is everything else (barriers, waits, failures).
    """
    total = len(devices) * sim_time_s
    if total <= 0:
        return {"compute": 0.0, "comm": 0.0, "idle": 0.0}
    # Each column's np.sum: the pairwise sum DataFrame.sum of the device table takes.
    split = _split_columns(events, sim_time_s, list(devices))
    compute = float(np.sum(split["compute"])) / total
    comm = float(np.sum(split["comm"])) / total
    return {"compute": compute, "comm": comm, "idle": max(0.0, 1.0 - compute - comm)}


#: What a task allows: the final test accuracy one device reaches on a bundled data set,
#: measured by benchmarks/task_ceiling.py (the best of softmax and the 64-128-10 MLP with
#: four optimizers, each the mean of 3 seeds of 3000 steps of 32 examples: the MLP with
#: Adam, 0.9749).
TASK_CEILINGS = {"digits": 0.9749}
#: A run has *collapsed* when its final test accuracy is below this share of the way from
#: chance (1 / number of classes) to the task's ceiling: on digits below 0.1 + 0.5 × (0.9749
#: − 0.1) = 53.7%. Runs that end at 17% and 19% on 10 classes failed to learn, although
#: they are above chance.
COLLAPSE_SHARE = 0.5
#: Without a measured ceiling (an npz file, the generated teacher), the run has collapsed
#: when its final test accuracy is at most this far above chance: 5 percentage points
#: (32 asynchronous workers at lr 0.1 on digits end near 10%).
COLLAPSE_ACCURACY_MARGIN = 0.05
#: ... or when the mean of its last this-many train losses is above its first train loss
#: (a mean, so that one unlucky final batch does not decide).
COLLAPSE_LOSS_WINDOW = 10


def chance_accuracy(scenario: Scenario) -> float | None:
    """Accuracy of guessing one class: 1 / classes of a classification data set.

    None without a data set or for regression. An npz file's classes are its largest
    integer label + 1 (as :mod:`simdist.numerics.data` reads it), from the label arrays
    alone: the inputs are not read again.
    """
    dataset = scenario.workload.dataset
    if dataset is None:
        return None
    if dataset.name == "npz":
        with np.load(dataset.path, allow_pickle=False) as arrays:  # members load one by one
            labels = [arrays["y_train"], arrays["y_test"]]
        if not all(np.issubdtype(y.dtype, np.integer) for y in labels):
            return None
        return 1.0 / (max(int(y.max()) for y in labels) + 1)
    from simdist.numerics.sizes import model_inputs  # no JAX: arithmetic on the data spec

    outputs = model_inputs(dataset, scenario.seed)[1]
    return 1.0 / outputs if outputs > 1 else None


def task_ceiling(scenario: Scenario) -> float | None:
    """The accuracy one device reaches on the scenario's data set (:data:`TASK_CEILINGS`),
    or None when it was not measured."""
    dataset = scenario.workload.dataset
    return None if dataset is None else TASK_CEILINGS.get(dataset.name)


def collapse_reason(
    metrics: pd.DataFrame, chance: float | None, ceiling: float | None = None
) -> str | None:
    """Why a finite run learned nothing, or None.

    Its final accuracy ended below half of the way from ``chance`` to the task's
    ``ceiling`` (:data:`COLLAPSE_SHARE`; without a ceiling, within
    :data:`COLLAPSE_ACCURACY_MARGIN` of chance), or its loss ended above where it started
    (:data:`COLLAPSE_LOSS_WINDOW`).
    """
    accuracy = _last(metrics, "test_accuracy")
    if chance is not None and ceiling is not None and accuracy is not None:
        floor = chance + COLLAPSE_SHARE * (ceiling - chance)
        if accuracy < floor:
            return (
                f"final test accuracy {accuracy:.1%} is below {floor:.1%}, "
                f"{COLLAPSE_SHARE:.0%} of the way from chance ({chance:.1%}) to what one "
                f"device reaches on this task ({ceiling:.1%})"
            )
    elif chance is not None and accuracy is not None:
        if accuracy <= chance + COLLAPSE_ACCURACY_MARGIN:
            return (
                f"final test accuracy {accuracy:.1%} is within "
                f"{COLLAPSE_ACCURACY_MARGIN * 100:g} points of chance ({chance:.1%})"
            )
    names = metrics["metric"].to_numpy(dtype=object)
    losses = metrics["value"].to_numpy(dtype=float)[names == "train_loss"]
    losses = losses[np.isfinite(losses)]
    if len(losses) > 1:
        first, last = float(losses[0]), float(losses[-COLLAPSE_LOSS_WINDOW:].mean())
        if last > first:
            window = min(len(losses), COLLAPSE_LOSS_WINDOW)
            return (
                f"the mean train loss of the last {window} steps ({last:.4g}) is above the "
                f"first step's ({first:.4g})"
            )
    return None


def _last(metrics: pd.DataFrame, name: str) -> float | None:
    return _lasts(metrics, (name,))[name]


def _lasts(metrics: pd.DataFrame, names: Sequence[str]) -> dict[str, float | None]:
    """The last value of each metric of ``names`` (None when it has none), columns read once."""
    metric, values = metrics["metric"].to_numpy(dtype=object), metrics["value"].to_numpy()
    last: dict[str, float | None] = {}
    for name in names:
        rows = np.flatnonzero(metric == name)
        last[name] = None if len(rows) == 0 else float(values[rows[-1]])
    return last


def build_summary(
    *,
    scenario: Scenario,
    metrics: pd.DataFrame,
    events: pd.DataFrame,
    sim_time_s: float,
    steps: int,
    costs: Costs,
    devices: Sequence[str],
    examples_per_step: int,
    diverged_at: int | None,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The headline figures of one run, as plain JSON-able values.

    ``diverged``: the loss became NaN or inf (the run stopped there). ``collapsed``: the
    run stayed finite but learned nothing (:func:`collapse_reason`, given in
    ``collapse_reason``); never set on a diverged or timing-only run.
    """
    examples = steps * examples_per_step
    final = _lasts(metrics, ("train_loss", "test_loss", "test_accuracy"))
    summary: dict[str, Any] = {
        "summary_version": SUMMARY_VERSION,
        "name": scenario.name,
        "strategy": scenario.strategy.kind,
        "seed": scenario.seed,
        "numerics": bool(scenario.numerics),
        "replicas": scenario.replicas,
        "global_batch": scenario.global_batch,
        "steps": steps,
        "simulated_time_s": sim_time_s,
        "examples": examples,
        "examples_per_s": examples / sim_time_s if sim_time_s > 0 else None,
        "compute_s_per_replica_step": costs.compute_s,
        "flops_per_replica_step": costs.flops_per_replica_step,
        "param_bytes": costs.param_nbytes,
        "final_train_loss": final["train_loss"],
        "final_test_loss": final["test_loss"],
        "final_test_accuracy": final["test_accuracy"],
        "diverged": diverged_at is not None,
        "diverged_at_step": diverged_at,
        "collapsed": False,
        "collapse_reason": None,
        "time_split": time_split(events, devices, sim_time_s),
    }
    # Communication not hidden behind compute: the seconds a training device spends
    # communicating while it does not compute, averaged over the training devices.
    summary["exposed_comm_s"] = summary["time_split"]["comm"] * sim_time_s
    if scenario.numerics and diverged_at is None:
        evaluated = summary["final_test_accuracy"] is not None
        chance = chance_accuracy(scenario) if evaluated else None
        reason = collapse_reason(metrics, chance, task_ceiling(scenario))
        summary["collapsed"], summary["collapse_reason"] = reason is not None, reason
    if costs.per_profile:
        # A mixed cluster: each device class's own compute time of one replica step.
        summary["compute_s_per_profile"] = {
            label: own.compute_s for label, own in costs.per_profile
        }
    summary.update(extra)
    return summary
