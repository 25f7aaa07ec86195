"""The network: the one place that decides how long bytes take, and records it.

Strategies say *what* moves, through two methods: ``net.send(worker, ps, nbytes)`` and
``net.collective(op, devices, nbytes, algo)`` (``allreduce``, ``reduce_scatter``,
``all_gather``, ``all_to_all``, ``broadcast``, ``reduce``); the network routes it through its
:class:`~simdist.network.topology.Topology`, prices it, holds the links on the
SimPy clock (so concurrent traffic contends) and records the interval — as in
ASTRA-sim's ``send(src, dst, nbytes) -> delay``. Every recorded ``comm`` row
names, in its ``links`` column, the links of its own host that the bytes
occupied, so timelines draw link tracks from what happened, not from guesses.

What is recorded where:

* a collective: one ``comm`` row per participating device, from the moment it
  holds its links to its end (closed-form duration);
* a point-to-point message, on each end point that is a *device*: ``idle``
  while it waits for its links (``wait_detail``), then ``comm`` until the bytes
  arrive; on each end point that is a device-less task (a parameter server):
  ``comm`` for the time its NIC serialised the bytes (latency excluded; rows
  overlap when messages share the NIC, under fair sharing or on the two sides
  of a full-duplex one, and trace.json puts them in lanes) — under a protocol
  with CPU costs, from its encode to the end of its transmission (sender) or
  from the first byte on the wire to the end of its decode (receiver); a host
  end point with devices (a worker's CPU) records nothing by itself —
  :meth:`Network.wait_all` records a phase of parallel messages on its devices.

A row's ``links`` cell names the links of the end point's *machine*: a
parameter-server task co-located on a worker machine keeps its own track, and its
cells name that machine's NIC (and CPU link, under a protocol with CPU costs).
Point-to-point messages pay ``cluster.network.protocol``
(:mod:`simdist.network.transport`); collectives pay its collective figures on their steps
across hosts, which the topology prices.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING

from simdist.hardware.cluster import Device
from simdist.network.hold import hold_ordered
from simdist.network.link import Link, ordered
from simdist.network.topology import Endpoint, Topology, machine_of
from simdist.network.transfer import Countdown, Route, Transfer, route_of
from simdist.network.transport import PROTOCOLS, Message, Protocol, Transport

if TYPE_CHECKING:
    import numpy as np
    import simpy

    from simdist.runtime.recorder import Recorder


#: A cached route: links, the two ends' ``links`` cells, transport mode, the two machines,
#: the route's :class:`Route` and what each end records of an ideal message (:meth:`send`).
_Ends = tuple[tuple[bool, str, str, str], ...]  # per recording end: device?, host, track, cell
_Route = tuple[list[Link], tuple[str, str], str, tuple[str, str], Route, _Ends]
#: A held set of links: acquisition order, its index map, and link cells per host column.
_Hold = tuple[list[Link], list[int], dict[int, tuple["np.ndarray", "np.ndarray"]]]
#: A collective over one device list: the list, seconds, links held, bytes per link.
_Priced = tuple[Sequence[Device], float, list[Link], list[float]]


def links_on(links: Iterable[Link], host: str) -> str:
    """The ``links`` cell of a row on ``host``'s track: its links among ``links``, by name."""
    return ";".join(sorted({link.name for link in links if link.host == host}))


