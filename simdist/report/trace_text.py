"""``trace.json``'s text: deterministic JSON, one trace event per line.

Bytes are identical for identical runs: keys in a fixed order, floats in shortest
round-trip form. :func:`span_lines` and :func:`counter_lines` format events directly,
without a dict per event, and write what the JSON encoder writes of the event's dict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

import numpy as np

# Between two events of the encoded list, and the same with a line break.
_BETWEEN = '},{"name":'
_BETWEEN_LINES = '},\n{"name":'
#: The fields of a complete ("X") event, in the order :func:`span_lines` takes its columns.
SPAN_FIELDS = ("name", "cat", "ts", "dur", "pid", "tid", "step", "nbytes", "detail")


def span_args(step: Any, nbytes: Any, detail: Any) -> dict[str, Any]:
    """A complete event's ``args``: its step, and its bytes and detail when it has them."""
    args: dict[str, Any] = {"step": step}
    if nbytes:
        args["bytes"] = nbytes
    if detail:
        args["detail"] = detail
    return args


def dumps_trace(trace: Mapping[str, Any]) -> str:
    """Deterministic JSON text: one trace event per line, keys in a fixed order."""
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    events = trace["traceEvents"]
    # One encoder call for the whole list (one call per event took 0.36 s for ps_4w2s's
    # 42,000 events, this 0.24 s), then a line break between events. Every event's first
    # key is "name", and a string value cannot hold an unescaped quote, so '},{"name":'
    # only occurs between two events unless an event nests a list of such objects: then
    # the count tells, and each event is encoded on its own.
    joined = encode(events)[1:-1]
    body = joined.replace(_BETWEEN, _BETWEEN_LINES)
    named = all(next(iter(e), None) == "name" for e in events)
    if not named or len(body) - len(joined) != max(len(events) - 1, 0):
        body = ",\n".join(encode(e) for e in events)
    return document(trace, body)


def document(trace: Mapping[str, Any], body: str) -> str:
    """The text of ``trace`` whose events, encoded one per line, are ``body``."""
    head = "".join(
        f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'), sort_keys=True)},"
        for k, v in sorted(trace.items())
        if k != "traceEvents"
    )
    return f'{{{head}"traceEvents":[\n{body}\n]}}\n'


def span_lines(spans: tuple[list[Any], ...]) -> list[str]:
    """Each complete event of ``spans`` (:data:`SPAN_FIELDS`) as the JSON encoder writes
    its dict (:func:`~simdist.report.trace.build_trace`), formatted directly: no dict per span.

    Numbers as the encoder writes them (``int.__repr__``, ``float.__repr__``), strings
    through its own escaping, each distinct string once. Should a field hold anything
    else — a float that is not finite, which the encoder refuses, or another type (none
    does today) — every span goes through the encoder instead.
    """
    name, cat, ts, dur, pid, tid, step, nbytes, detail = spans
    if not (
        all(strings(column) for column in (name, cat, detail))
        and all(numbers(column) for column in (ts, dur, pid, tid, step, nbytes))
    ):
        encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        keys = ("name", "cat", "ph", "ts", "dur", "pid", "tid", "args")
        return [
            encode(dict(zip(keys, (n, c, "X", t, d, p, i, span_args(s, b, e)), strict=True)))
            for n, c, t, d, p, i, s, b, e in zip(*spans, strict=True)
        ]
    quoted = {text: encode_basestring_ascii(text) for text in {*name, *cat, *detail}}
    return [
        f'{{"name":{quoted[n]},"cat":{quoted[c]},"ph":"X","ts":{t!r},"dur":{d!r},'
        f'"pid":{p!r},"tid":{i!r},"args":{{"step":{s!r}'
        + (f',"bytes":{b!r}' if b else "")
        + (f',"detail":{quoted[e]}' if e else "")
        + "}}"
        for n, c, t, d, p, i, s, b, e in zip(*spans, strict=True)
    ]


def counter_lines(counters: list[tuple[Any, ...]]) -> list[str]:
    """Each counter event as the JSON encoder writes its dict
    (:func:`~simdist.report.trace.build_trace`); as :func:`span_lines`, through the encoder
    when a field is not a plain str or number."""
    columns = tuple(map(list, zip(*counters, strict=True))) or ([],) * 5
    name, ts, pid, key, value = columns
    if not (strings(name) and strings(key) and all(map(numbers, (ts, pid, value)))):
        encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        return [
            encode({"name": n, "ph": "C", "ts": t, "pid": p, "args": {k: v}})
            for n, t, p, k, v in counters
        ]
    quoted = {text: encode_basestring_ascii(text) for text in {*name, *key}}
    return [
        f'{{"name":{quoted[n]},"ph":"C","ts":{t!r},"pid":{p!r},"args":{{{quoted[k]}:{v!r}}}}}'
        for n, t, p, k, v in counters
    ]


def strings(column: list[Any]) -> bool:
    """Only plain strings (what the encoder escapes as :func:`encode_basestring_ascii` does)."""
    return set(map(type, column)) <= {str}


def numbers(column: list[Any]) -> bool:
    """Plain ints, or plain ints and finite floats (what the encoder writes with repr)."""
    kinds = set(map(type, column))
    if kinds <= {int}:
        return True
    return kinds <= {int, float} and bool(np.isfinite(np.asarray(column, dtype=float)).all())
