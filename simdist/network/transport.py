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
devices of one host, are DMA copies over PCIe / NVLink: no protocol.

Collectives (NCCL-style all-reduce, broadcast, …) move raw buffers in pipelined chunks
through NCCL's own network transport, so a protocol prices them with two figures of
their own, on every step that crosses an inter-host link (a NIC, a leaf's uplink) and
on no other: intra-host stages (NVLink, PCIe, the shared intra-host link) stay as they
are.

* ``collective_efficiency``: the share of line rate NCCL's transport sustains, the
  nccl-tests ``busbw`` of a large all-reduce over the link's line rate (busbw is the
  per-link rate a ring would need for that time: nccl-tests doc/PERFORMANCE.md), so an
  inter-host step streams at ``collective_efficiency · B``;
* ``collective_step_s``: a fixed cost per step of the collective that crosses hosts,
  added to the link's α: NCCL's proxy thread posts each chunk and polls its completion
  before the next step may start.

The closed forms of :mod:`simdist.collectives` then price the collective with that
(α, B) on its inter-host scope, the same algebra as before (:meth:`Protocol.
collective_link`). NCCL's figures do not depend on the algorithm: its own tuning model
(``src/graph/tuning.cc``) gives every inter-node ring step the same latency and the
transport one bus bandwidth.

Names. ``tcp`` and ``rdma`` name the wire's stack; NCCL calls its transports over the
same stacks NET/Socket and NET/IB (with GPUDirect RDMA as an option of NET/IB), so
``nccl-socket`` is another name for ``tcp`` and ``nccl-ib`` for ``rdma``
(:data:`ALIASES`): one stack, one set of figures, whichever of the two layers a scenario
names. A ``grpc`` network is TCP underneath: its collectives run over NCCL's socket
transport, with ``tcp``'s collective figures. GPUDirect RDMA against staging through host
memory is not a transport figure: where the NIC sits relative to the GPUs is the
intra-host fabric's (``cluster.network.intra_host: pcie`` routes a GPU's bytes to the
NIC through the shared PCIe uplink).

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

# Collectives (NCCL's network transports). Each share is one published nccl-tests busbw
# of a large ring all-reduce over the line rate it ran on (the calibration); the
# validation table (benchmarks/validation/collectives.py) predicts other clusters with it.
# NET/IB: "12 GB/s for 100G NICs", 24 GB/s per 200G NIC, is the peak NCCL's maintainers
# expect of a large all-reduce over InfiniBand (S. Jeaugey, NVIDIA/nccl-tests issue #119,
# 2022): 12 / 12.5 GB/s of line rate.
_NCCL_IB_SHARE = 12.0 / 12.5
# NET/Socket: 2.06 GB/s busbw on a 32 Gbit/s (4 GB/s) TCP network, NCCL 2.3.7 with one ring
# (C. Winter, NVIDIA/nccl issue #209, 2019: "not more than 60% of wire speed" over 32 Gbit/s
# with NCCL's defaults). One ring is one socket, served by NCCL's proxy thread copying
# through host memory; NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (no helper thread by
# default; 2 x 8 on AWS NICs, 4 x 1 on GCP's: src/transport/net_socket.cc) opens more.
_NCCL_SOCKET_SHARE = 2.06 / 4.0
# NCCL's own cost model gives every ring step between nodes (Simple protocol, the one
# large buffers use: NCCL_BUFFSIZE 4 MiB in NCCL_STEPS = 8 slots of 512 KiB) 14 us,
# whatever the transport: hwLat[NET][Ring][Simple] in src/graph/tuning.cc (NCCL 2.7 had 9.6).
_NCCL_NET_STEP_S = 14e-6
# The kernel socket path's per-message cost over RDMA's, as ``tcp`` messages pay it.
_SOCKET_MESSAGE_S = 15e-6


