"""Every event and metric of a run, stamped with simulated time.

The recorder is a plain append-only log: strategies call it as things happen
on the SimPy clock, and it turns into tidy pandas tables at the end.  It knows
no strategy and no SimPy; rows come out in the order they were recorded
(which the engine makes deterministic), sorted stably by time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

EVENT_COLUMNS = ("start_s", "end_s", "host", "device", "kind", "nbytes", "step", "detail", "links")
METRIC_COLUMNS = ("time_s", "step", "metric", "value")
#: dtypes of events.csv and metrics.csv, as :meth:`Recorder.events_frame` and
#: :meth:`Recorder.metrics_frame` produce them.
EVENT_DTYPES: dict[str, str] = dict(
    zip(
        EVENT_COLUMNS,
        ("float64", "float64", "str", "str", "str", "int64", "int64", "str", "str"),
        strict=True,
    )
)
METRIC_DTYPES: dict[str, str] = dict(
    zip(METRIC_COLUMNS, ("float64", "int64", "str", "float64"), strict=True)
)

#: Event kinds and what they mean, for docs and for ``simdist list``.
EVENT_KINDS = {
    "compute": "a device computes one gradient",
    "comm": "bytes move over a link (send, receive, all-reduce, pull, push)",
    "idle": "a device waits for others (barrier) or for a link",
    "apply": "an optimizer update is applied",
    "eval": "the chief evaluates on the test set",
    "straggle": "the extra compute time of a straggling device (beyond its normal compute)",
    "input_wait": "a device waits for its next batch from the input pipeline",
    "checkpoint": "the chief writes parameters + optimizer state to storage",
    "failure": "a task is down (on the failed host's own track)",
    "restart": "devices wait for a failed task to restart",
    "restore": "devices wait while the last checkpoint is read back",
}


class Recorder:
    """Collects events (intervals), metrics (points) and extra tidy tables."""

    #: :meth:`events` keeps fewer rows than this as rows, not as a block (cheaper).
    BLOCK_MIN_ROWS = 16

    def __init__(self) -> None:
        self._events: list[tuple[Any, ...]] = []  # rows recorded one by one since the last block
        self._chunks: list[list[tuple[Any, ...]] | _Block] = []  # earlier rows, in order
        self._columns: dict[tuple[int, ...], tuple[Any, np.ndarray, np.ndarray]] = {}
        self._metrics: list[tuple[Any, ...]] = []
        self._tables: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def event(
        self,
        start_s: float,
        end_s: float,
        host: str,
        device: str,
        kind: str,
        nbytes: float = 0,
        step: int = -1,
        detail: str = "",
        links: str = "",
    ) -> None:
        """Record that ``device`` on ``host`` spent [start_s, end_s] doing ``kind``.

        ``links`` names the links of ``host`` the interval occupied (``w0/nic``;
        several joined by ``;``); only the network layer fills it. Called once
        per device per phase (a 1024-device step makes thousands of calls), so
        the values are stored as given and converted to float / int columns
        once, in :meth:`events_frame`.
        """
        if end_s > start_s:
            self._events.append((start_s, end_s, host, device, kind, nbytes, step, detail, links))

    def events(
        self,
        start_s: np.ndarray | float,
        end_s: np.ndarray | float,
        host: np.ndarray,
        device: np.ndarray,
        kind: np.ndarray | str,
        nbytes: float = 0,
        step: int = -1,
        detail: np.ndarray | str = "",
        links: np.ndarray | str = "",
    ) -> None:
        """Many :meth:`event` rows at once, as columns: the same rows in the same order.

        ``host`` and ``device`` are object arrays, one entry per row; every other
        argument is a scalar shared by the rows or an array as long. A phase of a
        synchronous step records a few rows per device (1024 devices make thousands),
        which cost a method call each; a block costs a few NumPy operations.
        """
        n = len(device)
        if isinstance(start_s, np.ndarray) or isinstance(end_s, np.ndarray):
            keep = np.broadcast_to(np.asarray(end_s) > np.asarray(start_s), n)
            if not keep.all():
                if not keep.any():
                    return
                start_s, end_s, host, device, kind, detail, links = (
                    np.broadcast_to(c, n)[keep] if isinstance(c, np.ndarray) else c
                    for c in (start_s, end_s, host, device, kind, detail, links)
                )
                n = len(device)
        elif not end_s > start_s:
            return
        else:
            start_s, end_s = float(start_s), float(end_s)
        columns = (start_s, end_s, host, device, kind, nbytes, step, detail, links)
        if n < self.BLOCK_MIN_ROWS:
            rows = [c if type(c) is np.ndarray else (c,) * n for c in columns]
            self._events.extend(zip(*rows, strict=True))
            return
        if self._events:
            self._chunks.append(self._events)
            self._events = []
        self._chunks.append(
            _Block(n, start_s, end_s, host, device, kind, int(nbytes), int(step), detail, links)
        )

    def device_grid(
        self,
        devices: Sequence[Any],
        begins: np.ndarray,
        ends: np.ndarray,
        kinds: np.ndarray,
        details: np.ndarray,
        keep: np.ndarray,
        step: int,
    ) -> None:
        """Spans laid out one row of the grid per device, recorded device by device (the order
        of one call per span) where ``keep`` holds; every argument after ``devices`` has the
        grid's shape (devices × spans)."""
        hosts, names = self.device_columns(devices)
        rows, spans = keep.ravel(), begins.shape[1]
        self.events(
            begins.ravel()[rows],
            ends.ravel()[rows],
            np.repeat(hosts, spans)[rows],
            np.repeat(names, spans)[rows],
            kinds.ravel()[rows],
            0,
            step,
            details.ravel()[rows],
        )

    def device_columns(self, devices: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """The ``host`` and ``name`` of each of ``devices`` as object arrays, for :meth:`events`.

        Kept for the last sequences asked (strategies pass the same devices step after
        step), keyed by the objects' identities, which the cache keeps alive.
        """
        key = tuple(map(id, devices))
        cached = self._columns.get(key)
        if cached is None:
            if len(self._columns) >= 64:
                self._columns.clear()
            cached = self._columns[key] = (
                tuple(devices),
                _objects(tuple(d.host for d in devices)),
                _objects(tuple(d.name for d in devices)),
            )
        return cached[1], cached[2]

    def metric(self, time_s: float, step: int, name: str, value: float) -> None:
        """Record the value of metric ``name`` at simulated time ``time_s``."""
        self._metrics.append((float(time_s), int(step), name, float(value)))

    def metric_later(self, time_s: float, step: int, name: str) -> int:
        """A metric row whose value comes later (:meth:`fill_metric`); returns its index.

        The row keeps its place in recording order, which orders rows of equal times.
        """
        self._metrics.append((float(time_s), int(step), name, math.nan))
        return len(self._metrics) - 1

    def fill_metric(self, row: int, value: float) -> None:
        """Set the value of the row :meth:`metric_later` returned."""
        time_s, step, name, _ = self._metrics[row]
        self._metrics[row] = (time_s, step, name, float(value))

    def row(self, table: str, **fields: Any) -> None:
        """Append one row to the extra table ``table`` (e.g. ``updates``)."""
        self._tables[table].append(fields)

    def events_frame(self) -> pd.DataFrame:
        """All events, one row per simulated interval, stably sorted by start time."""
        chunks = [*self._chunks, self._events] if self._events else self._chunks
        if not chunks:
            return pd.DataFrame(self._events, columns=list(EVENT_COLUMNS))
        blocks = [c for c in chunks if isinstance(c, _Block)]
        rows = [row for c in chunks if isinstance(c, list) for row in c]
        single = None  # where the rows recorded one by one go among the blocks' rows
        if blocks and rows:
            sizes = [len(c) if isinstance(c, list) else c.n for c in chunks]
            kinds = np.array([isinstance(c, list) for c in chunks])
            single = np.repeat(kinds, sizes)

        def column(name: str) -> np.ndarray:
            # Column by column, each sorted before the next is built: a big run's rows
            # would otherwise be held three or four times over at once.
            if not blocks:
                return _Block.column(rows, name)
            if not rows:
                return _Block.joined(blocks, name)
            assert single is not None
            values = np.empty(len(single), dtype=_COLUMN_DTYPES[name])
            values[single] = _Block.column(rows, name)
            values[~single] = _Block.joined(blocks, name)
            return values

        return _sorted_lazily(column, "start_s")

    def metrics_frame(self) -> pd.DataFrame:
        """All metrics in tidy form, stably sorted by simulated time."""
        if not self._metrics:
            return pd.DataFrame(self._metrics, columns=list(METRIC_COLUMNS))
        n = len(self._metrics)
        time_s, step, metric, value = zip(*self._metrics, strict=True)  # floats, ints, strs
        columns = {
            "time_s": np.fromiter(time_s, np.float64, n),
            "step": np.fromiter(step, np.int64, n),
            "metric": _objects(metric),
            "value": np.fromiter(value, np.float64, n),
        }
        return _sorted_frame(columns, "time_s")

    def clear(self) -> None:
        """Drop the recorded rows (once their frames are built).

        A big run records millions of small tuples; freed here, while Python's cyclic
        collector is still paused (:func:`simdist.runtime.engine.gc_paused`), they go by
        reference counting instead of being walked by the next full collection, which
        cost a timing-only run up to a third of its wall time.
        """
        self._events = []
        self._chunks = []
        self._metrics = []
        self._tables = defaultdict(list)

    def table_frames(self) -> dict[str, pd.DataFrame]:
        """The extra tables, by name, in recording order."""
        return {name: pd.DataFrame(rows) for name, rows in sorted(self._tables.items())}


class _Block:
    """Rows of events as columns: each a NumPy array with a value per row, or one scalar
    shared by all ``n`` rows (a float, a string, an int)."""

    __slots__ = ("n", "values")

    def __init__(self, n: int, *values: Any) -> None:
        self.n = n
        self.values = dict(zip(EVENT_COLUMNS, values, strict=True))

    @staticmethod
    def column(rows: list[tuple[Any, ...]], name: str) -> np.ndarray:
        """Column ``name`` of the rows :meth:`Recorder.event` recorded one by one."""
        values = list(map(itemgetter(EVENT_COLUMNS.index(name)), rows))
        # NumPy converts as float() and int() would (ints truncate toward zero), in C.
        dtype = _COLUMN_DTYPES[name]
        return _objects(values) if dtype is object else np.array(values, dtype=dtype)

    @staticmethod
    def joined(blocks: list[_Block], name: str) -> np.ndarray:
        """Column ``name`` of ``blocks``, one after the other."""
        dtype = _COLUMN_DTYPES[name]
        values = [block.values[name] for block in blocks]
        if not any(isinstance(value, np.ndarray) for value in values):
            return np.repeat(np.array(values, dtype=dtype), [block.n for block in blocks])
        return np.concatenate(
            [
                value if isinstance(value, np.ndarray) else np.full(block.n, value, dtype=dtype)
                for block, value in zip(blocks, values, strict=True)
            ]
        )


#: The NumPy dtype each events column is built with (strings as objects: pandas stores them
#: as ``str``).
_COLUMN_DTYPES = {
    name: object if dtype == "str" else np.dtype(dtype) for name, dtype in EVENT_DTYPES.items()
}


def _sorted_frame(columns: dict[str, np.ndarray], by: str) -> pd.DataFrame:
    """A frame of ``columns`` stably sorted by column ``by``, as
    ``sort_values(by, kind="stable", ignore_index=True)`` sorts it: the columns are put in
    order as arrays first, which saves building a frame twice (a short run pays that)."""
    key = columns[by]
    if np.isnan(key).any():  # pandas puts NaN last
        return pd.DataFrame(columns).sort_values(by, kind="stable", ignore_index=True)
    if len(key) > 1 and not (key[1:] >= key[:-1]).all():
        order = np.argsort(key, kind="stable")
        columns = {name: column[order] for name, column in columns.items()}
    return pd.DataFrame(columns)


def _sorted_lazily(column: Callable[[str], np.ndarray], by: str) -> pd.DataFrame:
    """:func:`_sorted_frame` of the events' columns, each built by ``column(name)`` and
    put in order before the next is built."""
    key = column(by)
    if np.isnan(key).any():  # pandas puts NaN last
        columns = {name: key if name == by else column(name) for name in EVENT_COLUMNS}
        return _sorted_frame(columns, by)
    order = None
    if len(key) > 1 and not (key[1:] >= key[:-1]).all():
        order = np.argsort(key, kind="stable")
    columns = {}
    for name in EVENT_COLUMNS:
        values = key if name == by else column(name)
        columns[name] = values if order is None else values[order]
        del values
    return pd.DataFrame(columns)


def _objects(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a 1-D object array (``np.array`` would make a string array)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array
