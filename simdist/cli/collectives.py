"""``simdist collectives``: a collective's time, algbw and busbw per algorithm, over lists or
doubling ranges of participants and sizes, optionally through a scenario's network topology."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from simdist.cli.common import command, guarded, print_table
from simdist.errors import SimdistError
from simdist.units import UnitError

if TYPE_CHECKING:
    from simdist.collectives.table import Row
    from simdist.network.leaf_spine import LeafSpineTopology
    from simdist.scenario import NetworkSpec

#: ``--op`` → the title's name and the caption's busbw factor (nccl-tests, PERFORMANCE.md).
OP_LABELS: dict[str, tuple[str, str]] = {
    "all_reduce": ("all-reduce", "2(n−1)/n"),
    "reduce_scatter": ("reduce-scatter", "(n−1)/n"),
    "all_gather": ("all-gather", "(n−1)/n"),
    "broadcast": ("broadcast", "1"),
    "reduce": ("reduce", "1"),
    "all_to_all": ("all-to-all", "(n−1)/n"),
}


def _expand(text: str, parse: Callable[[str], float], option: str, example: str) -> list[float]:
    """Values of a comma list whose items may be ranges ``a..b``: a, 2a, 4a, … up to b.

    Ranges double, as nccl-tests' ``-b a -e b -f 2`` sweeps do: ``2..16`` is 2, 4, 8, 16
    and ``3..16`` is 3, 6, 12; the end is included only when the doubling lands on it.
    """
    values: list[float] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise SimdistError(f"{option}: empty entry in {text!r}; expected e.g. {example}")
        first, dots, last = item.partition("..")
        if not dots:
            values.append(parse(item))
            continue
        low, high = parse(first), parse(last)
        if not 0 < low <= high:
            raise SimdistError(
                f"{option}: range {item!r} must run from a positive value up to a larger one, "
                f"e.g. {example}"
            )
        while low <= high:
            values.append(low)
            low *= 2
    return values


def _participants(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise SimdistError(
            f"--n: got {text!r}; expected positive whole numbers of participants, "
            "e.g. --n 8, --n 2,4,8 or --n 2..16"
        )
    return n


def _quantity(parse: Callable[[object], float], option: str) -> Callable[[str], float]:
    def read(text: str) -> float:
        try:
            return parse(text)
        except UnitError as error:
            raise SimdistError(f"{option}: {error}") from None

    return read


#: ``simdist collectives`` option → the ``cluster.network`` field it sets.
_NETWORK_OPTIONS = {
    "topology": "--topology",
    "hosts_per_leaf": "--hosts-per-leaf",
    "oversubscription": "--oversubscription",
    "hop_latency": "--hop-latency",
    "intra_host": "--intra-host",
    "pcie_uplink": "--pcie-uplink",
    "protocol": "--protocol",
}


def _network_options(
    topology: str,
    hosts_per_leaf: int | None,
    oversubscription: str | None,
    hop_latency: str | None,
    intra_host: str,
    pcie_uplink: str | None,
    protocol: str = "ideal",
) -> NetworkSpec:
    """The options as a scenario's ``cluster.network`` section, validated the same way."""
    from pydantic import ValidationError

    from simdist.scenario.messages import error_message
    from simdist.scenario.schema import NetworkSpec

    given = {
        "topology": topology,
        "hosts_per_leaf": hosts_per_leaf,
        "oversubscription": oversubscription,
        "hop_latency": hop_latency,
        "intra_host": intra_host,
        "pcie_uplink": pcie_uplink,
        "protocol": protocol,
    }
    try:
        return NetworkSpec.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        field, message = error_message(exc.errors(include_url=False)[0], NetworkSpec)
        key = field.split(".")[0]
        option = _NETWORK_OPTIONS.get(key, "--" + key.replace("_", "-"))
        for name, flag in _NETWORK_OPTIONS.items():  # the section's words → the options'
            message = message.replace(f"{name}: ", f"{flag} ")
            message = message.replace(f"remove {name}", f"drop {flag}")
        raise SimdistError(f"{option}: {message}") from None