@dataclass(frozen=True)
class Protocol:
    """A transport's cost figures (see the module docstring) and where they come from."""

    name: str
    efficiency: float = 1.0  # payload share of line rate, in (0, 1]
    per_message_overhead_s: float = 0.0
    serialization_Bps: float | None = None  # None: no CPU cost
    collective_efficiency: float = 1.0  # share of line rate a collective's step reaches
    collective_step_s: float = 0.0  # added to α per collective step across hosts
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
        if not 0 < self.collective_efficiency <= 1:
            raise ValueError(
                f"collective_efficiency must be in (0, 1], got {self.collective_efficiency}"
            )
        if self.collective_step_s < 0:
            raise ValueError(f"collective_step_s must be >= 0, got {self.collective_step_s}")

    @property
    def ideal(self) -> bool:
        """Whether a message costs exactly the bare wire (no protocol at all)."""
        return (
            self.efficiency == 1.0
            and self.per_message_overhead_s == 0.0
            and self.serialization_Bps is None
        )

    @property
    def ideal_collectives(self) -> bool:
        """Whether a collective's step across hosts sees the bare link (no step cost, no
        derating): then the topologies price collectives exactly as without a protocol."""
        return self.collective_efficiency == 1.0 and self.collective_step_s == 0.0

    def collective_link(self, latency_s: float, bandwidth_Bps: float) -> tuple[float, float]:
        """The (α, B) a collective's step sees on an inter-host link of (α, B) = (``latency_s``,
        ``bandwidth_Bps``): the step cost added, the bandwidth derated (module docstring)."""
        return latency_s + self.collective_step_s, bandwidth_Bps * self.collective_efficiency

    @property
    def cpu_s_per_byte(self) -> float:
        """CPU seconds per byte to encode (or to decode) on one host; 0 without CPU cost."""
        return 0.0 if self.serialization_Bps is None else 1.0 / self.serialization_Bps

    def alone_s(self, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
        """A lone message's time between two machines: encode, wire, overhead, decode."""
        cpu = 0.0 if self.serialization_Bps is None else nbytes / self.serialization_Bps
        wire = latency_s + (nbytes / self.efficiency) / bandwidth_Bps
        return cpu + wire + self.per_message_overhead_s + cpu


#: Where ``tcp``'s (and ``grpc``'s) collective figures come from.
_SOCKET_COLLECTIVES = (
    "share 2.06/4.0 = 0.515: nccl-tests busbw 2.06 GB/s on 32 Gbit/s TCP, NCCL 2.3.7, one "
    "ring (NVIDIA/nccl#209, 2019: 'not more than 60% of wire speed'); per step 29 us: NCCL's "
    "14 us per inter-node ring step (hwLat NET/Ring/Simple, src/graph/tuning.cc) plus the "
    "socket path's 15 us per message"
)

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
        per_message_overhead_s=_SOCKET_MESSAGE_S,
        collective_efficiency=_NCCL_SOCKET_SHARE,
        collective_step_s=_NCCL_NET_STEP_S + _SOCKET_MESSAGE_S,
        source=(
            "efficiency 1460/1538 = 0.949: TCP/IPv4 payload per 1500-byte-MTU Ethernet "
            "frame, RFC 6349 §3.3.1 (949 Mbit/s on 1 GigE); per-message 15 us, assumed: "
            "the kernel socket path's cost over RDMA's, as the 25-40 us NVMe/TCP vs "
            "10-20 us NVMe/RDMA latencies show; no CPU term: the kernel's copies stream "
            "with the wire (NVMe/TCP reaches ~95% of wire speed). "
            f"Collectives (NCCL NET/Socket): {_SOCKET_COLLECTIVES}"
        ),
    ),
    "rdma": Protocol(
        "rdma",
        efficiency=0.97,
        per_message_overhead_s=0.0,
        collective_efficiency=_NCCL_IB_SHARE,
        collective_step_s=_NCCL_NET_STEP_S,
        source=(
            "efficiency 0.97: ib_send_bw reaches ~97 Gbit/s on 100 Gbit/s ConnectX-4 with "
            "64 KiB messages (Mellanox community measurement; NVMe/RDMA ~98% of wire "
            "speed); no per-message or CPU cost: kernel bypass and zero copy, the verbs "
            "latency (1-2 us per hop, e.g. 1.76 us MPI latency on QLogic InfiniBand) is "
            "the link's own latency. Collectives (NCCL NET/IB): share 12/12.5 = 0.96: "
            "12 GB/s nccl-tests busbw per 100 Gbit/s NIC (24 GB/s per 200G), the peak "
            "NCCL's maintainers expect (NVIDIA/nccl-tests#119; 12.2 GB/s 'as good as you "
            "can get', nccl-tests#29); per step 14 us: NCCL's cost model for an inter-node "
            "ring step (hwLat NET/Ring/Simple, src/graph/tuning.cc)"
        ),
    ),
    "grpc": Protocol(
        "grpc",
        efficiency=_TCP_EFFICIENCY * _HTTP2_EFFICIENCY,
        per_message_overhead_s=100e-6,
        serialization_Bps=1.6e9,
        collective_efficiency=_NCCL_SOCKET_SHARE,
        collective_step_s=_NCCL_NET_STEP_S + _SOCKET_MESSAGE_S,
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
            "& Del Balso 2018, Figs. 1 and 6). Collectives: a gRPC network is TCP "
            f"underneath, so NCCL runs over its socket transport: {_SOCKET_COLLECTIVES}"
        ),
    ),
}


#: NCCL's names for its network transports → the preset of the stack they run on.
ALIASES: dict[str, str] = {"nccl-socket": "tcp", "nccl-ib": "rdma"}

#: Every name ``cluster.network.protocol`` and ``simdist collectives --protocol`` take.
PROTOCOL_NAMES: tuple[str, ...] = (*PROTOCOLS, *ALIASES)


def protocol_named(name: str) -> Protocol:
    """The preset ``name`` (or an alias of one: :data:`ALIASES`) stands for."""
    return PROTOCOLS[ALIASES.get(name, name)]


def protocol_of(network: NetworkSpec) -> Protocol:
    """The protocol a ``cluster.network`` section asks for: a preset, then its overrides.

    ``protocol`` names the preset (or an alias of one); ``efficiency``,
    ``per_message_overhead_s``, ``serialization_Bps``, ``collective_efficiency`` and
    ``collective_step_s``, when given (not ``None``), replace the preset's figure.
    """
    preset = protocol_named(network.protocol)
    given = {
        "efficiency": network.efficiency,
        "per_message_overhead_s": network.per_message_overhead_s,
        "serialization_Bps": network.serialization_Bps,
        "collective_efficiency": network.collective_efficiency,
        "collective_step_s": network.collective_step_s,
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
