"""What simdist does with SimPy beyond its public API, in one place.

A few hot paths save SimPy events that would call nothing, or batch events that would run
back to back, and a diagnostic reorders simultaneous events (:mod:`simdist.runtime.ties`). Each
needs SimPy's private state: the event heap ``Environment._queue`` of
``(time, priority, id, event)`` entries, the id counter ``Environment._eid``, the clock
``Environment._now``, and an event's ``_ok`` / ``_value`` (its outcome; ``_value`` is
``PENDING`` until triggered) and ``callbacks`` (``None`` once processed). They are the
same in SimPy 4.1.0, 4.1.1 and 4.1.2 (``simpy/core.py``: ``Environment.__init__``,
``schedule``, ``step``; ``simpy/events.py``: ``Event``, ``Initialize``), which is the
range simdist accepts (:data:`SIMPY_SUPPORTED`, pinned in pyproject.toml): importing
this module with any other SimPy version is one clear error.

Every other module calls the helpers here and touches no ``_`` name of SimPy's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import simpy
from simpy.core import NORMAL, URGENT
from simpy.events import Event

from simdist.errors import SimdistError

#: The SimPy versions whose internals this module relies on: ``>=4.1,<4.2``.
SIMPY_SUPPORTED = ((4, 1), (4, 2))


def check_simpy_version(version: str) -> None:
    """Refuse a SimPy ``version`` outside :data:`SIMPY_SUPPORTED`, naming the range."""
    (low, high), wanted = SIMPY_SUPPORTED, "simpy>=4.1,<4.2"
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        found = ()
    if len(found) != 2 or not low <= found < high:
        raise SimdistError(
            f"simdist needs {wanted} (it relies on that engine's event queue), but "
            f"simpy {version} is installed; install a supported version: "
            f"pip install '{wanted}'"
        )


check_simpy_version(simpy.__version__)


def settle(event: Event, value: Any = None) -> None:
    """Mark ``event`` succeeded with ``value`` and already processed, without scheduling it.

    What ``event.succeed(value)`` and the later SimPy step that processes it leave behind,
    for an event that nobody listens to: that step would have called nothing.
    """
    event._ok, event._value, event.callbacks = True, value, None  # type: ignore[assignment]


def triggered(env: simpy.Environment, callback: Callable[[Event], None]) -> Event:
    """A new event, succeeded with ``None``, whose one callback is ``callback``; not scheduled."""
    event = Event(env)
    event._ok, event._value = True, None
    event.callbacks.append(callback)  # type: ignore[union-attr]
    return event


def call_urgent(env: simpy.Environment, callback: Callable[[Event], None]) -> None:
    """``callback(event)`` at this instant, before every normal-priority event due now.

    How SimPy starts a process (its ``Initialize`` event): a triggered event scheduled
    as urgent. Callers that would start several processes at once start one chain of
    callbacks this way and keep the processes' order to the event.
    """
    env.schedule(triggered(env, callback), URGENT)


def next_event_id(env: simpy.Environment) -> int:
    """A fresh event id from ``env``'s counter: later ids run later among equal times."""
    return next(env._eid)  # type: ignore[attr-defined]


def schedule_keyed(
    env: simpy.Environment, event: Event, delay: float, key: Any, priority: int = NORMAL
) -> None:
    """:meth:`simpy.Environment.schedule` with the tie-breaking ``key`` given, not drawn.

    Events due at one time and priority run in the order of their keys; SimPy's own key
    is :func:`next_event_id`.
    """
    heapq.heappush(env._queue, (env._now + delay, priority, key, event))  # type: ignore[attr-defined]


def queued(env: simpy.Environment) -> int:
    """How many events ``env`` has scheduled and not yet processed."""
    return len(env._queue)  # type: ignore[attr-defined]