class Network:
    """Sends, collectives and their recording, on one topology and one SimPy clock."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        recorder: Recorder,
        protocol: Protocol | None = None,
    ) -> None:
        self.env = env
        self.topology = topology
        self.recorder = recorder
        #: What point-to-point messages cost beyond the wire (default: ``ideal``, none).
        self.transport = Transport(env, protocol or PROTOCOLS["ideal"])
        self._ideal = self.transport.protocol.ideal  # asked per message; fixed per run
        self._routes: dict[tuple[str, str], _Route] = {}
        self._holds: dict[tuple[int, ...], _Hold] = {}  # see _hold
        self._collectives: dict[tuple[str, str, float, int], _Priced] = {}  # see collective
        self._copies: dict[tuple[str, str, float, int, int], tuple] = {}  # see _copy_rows
        # see _record_phase: the routes of a phase, and the links cell per host
        self._phase_cells: dict[tuple[int, ...], tuple[tuple[list[Link], ...], dict[str, str]]] = {}

    # -- point to point ------------------------------------------------------

    def route(self, src: Endpoint, dst: Endpoint) -> list[Link]:
        """The links a message from ``src`` to ``dst`` occupies (cached per pair)."""
        return self._route(src, dst)[0]

    def _route(self, src: Endpoint, dst: Endpoint) -> _Route:
        """The route, the ``links`` cells of its two end points' machines, the transport
        mode (``network``, ``loopback`` or ``dma``: see :meth:`Transport.send`) and the two
        machines, cached per pair."""
        key = (src.name, dst.name)
        cached = self._routes.get(key)
        if cached is None:
            links = self.topology.route(src, dst)
            a, b = machine_of(src), machine_of(dst)
            if a != b:
                mode = "network"
            elif isinstance(src, Device) or isinstance(dst, Device):
                mode = "dma"
            else:
                mode = "loopback"
            cells = (links_on(links, a), links_on(links, b))
            # Per end that records anything: (a device?, its host, its track, its cell).
            ends = tuple(
                (
                    isinstance(end, Device),
                    end.host if isinstance(end, Device) else end.name,
                    end.name,
                    cell,
                )
                for end, cell in zip((src, dst), cells, strict=True)
                if isinstance(end, Device) or not end.devices
            )
            path = route_of(links)
            cached = self._routes[key] = (links, cells, mode, (a, b), path, ends)
        return cached

    def send(
        self,
        src: Endpoint,
        dst: Endpoint,
        nbytes: float,
        *,
        step: int,
        detail: str,
        wait_detail: str = "waiting for a link",
        then: Callable[[], None] | None = None,
        done: simpy.Event | None = None,
    ) -> Transfer | Message:
        """Start moving ``nbytes`` from ``src`` to ``dst``; ``then()`` runs on arrival.

        Returns the :class:`Transfer` — or, under a protocol with CPU or per-message
        costs, a :class:`~simdist.network.transport.Message` with the same surface:
        ``yield transfer.done`` waits for the arrival (its value is ``(start_s,
        arrival_s)``), ``transfer.cancel()`` cuts it (a failure; nothing is recorded then).
        ``done``: the event to trigger on arrival instead of a new one — an event the
        receiver may already wait on, so it need not be triggered by ``then`` in a SimPy
        step of its own beside the message's ``done``.
        The protocol (``cluster.network.protocol``) prices the message: see
        :mod:`simdist.network.transport`.
        """
        links, cells, mode, machines, path, ends = self._route(src, dst)
        asked = self.env.now
        event = self.recorder.event
        if self._ideal:
            # The common case, with what each end records worked out once per route.

            def landed(start: float, arrival: float) -> None:
                for device, host, track, cell in ends:
                    if device:
                        event(asked, start, host, track, "idle", 0, step, wait_detail)
                        event(start, arrival, host, track, "comm", nbytes, step, detail, cell)
                    else:
                        event(start, moving.sent_s, host, track, "comm", nbytes, step, detail, cell)
                if then is not None:
                    then()

            moving = Transfer(self.env, links, nbytes, landed, route=path, done=done)
            return moving

        def arrived(start: float, arrival: float) -> None:
            staged = isinstance(moving, Message)
            for end, cell, sender in zip((src, dst), cells, (True, False), strict=True):
                if staged:  # its CPU link too
                    cell = links_on(moving.links, machine_of(end))
                if isinstance(end, Device):
                    host = end.host
                    event(asked, start, host, end.name, "idle", 0, step, wait_detail)
                    event(start, arrival, host, end.name, "comm", nbytes, step, detail, cell)
                elif not end.devices:
                    begin, busy = moving.span(sender) if staged else (start, moving.sent_s)
                    event(begin, busy, end.name, end.name, "comm", nbytes, step, detail, cell)
            if then is not None:
                then()

        moving = self.transport.send(
            links, nbytes, arrived, machines=machines, mode=mode, done=done
        )
        return moving

    def send_rows(
        self,
        src: Device,
        dst: Device,
        nbytes: float,
        asked_s: float,
        start_s: float,
        arrival_s: float,
        *,
        step: int,
        detail: str,
        wait_detail: str = "waiting for a link",
    ) -> None:
        """Record what :meth:`send` records on its two devices for a message of ``nbytes``
        from ``src`` to ``dst`` asked at ``asked_s``, moving from ``start_s`` and arriving
        at ``arrival_s``, without simulating it: a lock-step copy's message
        (:mod:`simdist.network.lockstep`), whose times are its copy-0 twin's. Only for
        messages that :meth:`send` moves as one :class:`Transfer` over the route
        (:attr:`bare_messages`)."""
        event = self.recorder.event
        for is_device, host, track, cell in self._route(src, dst)[5]:
            if not is_device:
                raise ValueError(f"send_rows records devices' rows only; got {track}")
            event(asked_s, start_s, host, track, "idle", 0, step, wait_detail)
            event(start_s, arrival_s, host, track, "comm", nbytes, step, detail, cell)

    @property
    def bare_messages(self) -> bool:
        """Whether a message between two machines is one :class:`Transfer` over its route
        (no CPU link, no per-message stage): the protocol is ideal, or prices the wire's
        efficiency alone."""
        p = self.transport.protocol
        return p.ideal or (p.serialization_Bps is None and p.per_message_overhead_s <= 0)

    def wait_all(
        self,
        devices: Sequence[Device],
        moves: Sequence[Transfer],
        *,
        step: int,
        detail: str,
        nbytes: float,
    ) -> Generator[simpy.Event, object, None]:
        """Wait for parallel messages of one host; record them on its devices as one span.

        The span runs from now to the last arrival — or to an interruption (a
        failure), which is re-raised after recording.
        """
        start = self.env.now
        try:
            yield self.join(moves)
        finally:
            self._record_phase(devices, moves, start, step, detail, nbytes)

    def phase(
        self,
        devices: Sequence[Device],
        moves: Sequence[Transfer],
        *,
        step: int,
        detail: str,
        nbytes: float,
        start_s: float | None = None,
    ) -> simpy.Event:
        """As :meth:`wait_all`, without a process: the returned event fires at the last arrival.

        The phase, from ``start_s`` (default: now) to the last arrival, is recorded
        on ``devices`` then; a phase whose messages are cut (a failure) is not recorded.
        """
        start = self.env.now if start_s is None else start_s
        joined = self.join(moves)
        joined.callbacks.append(
            lambda _: self._record_phase(devices, moves, start, step, detail, nbytes)
        )
        return joined

    def _record_phase(
        self,
        devices: Sequence[Device],
        moves: Sequence[Transfer],
        start_s: float,
        step: int,
        detail: str,
        nbytes: float,
    ) -> None:
        """A phase of parallel messages, ``start_s`` to now, as one ``comm`` row per device."""
        # A worker's phases move over the same routes step after step: their cells are
        # worked out once per set of routes (each route's link list lives as long as the
        # network, and the cache keeps the lists it names alive).
        routes = tuple([move.links for move in moves])
        key = tuple(map(id, routes))
        cached = self._phase_cells.get(key)
        if cached is None or cached[0] != routes:
            if len(self._phase_cells) >= 4096:  # messages with links of their own
                self._phase_cells.clear()
            cached = self._phase_cells[key] = (routes, {})
        cells = cached[1]
        for device in devices:
            host = device.host
            if host not in cells:
                cells[host] = links_on([link for route in routes for link in route], host)
            self.recorder.event(
                start_s, self.env.now, host, device.name, "comm", nbytes, step, detail, cells[host]
            )

    def join(self, moves: Sequence[Transfer]) -> simpy.Event:
        """An event that fires when every move is done, as ``env.all_of`` of their ``done``.

        Scheduled in the same step as ``all_of`` would be (the one processing the last
        ``done``), so simultaneous events keep their order; it skips the condition's
        bookkeeping, which nobody reads here, and when nothing else listens to the
        moves it counts them as they arrive (:class:`~simdist.network.transfer.Countdown`),
        which saves a SimPy step per move but the last.
        """
        joined = self.env.event()
        pending = [move for move in moves if move.done.callbacks is not None]
        remaining = len(pending)  # a processed ``done`` (callbacks None) has arrived already
        if remaining == 0:
            return joined.succeed()
        countdown = Countdown(joined, remaining)
        # Counted all at arrival or all at their ``done``: a mix would misplace the last.
        for move in pending:
            if move.countdown is not None or move.done.callbacks:
                break
        else:
            for move in pending:
                move.countdown = countdown
            return joined
        for move in pending:
            move.done.callbacks.append(countdown.count)
        return joined

    # -- collectives ---------------------------------------------------------

    def collective_s(self, op: str, devices: Sequence[Device], nbytes: float, algo: str) -> float:
        """Closed-form seconds of collective ``op`` over ``devices`` (no queueing)."""
        return self.topology.collective(op, devices, nbytes, algo)[0]

    def collective_links(
        self, op: str, devices: Sequence[Device], nbytes: float, algo: str
    ) -> list[Link]:
        """The links collective ``op`` over ``devices`` holds."""
        return self.topology.collective(op, devices, nbytes, algo)[1]

    def collective(
        self,
        op: str,
        devices: Sequence[Device],
        nbytes: float,
        algo: str | None = None,
        *,
        step: int,
        detail: str | None = None,
        copies: Sequence[Sequence[Device]] | None = None,
    ) -> simpy.Process:
        """Start collective ``op`` over ``devices``: ``allreduce``, ``reduce_scatter`` (each
        keeps nbytes / n of the sum: ZeRO's gradient sharding), ``all_gather`` (nbytes in all
        from nbytes / n on each: FSDP's parameters), ``all_to_all`` (each sends nbytes / n to
        every other: mixture-of-experts tokens), ``broadcast`` from ``devices[0]`` or
        ``reduce`` onto it, with ``algo`` (default: :data:`DEFAULT_ALGORITHMS`). The event's
        value is ``(start_s, end_s)``; the rows are labelled ``detail`` (default: the op and
        its algorithm).

        ``copies``: device lists that run the same collective at the same instants on links
        of their own (lock-step copies, :mod:`simdist.network.lockstep`): their rows are
        recorded with ``devices``' (the same interval, each device on its own host's
        links), and nothing of theirs is simulated. Pass the same list objects each time
        (``devices`` too): the rows' columns are worked out once per pair of lists, an
        empty ``copies`` included.
        """
        algo = DEFAULT_ALGORITHMS[op] if algo is None else algo
        # A strategy all-reduces the same bytes over the same device list step after step:
        # the closed form and the bytes per link are pure functions of these, worked out once
        # for that list (kept alive here, so its identity names it). This is the one cache
        # per device list; the topology keeps the shares per device names for other lists.
        key = (op, algo, nbytes, id(devices))
        cached = self._collectives.get(key)
        if cached is None or cached[0] is not devices:
            seconds, links = self.topology.collective(op, devices, nbytes, algo)
            # What each held link really carries (telemetry); the time stays the closed form's.
            link_bytes = self.topology.collective_link_bytes(op, devices, nbytes, algo, links)
            if len(self._collectives) >= 4096:  # callers with a new list each time
                self._collectives.clear()
            cached = self._collectives[key] = (devices, seconds, links, link_bytes)
        _, seconds, links, link_bytes = cached
        label = detail if detail is not None else f"{_LABELS[op]} {algo}"
        rows = None if copies is None else self._copy_rows(op, devices, nbytes, algo, links, copies)
        return self.env.process(
            self._hold(devices, links, seconds, nbytes, step, label, link_bytes, rows)
        )

    def _copy_rows(
        self,
        op: str,
        devices: Sequence[Device],
        nbytes: float,
        algo: str,
        links: list[Link],
        copies: Sequence[Sequence[Device]],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ``host``, ``device`` and ``links`` columns of a collective's rows on
        ``devices`` and then each of ``copies`` (each on its own collective's links), once
        per (``devices``, ``copies``) pair of lists, which the cache keeps alive."""
        key = (op, algo, nbytes, id(devices), id(copies))
        cached = self._copies.get(key)
        if cached is None or cached[0] is not devices or cached[1] is not copies:
            import numpy as np

            groups = [(devices, links)]
            groups += [(g, self.collective_links(op, g, nbytes, algo)) for g in copies]
            everyone = [x for group, _ in groups for x in group]
            hosts, names = self.recorder.device_columns(everyone)
            cells = np.empty(len(everyone), dtype=object)
            column = []
            for group, held in groups:  # each group's rows name its own links
                by_host = {x.host: links_on(held, x.host) for x in group}
                column += [by_host[x.host] for x in group]
            cells[:] = column
            if len(self._copies) >= 4096:
                self._copies.clear()
            cached = self._copies[key] = (devices, copies, (hosts.copy(), names.copy(), cells))
        return cached[2]

    def _hold(
        self,
        devices: Sequence[Device],
        links: list[Link],
        seconds: float,
        nbytes: float,
        step: int,
        detail: str,
        link_bytes: Sequence[float] | None = None,
        rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> Generator[simpy.Event, object, tuple[float, float]]:
        if seconds < 0:
            raise ValueError(f"cannot hold links for a negative time: {seconds}")
        # A strategy holds the same links step after step: their acquisition order and the
        # rows' link cells are worked out once per set of links (the topology's links
        # live as long as the run, so their ids identify them), not per call.
        key = tuple(map(id, links))
        cached = self._holds.get(key)
        if cached is None:
            held = ordered(links)
            index = {id(link): i for i, link in enumerate(links)}
            cached = self._holds[key] = (held, [index[id(link)] for link in held], {})
        held, order, cells = cached
        per_link = None if link_bytes is None else [link_bytes[i] for i in order]
        start, end = yield from hold_ordered(self.env, held, seconds, per_link)
        if rows is not None:  # with lock-step copies: their columns, worked out once
            hosts, names, cells_column = rows
            self.recorder.events(
                start, end, hosts, names, "comm", nbytes, step, detail, cells_column
            )
            return start, end
        hosts, names = self.recorder.device_columns(devices)
        column = cells.get(id(hosts))  # the recorder keeps ``hosts`` as long as it is cached
        if column is None or column[0] is not hosts:
            if len(cells) >= 64:
                cells.clear()
            by_host = {host: links_on(links, host) for host in dict.fromkeys(hosts)}
            column = cells[id(hosts)] = (hosts, hosts.copy())
            column[1][:] = [by_host[host] for host in hosts]
        self.recorder.events(start, end, hosts, names, "comm", nbytes, step, detail, column[1])
        return start, end


#: The algorithm of each collective when the caller names none.
DEFAULT_ALGORITHMS = {
    "allreduce": "ring",
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "all_gather": "ring",
    "broadcast": "tree",
    "reduce": "tree",
    "all_to_all": "pairwise",
}

_LABELS = {
    "allreduce": "all-reduce",
    "all_reduce": "all-reduce",
    "reduce_scatter": "reduce-scatter",
    "all_gather": "all-gather",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "all_to_all": "all-to-all",
}
