"""Transport protocols: what a point-to-point message costs beyond the bare wire.

A link's ``bandwidth`` is its line rate. The software that moves a message pays
more than ``nbytes / bandwidth``: framing headers take part of the line rate, every
message costs a fixed software time, and some stacks copy and encode the payload on
the sending host's CPU and decode it on the receiving host's. A :class:`Protocol`
holds the three figures and :class:`Transport` applies them to ``Network.send``:

* ``efficiency``: the share of line rate that carries payload (goodput / line rate).
  The message puts ``nbytes / efficiency`` bytes on the wire, so alone it streams for
  ``nbytes / (efficiency · B)`` and concurrent flows share the links as usual;
* ``per_message_overhead_s``: a fixed delay paid once per message after the bytes
  arrived (RPC dispatch, completion handling); it occupies no link, so messages
  queued behind one another overlap it with their own transmission;
* ``serialization_Bps``: bytes per second one host's CPU encodes (or decodes) at.
  The sender's CPU encodes the whole message before it goes on the wire and the
  receiver's decodes it after it arrived (protobuf serialises and parses whole
  messages; socket-based transports copy between application and network buffers,
  which Yi et al. 2017, "Towards Zero Copy Dataflows using RDMA", SIGCOMM posters,
  found a non-trivial cost in TensorFlow: their zero-copy transport ran 2.43x
  faster than gRPC), so the costs add up instead of overlapping.

A lone message between two machines therefore takes::

    nbytes/S  +  sum(latency) + nbytes/(efficiency·B)  +  overhead  +  nbytes/S

Each machine's CPU is one link, ``<machine>/cpu``, of bandwidth ``S``, shared by
every message the machine encodes or decodes (both directions), under the network's
sharing model: with ``fair`` two messages encoding at once on one host each take
twice as long; with ``fifo`` the second waits. Modelling the CPU as a link keeps the
contention deterministic and visible (link telemetry, timelines) with no new
mechanism; keeping its stages before and after the wire, rather than in the wire's
route, keeps the published *additive* cost of a copy-then-send stack (a route's
links stream together, which would hide the copy behind the wire).

Where it applies: messages between two machines pay the whole protocol. Messages
between two tasks of one machine (a worker and the parameter server co-located on
it) go through the loopback: CPU and per-message costs, but no wire framing, over
the machine's intra-host route. Messages between a device and its own host, or two
devices of one host, are DMA copies over PCIe / NVLink: no protocol. Collectives
(NCCL-style all-reduce, broadcast) never go through here: NCCL moves raw buffers in
pipelined chunks with its own transport, and the closed forms of
:mod:`simdist.collectives` already are its α–β cost; to derate them, set the link's
bandwidth to the measured bus bandwidth (``nccl-tests`` ``busbw``).

``ideal`` (efficiency 1, no overhead, no CPU cost) is the default and is exactly the
bare :class:`~simdist.network.transfer.Transfer` of earlier versions: existing reports
do not change.

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from simdist.network.link import Link
from simdist.network.transfer import Countdown, Transfer, arrive

if TYPE_CHECKING:
    import simpy

    from simdist.scenario.cluster import NetworkSpec

# TCP/IPv4 over Ethernet with a 1500-byte MTU: a 1460-byte segment travels in a
# 1538-byte frame (+38: Ethernet header, FCS, preamble, inter-frame gap; +40: IP and
# TCP headers). RFC 6349 ("Framework for TCP Throughput Testing", 2011, §3.3.1)
# derives the maximum achievable TCP throughput this way: 949 Mbit/s on 1 GigE.
_TCP_EFFICIENCY = 1460 / 1538
# gRPC rides on HTTP/2, whose DATA frames carry up to 16,384 bytes (the default
# SETTINGS_MAX_FRAME_SIZE) behind a 9-byte frame header (RFC 7540 §4.1, §6.5.2).
_HTTP2_EFFICIENCY = 16384 / (16384 + 9)


@dataclass(frozen=True)
class Protocol:
    """A transport's cost figures (see the module docstring) and where they come from."""

    name: str
    efficiency: float = 1.0  # payload share of line rate, in (0, 1]
    per_message_overhead_s: float = 0.0
    serialization_Bps: float | None = None  # None: no CPU cost
    source: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")
        if self.per_message_overhead_s < 0:
            raise ValueError(
                f"per_message_overhead_s must be >= 0, got {self.per_message_overhead_s}"
            )
        if self.serialization_Bps is not None and not self.serialization_Bps > 0:
            raise ValueError(f"serialization_Bps must be > 0, got {self.serialization_Bps}")

    @property
    def ideal(self) -> bool:
        """Whether a message costs exactly the bare wire (no protocol at all)."""
        return (
            self.efficiency == 1.0
            and self.per_message_overhead_s == 0.0
            and self.serialization_Bps is None
        )

    @property
    def cpu_s_per_byte(self) -> float:
        """CPU seconds per byte to encode (or to decode) on one host; 0 without CPU cost."""
        return 0.0 if self.serialization_Bps is None else 1.0 / self.serialization_Bps

    def alone_s(self, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
        """A lone message's time between two machines: encode, wire, overhead, decode."""
        cpu = 0.0 if self.serialization_Bps is None else nbytes / self.serialization_Bps
        wire = latency_s + (nbytes / self.efficiency) / bandwidth_Bps
        return cpu + wire + self.per_message_overhead_s + cpu


#: The presets ``cluster.network.protocol`` names. Each figure cites its source; the
#: ones marked "assumed" had no published measurement to take, and say why the value.
PROTOCOLS: dict[str, Protocol] = {
    "ideal": Protocol(
        "ideal",
        source="the bare wire: line rate, no per-message or CPU cost (simdist's default)",
    ),
    "tcp": Protocol(
        "tcp",
        efficiency=_TCP_EFFICIENCY,
        per_message_overhead_s=15e-6,
        source=(
            "efficiency 1460/1538 = 0.949: TCP/IPv4 payload per 1500-byte-MTU Ethernet "
            "frame, RFC 6349 §3.3.1 (949 Mbit/s on 1 GigE); per-message 15 us, assumed: "
            "the kernel socket path's cost over RDMA's, as the 25-40 us NVMe/TCP vs "
            "10-20 us NVMe/RDMA latencies show; no CPU term: the kernel's copies stream "
            "with the wire (NVMe/TCP reaches ~95% of wire speed)"
        ),
    ),
    "rdma": Protocol(
        "rdma",
        efficiency=0.97,
        per_message_overhead_s=0.0,
        source=(
            "efficiency 0.97: ib_send_bw reaches ~97 Gbit/s on 100 Gbit/s ConnectX-4 with "
            "64 KiB messages (Mellanox community measurement; NVMe/RDMA ~98% of wire "
            "speed); no per-message or CPU cost: kernel bypass and zero copy, the verbs "
            "latency (1-2 us per hop, e.g. 1.76 us MPI latency on QLogic InfiniBand) is "
            "the link's own latency"
        ),
    ),
    "grpc": Protocol(
        "grpc",
        efficiency=_TCP_EFFICIENCY * _HTTP2_EFFICIENCY,
        per_message_overhead_s=100e-6,
        serialization_Bps=1.6e9,
        source=(
            "efficiency: TCP's 0.949 x HTTP/2 DATA framing 16384/16393 (RFC 7540); "
            "serialisation 1.6 GB/s per host for each of encode and decode: grpc-go's "
            "codec benchmark encodes a 1 MiB message at 1,647 MB/s (grpc-go "
            "test/codec_perf); per-message 100 us, assumed: TCP's 15 us plus RPC "
            "dispatch and HTTP/2 stream handling, of the order gRPC adds over a plain "
            "RPC stack (grpc-io list: gRPC-go 0.82 ms vs Go net/rpc 0.26 ms mean latency "
            "under the same load). Together they reproduce the published gap: RDMA "
            "verbs 6x faster than gRPC in distributed TensorFlow (Jia et al. 2017, Int. "
            "J. Parallel Prog. 46(4)), AR-gRPC up to 4.1x over gRPC on IPoIB (Biswas, "
            "Lu & Panda, HiPC 2018), and standard distributed TensorFlow losing about "
            "half of 128 GPUs to communication where Horovod's ring keeps 88% (Sergeev "
            "& Del Balso 2018, Figs. 1 and 6)"
        ),
    ),
}


def protocol_of(network: NetworkSpec) -> Protocol:
    """The protocol a ``cluster.network`` section asks for: a preset, then its overrides.

    ``protocol`` names the preset; ``efficiency``, ``per_message_overhead_s`` and
    ``serialization_Bps``, when given (not ``None``), replace the preset's figure.
    """
    preset = PROTOCOLS[network.protocol]
    given = {
        "efficiency": network.efficiency,
        "per_message_overhead_s": network.per_message_overhead_s,
        "serialization_Bps": network.serialization_Bps,
    }
    changes = {field: float(value) for field, value in given.items() if value is not None}
    if not changes:
        return preset
    return replace(preset, source=f"{preset.source}; overridden by the scenario", **changes)


class Message:
    """One message under a non-ideal protocol: encode, wire, overhead, decode, in turn.

    Each stage is a :class:`Transfer` (the CPU stages on a one-link route, the
    machine's CPU link), so stages contend and queue like any message. The same
    surface as a :class:`Transfer` for ``Network`` and the strategies: ``done`` fires
    with ``(start_s, arrival_s)``, ``on_arrival(start_s, arrival_s)`` runs at the
    arrival, ``links`` are every link it occupies, :meth:`cancel` cuts it.
    ``start_s`` is when its first stage started (after any queueing), ``wire_start_s``
    and ``sent_s`` when its bytes started and finished leaving the sender's NIC.
    """

    __slots__ = (
        "_current",
        "_on_arrival",
        "_stages",
        "countdown",
        "done",
        "env",
        "links",
        "nbytes",
        "sent_s",
        "start_s",
        "state",
        "wire_start_s",
    )

    def __init__(
        self,
        env: simpy.Environment,
        stages: Sequence[tuple[str, Any]],
        nbytes: float,
        on_arrival: Callable[[float, float], None] | None = None,
        done: simpy.Event | None = None,
    ) -> None:
        self.env = env
        self.nbytes = nbytes
        self.done = env.event() if done is None else done
        self.countdown: Countdown | None = None  # what waits for it with others, if any
        self.start_s: float | None = None
        self.wire_start_s: float | None = None
        self.sent_s: float | None = None
        self.state = "queued"  # queued → moving → arrived | cancelled
        self._on_arrival = on_arrival
        # ("cpu" | "wire", (links, bytes)) or ("delay", seconds), run in order
        self._stages = list(stages)
        self.links: list[Link] = []
        for kind, payload in self._stages:
            if kind != "delay":
                self.links.extend(link for link in payload[0] if link not in self.links)
        self._current: Transfer | simpy.Event | None = None
        self._next(0)

    def _next(self, i: int) -> None:
        if self.state == "cancelled":
            return
        if i == len(self._stages):
            self.state = "arrived"
            assert self.start_s is not None
            if self._on_arrival is not None:
                self._on_arrival(self.start_s, self.env.now)
            arrive(self.done, (self.start_s, self.env.now), self.countdown)
            return
        kind, payload = self._stages[i]
        if kind == "delay":
            if self.start_s is None:
                self.start_s = self.env.now
            timer = self.env.timeout(payload)
            timer.callbacks.append(lambda _: self._next(i + 1))
            self._current = timer
            return
        links, nbytes = payload

        def finished(start: float, _arrival: float) -> None:
            if self.start_s is None:
                self.start_s = start
            if kind == "wire":
                self.wire_start_s, self.sent_s = start, stage.sent_s
            self._next(i + 1)

        stage = Transfer(self.env, links, nbytes, finished)
        self._current = stage
        if self.state == "queued":
            self.state = "moving"

    def span(self, sender: bool) -> tuple[float, float]:
        """The interval a device-less end point (a PS task) is busy with this message:
        the sender from its encode to the end of its NIC's transmission, the receiver
        from the first byte on the wire to the end of its decode (now, at arrival)."""
        assert self.start_s is not None and self.wire_start_s is not None
        assert self.sent_s is not None
        if sender:
            return self.start_s, self.sent_s
        return self.wire_start_s, self.env.now

    def cancel(self) -> None:
        """Cut the message (a failure): its current stage stops; it never arrives."""
        if self.state in ("arrived", "cancelled"):
            return
        self.state = "cancelled"
        if isinstance(self._current, Transfer):
            self._current.cancel()


class Transport:
    """Applies a :class:`Protocol` to point-to-point messages; owns each machine's CPU link."""

    def __init__(self, env: simpy.Environment, protocol: Protocol) -> None:
        self.env = env
        self.protocol = protocol
        #: ``<machine>/cpu`` links, made on a machine's first message (machine → link).
        self.cpu: dict[str, Link] = {}

    def cpu_link(self, machine: str, sharing: str) -> Link:
        """Machine ``machine``'s CPU as a link of the serialisation bandwidth."""
        link = self.cpu.get(machine)
        if link is None:
            assert self.protocol.serialization_Bps is not None
            link = self.cpu[machine] = Link(
                self.env,
                f"{machine}/cpu",
                0.0,
                self.protocol.serialization_Bps,
                machine,
                sharing=sharing,
            )
        return link

    def send(
        self,
        route: Sequence[Link],
        nbytes: float,
        on_arrival: Callable[[float, float], None] | None,
        *,
        machines: tuple[str, str],
        mode: str,
        done: simpy.Event | None = None,
    ) -> Transfer | Message:
        """Start a message along ``route`` between ``machines`` (sender, receiver).

        ``mode``: ``network`` (two machines: the whole protocol), ``loopback`` (two
        tasks of one machine: CPU and per-message costs, no wire framing) or ``dma``
        (a device and its host: no protocol, a bare :class:`Transfer`). ``done``: the
        event the message triggers on arrival (default: a new one).
        """
        p = self.protocol
        if p.ideal or mode == "dma":
            return Transfer(self.env, route, nbytes, on_arrival, done=done)
        wire_bytes = nbytes if mode == "loopback" else nbytes / p.efficiency
        stages: list[tuple[str, Any]] = []
        sharing = route[0].sharing
        if p.serialization_Bps is not None:
            stages.append(("cpu", ([self.cpu_link(machines[0], sharing)], nbytes)))
        stages.append(("wire", (route, wire_bytes)))
        if p.per_message_overhead_s > 0:
            stages.append(("delay", p.per_message_overhead_s))
        if p.serialization_Bps is not None:
            stages.append(("cpu", ([self.cpu_link(machines[1], sharing)], nbytes)))
        if len(stages) == 1:  # efficiency alone: one transfer of the framed bytes
            return Transfer(self.env, route, wire_bytes, on_arrival, done=done)
        return Message(self.env, stages, nbytes, on_arrival, done)
