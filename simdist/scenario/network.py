"""The network half of the ``cluster:`` section: link figures and ``cluster.network``.

``links:`` gives each kind of link its bandwidth and latency (intra-host, network); the
``network:`` section chooses the topology, the sharing model and the transport protocol
with its overrides (:mod:`simdist.network.transport` holds the presets). Units are
converted here, at loading, as everywhere in the scenario schema.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from simdist.spec import (
    Bandwidth,
    Float,
    Latency,
    PositiveInt,
    Spec,
    fail,
    show,
)

__all__ = ["IntraHostLinkSpec", "LinkSpec", "LinksSpec", "NetworkLinkSpec", "NetworkSpec"]


class LinkSpec(Spec):
    """One kind of link: alpha-beta cost ``latency_s + nbytes / bandwidth_Bps``."""

    bandwidth_Bps: Bandwidth = Field(alias="bandwidth")
    latency_s: Latency = Field(alias="latency")


class IntraHostLinkSpec(LinkSpec):
    """PCIe / NVLink inside a host; defaults to 300GB/s and 2us."""

    bandwidth_Bps: Bandwidth = Field(300e9, alias="bandwidth")
    latency_s: Latency = Field(2e-6, alias="latency")


class NetworkLinkSpec(LinkSpec):
    """Each host's NIC; defaults to 10Gbit/s and 50us."""

    bandwidth_Bps: Bandwidth = Field(1.25e9, alias="bandwidth")
    latency_s: Latency = Field(50e-6, alias="latency")


class LinksSpec(Spec):
    """The links of every host."""

    intra_host: IntraHostLinkSpec = Field(default_factory=IntraHostLinkSpec)
    network: NetworkLinkSpec = Field(default_factory=NetworkLinkSpec)


def _ratio(value: object) -> object:
    """An oversubscription ratio: a number k, or ``"k:1"`` (``"a:b"`` is a/b); at least 1."""
    eg = "e.g. oversubscription: 4 or oversubscription: '4:1'"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"got {show(value)}; expected a ratio k:1 (k >= 1), {eg}")
    if isinstance(value, str):
        parts = value.strip().split(":")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            numbers = []
        if len(parts) not in (1, 2) or len(numbers) != len(parts) or min(numbers) <= 0:
            raise ValueError(f"got {show(value)}; expected a ratio k:1 (k >= 1), {eg}")
        ratio = numbers[0] / numbers[1] if len(numbers) == 2 else numbers[0]
    else:
        ratio = float(value)
    if not (math.isfinite(ratio) and ratio >= 1):
        raise ValueError(
            f"got {show(value)}; expected a ratio of at least 1:1 (1 is non-blocking: the "
            f"uplinks carry all the rack's hosts can send), {eg}"
        )
    return ratio