def topology_table(
    op: str,
    algos: list[str],
    ns: list[int],
    sizes: list[float],
    bandwidth_Bps: float,
    latency_s: float,
    devices_per_host: int,
    intra_bandwidth_Bps: float,
    intra_latency_s: float,
    network: NetworkSpec,
) -> list[Row]:
    """:func:`~simdist.collectives.collectives_table`'s rows, each priced through the
    topology ``network`` (a scenario's ``cluster.network`` section) names.

    n devices sit on n / ``devices_per_host`` hosts wired as the section says
    (``leaf_spine`` racks and oversubscribed uplinks, ``nvlink`` or ``pcie`` inside the
    hosts); each collective is priced by :mod:`simdist.network` from its pattern (the
    same closed form, with the bottleneck's α and B), and the ``note`` names the racks
    and the effective bandwidth.
    """
    from simdist.collectives import algbw_Bps, busbw_Bps
    from simdist.collectives.table import check_algorithms, skip_reason
    from simdist.hardware.cluster import Cluster
    from simdist.network.leaf_spine import standalone_topology
    from simdist.scenario.cluster import ClusterSpec
    from simdist.units import format_bandwidth

    check_algorithms(op, algos)
    d = devices_per_host
    topologies: dict[int, LeafSpineTopology] = {}
    rows: list[Row] = []
    for nbytes in sizes:
        for n in ns:
            for algo in algos:
                row: Row = {"algo": algo, "n": n, "nbytes": nbytes}
                reason = skip_reason(op, algo, n, d)
                if reason is None and n % d:
                    reason = f"n={n} is not a multiple of devices_per_host={d}"
                if reason is not None:
                    row |= {"time_s": None, "algbw_Bps": None, "busbw_Bps": None}
                    row["note"] = f"skipped: {reason}"
                    rows.append(row)
                    continue
                if n not in topologies:
                    spec = {"hosts": n // d, "devices_per_host": d, "device": {"profile": "v100"}}
                    topologies[n] = standalone_topology(
                        Cluster(ClusterSpec.model_validate(spec)),
                        network,
                        nic_latency_s=latency_s,
                        nic_bandwidth_Bps=bandwidth_Bps,
                        intra_latency_s=intra_latency_s,
                        intra_bandwidth_Bps=intra_bandwidth_Bps,
                    )
                topology = topologies[n]
                devices = topology.cluster.devices
                t = topology.collective(op, devices, nbytes, algo)[0]
                row["time_s"] = t
                row["algbw_Bps"] = algbw_Bps(nbytes, t) if t > 0 else math.inf
                row["busbw_Bps"] = busbw_Bps(nbytes, t, n, op) if t > 0 else math.inf
                figures = topology.effective(op, devices, algo)
                racks = len(set(topology.leaf_of.values()))
                shape = f"{n // d} hosts x {d}" + (f" in {racks} racks" if racks > 1 else "")
                if "bandwidth_Bps" in figures:
                    bw = format_bandwidth(figures["bandwidth_Bps"])
                elif n // d == 1:
                    bw = format_bandwidth(figures["intra_bandwidth_Bps"])
                else:
                    bw = (
                        f"{format_bandwidth(figures['intra_bandwidth_Bps'])} in, "
                        f"{format_bandwidth(figures['inter_bandwidth_Bps'])} across hosts"
                    )
                row["note"] = f"{shape}; B {bw}"
                rows.append(row)
    return rows


@command()
def collectives(
    op: Annotated[
        str,
        typer.Option(
            help="all_reduce (default), reduce_scatter, all_gather, broadcast, reduce, all_to_all."
        ),
    ] = "all_reduce",
    algo: Annotated[
        str,
        typer.Option(
            help="all, or a comma list of the op's algorithms: ring, tree, halving_doubling, "
            "hierarchical, torus2d (all-to-all: pairwise, hierarchical, torus2d)."
        ),
    ] = "all",
    n: Annotated[
        str, typer.Option("--n", help="Participants: 8, a list 2,4,8 or a doubling range 2..16.")
    ] = "8",
    size: Annotated[
        str, typer.Option(help="Buffer each participant reduces: 1GB, a list, or 1MB..1GB.")
    ] = "1GB",
    bandwidth: Annotated[
        str | None, typer.Option(help="Link bandwidth (default: the scenario network, 10Gbit/s).")
    ] = None,
    latency: Annotated[
        str | None, typer.Option(help="Link latency (default: the scenario network, 50us).")
    ] = None,
    devices_per_host: Annotated[
        int | None, typer.Option(help="Devices per host, for hierarchical (must divide n).")
    ] = None,
    intra_bandwidth: Annotated[
        str | None,
        typer.Option(help="Intra-host bandwidth, for hierarchical (default: 300GB/s)."),
    ] = None,
    intra_latency: Annotated[
        str | None, typer.Option(help="Intra-host latency, for hierarchical (default: 2us).")
    ] = None,
    topology: Annotated[
        str, typer.Option(help="switch (default) or leaf_spine: racks behind uplinks.")
    ] = "switch",
    hosts_per_leaf: Annotated[
        int | None, typer.Option(help="leaf_spine: hosts per leaf (rack), e.g. 4.")
    ] = None,
    oversubscription: Annotated[
        str | None, typer.Option(help="leaf_spine: uplink oversubscription, 4 or 4:1 (default 1).")
    ] = None,
    hop_latency: Annotated[
        str | None, typer.Option(help="leaf_spine: latency per switch hop (default 0).")
    ] = None,
    intra_host: Annotated[
        str,
        typer.Option(help="Inside each host: shared (one link), nvlink (a port per GPU), pcie."),
    ] = "shared",
    pcie_uplink: Annotated[
        str | None,
        typer.Option(help="nvlink / pcie: the PCIe switch's uplink (default 15.75GB/s, Gen3 x16)."),
    ] = None,
    protocol: Annotated[
        str,
        typer.Option(
            help="Transport of the inter-host links: ideal (default), tcp, rdma, grpc, "
            "nccl-socket (= tcp), nccl-ib (= rdma); sets their share of line rate and cost "
            "per step."
        ),
    ] = "ideal",
) -> None:
    """Print a collective's time, algbw and busbw per algorithm (busbw as nccl-tests reports it).

    --op picks the collective (default all_reduce); sizes are the whole buffer, as
    nccl-tests counts them. With --topology leaf_spine or --intra-host nvlink|pcie, n devices sit on
    n / --devices-per-host hosts wired as a scenario's cluster.network says, and each
    collective is priced through that topology (the bottleneck of its pattern). --protocol
    prices every step across hosts with a transport's share of line rate and cost per step
    (docs/transport.md); links inside a host are never touched. An algorithm named in --algo
    that none of --n can run (hierarchical whose --devices-per-host divides no n, torus2d on
    prime n) is an error; --algo all notes such rows as skipped.
    """
    from simdist.scenario import IntraHostLinkSpec, NetworkLinkSpec
    from simdist.units import (
        parse_bandwidth,
        parse_duration,
        parse_size,
    )

    def table_rows() -> tuple[list[Row], str]:
        algos = _algorithms(op, algo)
        ns = [int(v) for v in _expand(n, _participants, "--n", "--n 2..16")]
        sizes = _expand(size, _quantity(parse_size, "--size"), "--size", "--size 1MB..1GB")
        network, intra = NetworkLinkSpec(), IntraHostLinkSpec()

        def link(text: str | None, parse: Callable[[object], float], option: str, default: float):
            return default if text is None else _quantity(parse, option)(text)

        bw = link(bandwidth, parse_bandwidth, "--bandwidth", network.bandwidth_Bps)
        lat = link(latency, parse_duration, "--latency", network.latency_s)
        intra_bw = link(intra_bandwidth, parse_bandwidth, "--intra-bandwidth", intra.bandwidth_Bps)
        intra_lat = link(intra_latency, parse_duration, "--intra-latency", intra.latency_s)
        for option, value in (("--bandwidth", bw), ("--intra-bandwidth", intra_bw)):
            if not value > 0:
                raise SimdistError(f"{option}: expected a bandwidth above 0, e.g. 100GB/s")
        if devices_per_host is not None and devices_per_host < 1:
            raise SimdistError(f"--devices-per-host: got {devices_per_host}; expected >= 1")
        network = _network_options(
            topology,
            hosts_per_leaf,
            oversubscription,
            hop_latency,
            intra_host,
            pcie_uplink,
            protocol,
        )
        rows = _rows(
            op, algos, ns, sizes, (bw, lat, intra_bw, intra_lat), devices_per_host, network
        )
        if algo.strip() != "all":
            _refuse_impossible(algos, rows, devices_per_host)
        title = _title(op, bw, lat, network, intra_bw, intra_lat, devices_per_host, algos)
        return rows, title

    rows, title = guarded(table_rows)
    # Sizes in the units they were given in: --size 1GB reads back as 1 GB, 4MiB as 4.0 MiB.
    print_table(_table(op, rows, title, binary_sizes="ib" in size.lower()))


def _algorithms(op: str, algo: str) -> list[str]:
    """``--op``'s algorithms ``--algo`` names (``all``: every one), else one clear error."""
    from simdist.collectives import OPS, algorithms

    if op not in OPS:
        raise SimdistError(f"--op: got {op!r}; expected one of {', '.join(OPS)}")
    known = algorithms(op)
    algos = list(known) if algo.strip() == "all" else [a.strip() for a in algo.split(",")]
    for name in algos:
        if name not in known:
            raise SimdistError(
                f"--algo: got {name!r}; expected all or a comma list of {', '.join(known)}"
            )
    return algos


def _refuse_impossible(algos: list[str], rows: list[Row], devices_per_host: int | None) -> None:
    """An algorithm named in ``--algo`` that none of the ``--n`` can run is an error, not a
    table of skipped rows: a hierarchical collective whose devices per host divide no n, a
    torus on prime n only. (``--algo all`` keeps its notes: it asked for every algorithm.)"""
    for name in algos:
        notes = [str(r["note"]) for r in rows if r["algo"] == name]
        if not notes or not all(note.startswith("skipped: ") for note in notes):
            continue
        why = notes[0].removeprefix("skipped: ")
        if name == "hierarchical" and devices_per_host is None:
            example = "--devices-per-host 4 --n 8"
        elif name == "hierarchical":
            example = f"--n {2 * devices_per_host} --devices-per-host {devices_per_host}"
        else:
            example = "--n 8"
        raise SimdistError(f"--algo {name}: {why}, so it runs for none of --n; e.g. {example}")


def _rows(
    op: str,
    algos: list[str],
    ns: list[int],
    sizes: list[float],
    links: tuple[float, float, float, float],
    devices_per_host: int | None,
    network: NetworkSpec,
) -> list[Row]:
    """The table's rows: through the topology ``network`` names when it is not a plain
    switch of shared hosts, else the closed forms. ``links``: the network's bandwidth and
    latency, then the intra-host link's."""
    from simdist.collectives import collectives_table
    from simdist.network.transport import protocol_of

    bw, lat, intra_bw, intra_lat = links
    if network.topology != "switch" or network.intra_host != "shared":
        return topology_table(
            op, algos, ns, sizes, bw, lat, devices_per_host or 1, intra_bw, intra_lat, network
        )
    # The table's network link is the one between hosts: the transport prices it.
    wire_lat, wire_bw = protocol_of(network).collective_link(lat, bw)
    return collectives_table(
        algos,
        ns,
        sizes,
        wire_bw,
        wire_lat,
        devices_per_host,
        intra_bandwidth_Bps=intra_bw,
        intra_latency_s=intra_lat,
        op=op,
    )


def _title(
    op: str,
    bandwidth_Bps: float,
    latency_s: float,
    network: NetworkSpec,
    intra_bandwidth_Bps: float,
    intra_latency_s: float,
    devices_per_host: int | None,
    algos: list[str],
) -> str:
    """The table's title: the collective, the links and the topology that priced it."""
    from simdist.units import format_bandwidth, format_duration

    label = OP_LABELS[op][0]
    title = (
        f"{label} · link {format_bandwidth(bandwidth_Bps)}, latency {format_duration(latency_s)}"
    )
    if network.topology == "leaf_spine":
        title += (
            f" · leaf_spine {network.hosts_per_leaf} hosts/leaf, "
            f"{network.oversubscription:g}:1, hop {format_duration(network.hop_latency_s)}"
        )
    if network.protocol != "ideal":
        title += f" · {_protocol_note(network)}"
    if network.intra_host != "shared":
        title += f" · {network.intra_host} {format_bandwidth(intra_bandwidth_Bps)}"
    elif devices_per_host is not None and "hierarchical" in algos:
        intra = f"{format_bandwidth(intra_bandwidth_Bps)}, {format_duration(intra_latency_s)}"
        title += f" · intra-host {intra}"
    return title


def _protocol_note(network: NetworkSpec) -> str:
    """The transport's figures for the steps across hosts, in the title's words."""
    from simdist.network.transport import protocol_of
    from simdist.units import format_duration

    p = protocol_of(network)
    return (
        f"{network.protocol}: {p.collective_efficiency:.1%} of line rate, "
        f"+{format_duration(p.collective_step_s)} per step across hosts"
    )


def _table(op: str, rows: list[Row], title: str, *, binary_sizes: bool = False) -> Table:
    """The rows as a rich table, busbw's factor for ``op`` in the caption; sizes in binary
    units (MiB) with ``binary_sizes``, else decimal (MB)."""
    from simdist.units import format_bandwidth, format_duration, format_size, format_size_decimal

    size_text = format_size if binary_sizes else format_size_decimal
    caption = f"busbw = algbw × {OP_LABELS[op][1]} (nccl-tests, PERFORMANCE.md)"
    table = Table(title=title, caption=caption)
    for column in ("size", "n", "algorithm", "time", "algbw", "busbw", "note"):
        table.add_column(
            column,
            justify="right" if column in ("n", "time") else "left",
            no_wrap=column != "note",
        )
    for row in rows:
        timed = row["time_s"] is not None
        table.add_row(
            size_text(row["nbytes"]),
            str(row["n"]),
            str(row["algo"]),
            format_duration(row["time_s"]) if timed else "—",
            format_bandwidth(row["algbw_Bps"]) if timed else "—",
            format_bandwidth(row["busbw_Bps"]) if timed else "—",
            str(row["note"]),
        )
    return table
