"""Inside one machine: how its devices, its CPU and its NIC are wired (``intra_host``).

``cluster.network.intra_host`` picks one of three fabrics, built per machine:

* ``shared`` (default): one link, ``<host>/intra`` (the scenario's ``links.intra_host``),
  shared by every device-to-device and device-to-CPU message of the machine, as simdist
  always had. Device-to-NIC traffic crosses nothing inside the host.
* ``nvlink``: every GPU has its own NVLink port, ``<device>/nvlink/tx`` and ``/rx``, each
  with the per-GPU bandwidth of ``links.intra_host``; GPUs talk all-to-all, a message
  leaving through the sender's port and entering through the receiver's. On a DGX-1
  (V100) each GPU has six NVLink 2.0 links of 25 GB/s per direction: 150 GB/s out and
  150 GB/s in, "300 GB/s" of total bandwidth (NVIDIA Tesla V100 GPU architecture
  whitepaper, 2017, "NVLink"; DGX-1 with Tesla V100 system architecture whitepaper,
  2017), so ``links.intra_host: {bandwidth: 150GB/s}`` describes it. The GPUs reach the
  CPU's memory over PCIe (NVLink joins GPUs only on x86 hosts): one shared
  ``<host>/pcie/up`` / ``/down`` pair at the PCIe uplink bandwidth. The NIC sits on the
  GPUs' PCIe switches (GPUDirect RDMA), so device-to-NIC traffic crosses no modelled link.
* ``pcie``: the devices sit under one PCIe switch. Each has its own link to the switch,
  ``<device>/pcie/tx`` and ``/rx`` (``links.intra_host``, e.g. 15.75GB/s for a x16 Gen3
  slot), and the switch reaches the host's root complex through one shared uplink,
  ``<host>/pcie/up`` and ``/down`` (``cluster.network.pcie_uplink``, default
  :data:`PCIE3_X16_Bps`). The NIC and the CPU's memory hang off the root complex, so a
  device's message to another host crosses its own PCIe link, the shared uplink, then
  the NIC; peer-to-peer messages between two devices go through the switch (the
  sender's link then the receiver's) without touching the uplink.

Every link is full duplex except the shared one (PCIe and NVLink are dual-simplex by
specification). A message inside a machine pays ``links.intra_host.latency`` once: the
links of its route split it (half on each of two ports).

Timing only: nothing here imports JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simdist.hardware.cluster import Device
from simdist.network.bottleneck import Hop
from simdist.network.link import Link, channel_links

if TYPE_CHECKING:
    import simpy

#: The intra-host fabrics ``cluster.network.intra_host`` may name.
INTRA_HOST: tuple[str, ...] = ("shared", "nvlink", "pcie")

#: One PCIe 3.0 x16 link, per direction: 8 GT/s per lane × 16 lanes × 128b/130b encoding
#: / 8 bits = 15.754 GB/s (PCI-SIG, PCI Express Base Specification 3.0, 2010, §4.2.2).
PCIE3_X16_Bps: float = 8e9 * 16 * 128 / 130 / 8


class HostFabric:
    """The links inside one machine and the routes through them (``shared``: one link).

    Routes are lists of :data:`~simdist.network.bottleneck.Hop` (a link and the direction
    the bytes cross it), which :mod:`simdist.network.bottleneck` shares max-min fairly.
    ``ports`` is False for ``shared``, whose one link the closed forms treat as a full
    B per ring edge: collectives price it as one link, never flow by flow.
    """

    mode = "shared"
    ports = False

    def __init__(
        self,
        env: simpy.Environment,
        host: str,
        devices: tuple[Device, ...],
        latency_s: float,
        bandwidth_Bps: float,
        sharing: str,
    ) -> None:
        self.host = host
        self.latency_s = latency_s
        self.bandwidth_Bps = bandwidth_Bps
        self.intra = Link(env, f"{host}/intra", latency_s, bandwidth_Bps, host, sharing=sharing)

    def links(self) -> list[Link]:
        """Every link of this fabric."""
        return [self.intra]

    def between(self, a: Device, b: Device) -> list[Hop]:
        """Device ``a`` to device ``b`` of this machine."""
        return [(self.intra, "both")]

    def to_host(self, device: Device) -> list[Hop]:
        """A device to the machine's CPU memory."""
        return [(self.intra, "both")]

    def from_host(self, device: Device) -> list[Hop]:
        """The machine's CPU memory to a device."""
        return [(self.intra, "both")]

    def host_to_host(self) -> list[Hop]:
        """One task's CPU to another's on this machine (a co-located parameter server)."""
        return [(self.intra, "both")]

    def to_nic(self, device: Device) -> list[Hop]:
        """A device to the machine's NIC (the links before the NIC itself)."""
        return []

    def from_nic(self, device: Device) -> list[Hop]:
        """The machine's NIC to a device (the links after the NIC itself)."""
        return []