class TimeoutBatch(Event):
    """Calls due at one instant, as one SimPy event in the place of their timeouts.

    ``env.timeout(delay_s).callbacks.append(call)`` for each call, scheduled back to back,
    would give timeouts of one time and priority that SimPy processes back to back in that
    order: the batch runs the calls in that order at that place, for one event (the batch
    is that event, triggered from the start). It is scheduled as
    :meth:`simpy.Environment.schedule` does, keeping its id (``eid``): should
    a call schedule an urgent event for this instant (a process started, an interrupt),
    SimPy would have processed that before the next call's timeout, so the calls left
    are scheduled again with the same id, behind the urgent event and before every
    event scheduled after the batch, where their timeouts were.
    """

    _ok = True
    _value = None

    def __init__(
        self,
        env: simpy.Environment,
        delay_s: float,
        calls: list[Callable[[Any], None]],
        eid: int | None = None,
    ) -> None:
        self.env = env
        self.delay_s = delay_s
        self.calls = calls
        self.callbacks = _RUN  # type: ignore[assignment]
        self.eid = next(env._eid) if eid is None else eid  # type: ignore[attr-defined]
        queue = env._queue  # type: ignore[attr-defined]
        heapq.heappush(queue, (env._now + delay_s, NORMAL, self.eid, self))  # type: ignore[attr-defined]
        self.queued = len(queue)

    def join(self, delay_s: float, call: Callable[[Any], None]) -> bool:
        """Add ``call`` if its timeout would run right after the batch's last call.

        True when ``delay_s`` is the batch's and nothing was scheduled since the batch's
        last call: within one SimPy step nothing leaves the queue, so an unchanged length
        means that nothing was.
        """
        if self.delay_s != delay_s or self.queued != len(self.env._queue):  # type: ignore[attr-defined]
            return False
        self.calls.append(call)
        return True

    def run(self, _: Event | None = None) -> None:
        """The batch's event is processed: each call, as its timeout would have been."""
        env, calls = self.env, self.calls
        if len(calls) == 1:
            calls[0](None)
            return
        queue, now, last = env._queue, env._now, len(calls) - 1  # type: ignore[attr-defined]
        for i, call in enumerate(calls):
            call(None)
            if i < last and queue and queue[0][1] < NORMAL and queue[0][0] == now:
                TimeoutBatch(env, 0.0, calls[i + 1 :], self.eid)
                return


#: A batch's one callback, shared: SimPy calls it with the batch, never changes the list.
_RUN: list[Callable[[Event], None]] = [TimeoutBatch.run]


class Call(Event):
    """``callback(event)`` ``delay`` from now: what ``env.timeout(delay)`` with that one
    callback schedules (same time, priority and place among simultaneous events), for less.

    Triggered from the start (class attributes, as :func:`triggered` sets them), and
    scheduled through :meth:`simpy.Environment.schedule`, so :mod:`simdist.runtime.ties` still
    reorders it. :meth:`again` schedules the same object once more after it was processed:
    a caller that asks for one call at a time (a settling step) builds no event per call.
    """

    _ok = True
    _value = None

    def __init__(
        self,
        env: simpy.Environment,
        callback: Callable[[Event], None],
        delay: float = 0.0,
        key: int | None = None,
    ) -> None:
        self.env = env
        self.callbacks = [callback]  # type: ignore[assignment]
        if key is None:
            env.schedule(self, NORMAL, delay)
        else:  # in the place of an event scheduled when ``key`` was reserved (reserve_key)
            heapq.heappush(env._queue, (env._now + delay, NORMAL, key, self))  # type: ignore[attr-defined]

    def again(self, callbacks: list[Callable[[Event], None]]) -> None:
        """Schedule this processed event again, now, calling ``callbacks`` (never changed)."""
        self.callbacks = callbacks  # type: ignore[assignment]
        self.env.schedule(self)


def take_next(env: simpy.Environment, event: Event) -> bool:
    """Whether ``event`` is the one SimPy would process next; if so it is taken off the
    queue, processed but not called: the caller runs its callbacks at once, where SimPy
    would have, with nothing in between."""
    queue = env._queue  # type: ignore[attr-defined]
    if not queue or queue[0][3] is not event:
        return False
    heapq.heappop(queue)
    event.callbacks = None  # type: ignore[assignment]
    return True


_SCHEDULE = simpy.Environment.schedule


def reserve_key(env: simpy.Environment) -> int | None:
    """The id an event scheduled now would get, for a :class:`Call` made later with it
    (``key``): it runs where it would have run had it been scheduled now. A caller that
    may find the event unneeded before its step ends saves a step that would call nothing.

    None while :meth:`simpy.Environment.schedule` is replaced (:mod:`simdist.runtime.ties` draws
    keys of its own): the caller schedules at once then.
    """
    if simpy.Environment.schedule is not _SCHEDULE:
        return None
    return next(env._eid)  # type: ignore[attr-defined]
