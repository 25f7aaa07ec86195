"""Per-process caches of built objects (workloads, layer profiles, data sets, programs).

A few entries each, the least recently used dropped first: a notebook or a sweep process
running several scenarios keeps what the next run is likely to reuse, and no more.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["CACHE_SIZE", "remember"]

#: Entries each process-wide cache keeps (the engine's workloads, profiles, data sets).
CACHE_SIZE = 4


def remember(cache: OrderedDict[str, Any], key: str, make: Callable[[], Any]) -> Any:
    """``cache[key]``, made by ``make()`` when missing; the least recently used go first."""
    value = cache.pop(key, None)
    if value is None:
        value = make()
    cache[key] = value
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)
    return value