class NetworkSpec(Spec):
    """How the hosts are wired and how concurrent traffic shares the wires.

    ``duplex: full`` (default) gives each NIC separate transmit and receive capacity, as
    Ethernet and InfiniBand have; ``half`` is one channel for both ways. ``sharing: fair``
    (default) splits a link's bandwidth max-min fairly among concurrent flows (the
    flow-level model SimGrid validates); ``fifo`` carries one transfer at a time, the
    others wait in line.

    ``topology: switch`` (default) puts every machine on one non-blocking switch;
    ``leaf_spine`` puts ``hosts_per_leaf`` machines behind each leaf, whose uplink to the
    spine carries ``hosts_per_leaf`` × NIC bandwidth / ``oversubscription`` (k:1, default
    1, a number or ``"4:1"``), and adds ``hop_latency`` (default 0) per switch hop: 1 in a
    rack, 3 across racks. ``intra_host``: ``shared`` (default, one intra-host link per
    host), ``nvlink`` (a port per GPU at ``links.intra_host``'s bandwidth) or ``pcie``
    (a PCIe link per device, one ``pcie_uplink`` shared to the CPU and the NIC); see
    :mod:`simdist.network.leaf_spine` and :mod:`simdist.network.intranode`.

    ``protocol`` prices point-to-point messages (parameter-server pulls and pushes,
    pipeline activations) and the inter-host steps of collectives: ``ideal`` (default: the
    bare wire), ``tcp``, ``rdma`` or ``grpc`` presets, or NCCL's names ``nccl-socket`` (=
    ``tcp``) and ``nccl-ib`` (= ``rdma``) (:data:`simdist.network.transport.PROTOCOLS`,
    with their sources), and each figure may be given instead of the preset's:
    ``efficiency`` (share of line rate carrying payload), ``per_message_overhead`` (a
    duration per message), ``serialization_bandwidth`` (bytes per second a host's CPU
    encodes, and decodes, a message at; the sender encodes before the wire, the receiver
    decodes after), ``collective_efficiency`` (share of line rate a collective's
    inter-host step streams at, nccl-tests busbw / line rate) and ``collective_step`` (a
    duration added to each inter-host step of a collective).
    """

    topology: Literal["switch", "leaf_spine"] = Field("switch", examples=["leaf_spine"])
    duplex: Literal["full", "half"] = "full"
    sharing: Literal["fair", "fifo"] = "fair"
    # leaf_spine only (simdist.network.leaf_spine): machines per leaf (rack), the leaf's
    # host-facing over spine-facing bandwidth (k:1), the latency of one switch hop.
    hosts_per_leaf: PositiveInt | None = Field(None, examples=[4])
    oversubscription: Annotated[float, BeforeValidator(_ratio)] | None = Field(
        None, examples=["4:1"]
    )
    hop_latency_s: Latency | None = Field(None, alias="hop_latency", examples=["1us"])
    # Inside each host (simdist.network.intranode): one shared link, NVLink ports, or a
    # PCIe switch whose uplink (pcie_uplink, default PCIe 3.0 x16) the devices share.
    intra_host: Literal["shared", "nvlink", "pcie"] = Field("shared", examples=["nvlink"])
    pcie_uplink_Bps: Bandwidth | None = Field(None, alias="pcie_uplink", examples=["15.75GB/s"])
    protocol: Literal["ideal", "tcp", "rdma", "grpc", "nccl-socket", "nccl-ib"] = Field(
        "ideal", examples=["nccl-ib"]
    )
    efficiency: Float | None = Field(None, gt=0, le=1, examples=[0.9])
    per_message_overhead_s: Latency | None = Field(
        None, alias="per_message_overhead", examples=["100us"]
    )
    serialization_Bps: Bandwidth | None = Field(
        None, alias="serialization_bandwidth", examples=["1.6GB/s"]
    )
    collective_efficiency: Float | None = Field(None, gt=0, le=1, examples=[0.96])
    collective_step_s: Latency | None = Field(None, alias="collective_step", examples=["14us"])

    @model_validator(mode="after")
    def _topology_fields(self) -> NetworkSpec:
        if self.topology != "leaf_spine":
            for field in ("hosts_per_leaf", "oversubscription", "hop_latency_s"):
                if getattr(self, field) is not None:  # null (e.g. from --set) clears it
                    key = NetworkSpec.model_fields[field].alias or field
                    raise fail(
                        key,
                        f"only used by topology: leaf_spine (topology here is "
                        f"{self.topology}); remove {key}, or set topology: leaf_spine",
                    )
        else:
            if self.hosts_per_leaf is None:
                raise fail(
                    "hosts_per_leaf",
                    "missing; topology leaf_spine needs the machines per leaf (rack), "
                    "e.g. hosts_per_leaf: 4",
                )
            if self.oversubscription is None:
                self.oversubscription = 1.0
            if self.hop_latency_s is None:
                self.hop_latency_s = 0.0
        if self.intra_host == "shared" and self.pcie_uplink_Bps is not None:
            raise fail(
                "pcie_uplink",
                "only used by intra_host: pcie or nvlink (intra_host here is shared); "
                "remove pcie_uplink, or set intra_host: pcie",
            )
        return self
