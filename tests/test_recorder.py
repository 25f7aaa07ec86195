"""The recorder's block rows and the time split computed for all devices at once: the same
rows and the same floats as the one-row-at-a-time and one-device-at-a-time forms."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simdist.runtime.recorder import EVENT_DTYPES, Recorder
from simdist.summary import (
    SPLIT_CATEGORIES,
    split_category,
    time_split,
    time_split_by_device,
    union_seconds,
)

_devices = [SimpleNamespace(host=f"h{i // 2}", name=f"d{i}") for i in range(5)]


def _objects(values: list[str]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


@pytest.mark.parametrize("block_min_rows", [1, Recorder.BLOCK_MIN_ROWS])  # blocks, then rows
def test_a_block_records_the_rows_of_one_call_per_row_in_their_place(block_min_rows: int):
    one, block = Recorder(), Recorder()
    block.BLOCK_MIN_ROWS = block_min_rows
    for r in (one, block):
        r.event(0.0, 1.0, "h0", "d0", "compute", 0, 0)
    starts = np.array([1.0, 1.0, 2.0, 2.0, 3.0])
    ends = np.array([2.0, 1.0, 4.0, 2.5, 3.5])  # the second is empty: not recorded
    details = ["a", "b", "c", "d", "e"]
    for i, d in enumerate(_devices):
        one.event(starts[i], ends[i], d.host, d.name, "comm", 64, 3, details[i], "l")
    hosts, names = block.device_columns(_devices)
    block.events(starts, ends, hosts, names, "comm", 64, 3, _objects(details), "l")
    for r in (one, block):
        r.event(1.0, 2.5, "h9", "ps", "apply", 0, 3, "x")
    hosts, names = block.device_columns(_devices[:2])
    block.events(5.0, 6.0, hosts, names, "idle", 0, 4, "barrier")
    block.events(6.0, 6.0, hosts, names, "idle", 0, 4, "empty")  # nothing recorded
    for d in _devices[:2]:
        one.event(5.0, 6.0, d.host, d.name, "idle", 0, 4, "barrier")
    expected = one.events_frame()
    got = block.events_frame()
    assert len(got) == 8
    pd.testing.assert_frame_equal(got, expected)
    assert {c: str(t) for c, t in got.dtypes.items()} == EVENT_DTYPES
    # stably sorted by start: the apply row (start 1.0) after the block's rows at 1.0
    assert got["detail"].tolist() == ["", "a", "x", "c", "d", "e", "barrier", "barrier"]


def test_device_columns_follow_the_devices_not_the_list_holding_them():
    r = Recorder()
    devices = list(_devices)
    assert r.device_columns(devices)[1].tolist() == ["d0", "d1", "d2", "d3", "d4"]
    devices.reverse()  # the same list, mutated
    hosts, names = r.device_columns(devices)
    assert names.tolist() == ["d4", "d3", "d2", "d1", "d0"]
    assert hosts.tolist() == ["h2", "h1", "h1", "h0", "h0"]


def _reference_split(events: pd.DataFrame, sim_time_s: float, devices: list[str]) -> pd.DataFrame:
    """The time split device by device, category by category (the form it had first)."""
    cats = events["kind"].map(split_category).to_numpy()
    start = np.clip(events["start_s"].to_numpy(float), 0.0, sim_time_s)
    end = np.clip(events["end_s"].to_numpy(float), 0.0, sim_time_s)
    rows = []
    for device in devices:
        mine = events["device"].to_numpy() == device
        covered, row, mask = 0.0, {}, np.zeros(len(events), bool)
        for category in SPLIT_CATEGORIES[:-1]:
            mask |= cats == category
            total = union_seconds(start[mine & mask], end[mine & mask])
            row[category] = max(0.0, total - covered)
            covered = max(covered, total)
        row["idle"] = max(0.0, sim_time_s - covered)
        rows.append(row)
    return pd.DataFrame(rows, index=pd.Index(devices, name="device"), columns=SPLIT_CATEGORIES)


_times = st.floats(0.0, 50.0, allow_nan=False).map(lambda t: round(t, 3))
_rows = st.lists(
    st.tuples(
        _times,
        st.floats(0.0, 9.0).map(lambda t: round(t, 4)),
        st.sampled_from(["d0", "d1", "d2", "ps"]),
        st.sampled_from(["compute", "comm", "idle", "straggle", "apply", "input_wait"]),
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(_rows, st.floats(1.0, 60.0))
def test_the_time_split_of_all_devices_at_once_is_that_of_each_alone(rows, sim_time_s):
    events = pd.DataFrame(
        {
            "start_s": [r[0] for r in rows],
            "end_s": [r[0] + r[1] for r in rows],
            "device": [r[2] for r in rows],
            "kind": [r[3] for r in rows],
        }
    )
    devices = ["d1", "d0", "d2", "d9"]  # d9 has no events; ps is not asked for
    got = time_split_by_device(events, sim_time_s, devices)
    pd.testing.assert_frame_equal(
        got, _reference_split(events, sim_time_s, devices), check_exact=True
    )
    twice = time_split_by_device(events, sim_time_s, ["d0", "d1", "d0"])
    assert twice.index.tolist() == ["d0", "d1", "d0"]
    pd.testing.assert_frame_equal(twice.iloc[[0]], got.loc[["d0"]], check_exact=True)


@pytest.mark.parametrize("n_devices", [3, 9, 64, 300])
def test_the_summary_time_split_is_the_sum_of_the_device_table(n_devices):
    """summary.json's shares add the device columns as ``DataFrame.sum`` of the device
    table does (pairwise, which differs from adding in sequence past 8 devices)."""
    rng = np.random.default_rng(n_devices)
    devices = [f"d{i}" for i in range(n_devices)]
    start = rng.random(20 * n_devices) * 10.0
    events = pd.DataFrame(
        {
            "start_s": start,
            "end_s": start + rng.random(len(start)),
            "device": rng.choice([*devices, "ps0"], len(start)).astype(object),
            "kind": rng.choice(["compute", "comm", "idle", "apply"], len(start)).astype(object),
        }
    )
    asked = [*devices, devices[0]]  # a device asked for twice counts twice
    sums = time_split_by_device(events, 10.0, asked).sum()
    total = len(asked) * 10.0
    shares = time_split(events, asked, 10.0)
    assert shares["compute"] == float(sums["compute"]) / total
    assert shares["comm"] == float(sums["comm"]) / total