class _PortFabric(HostFabric):
    """Devices with a dual-simplex port each (``<device>/<port_kind>/tx|rx``) and the
    host's shared uplink (``<host>/pcie/up|down``) to its CPU; device to device is port
    to port. Subclasses say what a port is and what sits behind the uplink."""

    ports = True
    #: The channel name of each device's port.
    port_kind = ""
    #: The uplink's latency as a share of the intra-host latency.
    uplink_latency_share = 1.0

    def __init__(
        self,
        env: simpy.Environment,
        host: str,
        devices: tuple[Device, ...],
        latency_s: float,
        bandwidth_Bps: float,
        sharing: str,
        *,
        pcie_uplink_Bps: float = PCIE3_X16_Bps,
    ) -> None:
        self.host = host
        self.latency_s = latency_s
        self.bandwidth_Bps = bandwidth_Bps
        self.port: dict[str, tuple[Link, Link]] = {
            d.name: channel_links(
                env,
                f"{d.name}/{self.port_kind}",
                latency_s / 2,
                bandwidth_Bps,
                host,
                sharing=sharing,
            )
            for d in devices
        }
        self.up, self.down = channel_links(
            env,
            f"{host}/pcie",
            latency_s * self.uplink_latency_share,
            pcie_uplink_Bps,
            host,
            sharing=sharing,
            sides=("up", "down"),
        )

    def links(self) -> list[Link]:
        return [link for pair in self.port.values() for link in pair] + [self.up, self.down]

    def between(self, a: Device, b: Device) -> list[Hop]:
        return [(self.port[a.name][0], "tx"), (self.port[b.name][1], "rx")]

    def host_to_host(self) -> list[Hop]:
        return [(self.up, "up")]


class NvlinkFabric(_PortFabric):
    """GPUs all-to-all over NVLink (a port per GPU), the CPU behind a shared PCIe uplink."""

    mode = "nvlink"
    port_kind = "nvlink"

    def to_host(self, device: Device) -> list[Hop]:
        return [(self.up, "up")]

    def from_host(self, device: Device) -> list[Hop]:
        return [(self.down, "down")]


class PcieFabric(_PortFabric):
    """Devices under one PCIe switch, a link each; one uplink to the root complex (CPU, NIC)."""

    mode = "pcie"
    port_kind = "pcie"
    uplink_latency_share = 0.5

    def to_host(self, device: Device) -> list[Hop]:
        return [(self.port[device.name][0], "tx"), (self.up, "up")]

    def from_host(self, device: Device) -> list[Hop]:
        return [(self.down, "down"), (self.port[device.name][1], "rx")]

    def to_nic(self, device: Device) -> list[Hop]:
        return self.to_host(device)

    def from_nic(self, device: Device) -> list[Hop]:
        return self.from_host(device)


FABRICS: dict[str, type[HostFabric]] = {
    cls.mode: cls for cls in (HostFabric, NvlinkFabric, PcieFabric)
}


def host_fabric(
    env: simpy.Environment,
    mode: str,
    host: str,
    devices: tuple[Device, ...],
    *,
    latency_s: float,
    bandwidth_Bps: float,
    sharing: str,
    pcie_uplink_Bps: float = PCIE3_X16_Bps,
) -> HostFabric:
    """The ``mode`` fabric (``shared``, ``nvlink`` or ``pcie``) of machine ``host``."""
    if mode not in FABRICS:
        raise ValueError(f"intra_host must be one of {INTRA_HOST}, got {mode!r}")
    if mode == "shared":
        return HostFabric(env, host, devices, latency_s, bandwidth_Bps, sharing)
    return FABRICS[mode](
        env, host, devices, latency_s, bandwidth_Bps, sharing, pcie_uplink_Bps=pcie_uplink_Bps
    )
