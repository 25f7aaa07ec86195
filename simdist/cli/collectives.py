"""``simdist collectives``: all-reduce time, algbw and busbw per algorithm, over lists or
doubling ranges of participants and sizes, optionally through a scenario's network topology."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.table import Table

from simdist.cli.common import app, console, guarded
from simdist.errors import SimdistError
from simdist.units import UnitError


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
}


def _network_options(
    topology: str,
    hosts_per_leaf: int | None,
    oversubscription: str | None,
    hop_latency: str | None,
    intra_host: str,
    pcie_uplink: str | None,
) -> Any:
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


@app.command()
def collectives(
    algo: Annotated[
        str,
        typer.Option(
            help="all, or a comma list of: ring, tree, halving_doubling, hierarchical, torus2d."
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
) -> None:
    """Print all-reduce time, algbw and busbw per algorithm (busbw as nccl-tests reports it).

    With --topology leaf_spine or --intra-host nvlink|pcie, n devices sit on
    n / --devices-per-host hosts wired as a scenario's cluster.network says, and each
    collective is priced through that topology (the bottleneck of its pattern).
    """
    from simdist.collectives import ALGORITHMS, collectives_table
    from simdist.scenario import IntraHostLinkSpec, NetworkLinkSpec
    from simdist.units import (
        format_bandwidth,
        format_duration,
        format_size,
        parse_bandwidth,
        parse_duration,
        parse_size,
    )

    def table_rows() -> tuple[list[dict[str, Any]], str]:
        algos = list(ALGORITHMS) if algo.strip() == "all" else [a.strip() for a in algo.split(",")]
        for name in algos:
            if name not in ALGORITHMS:
                raise SimdistError(
                    f"--algo: got {name!r}; expected all or a comma list of {', '.join(ALGORITHMS)}"
                )
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
            topology, hosts_per_leaf, oversubscription, hop_latency, intra_host, pcie_uplink
        )
        rows = collectives_table(
            algos,
            ns,
            sizes,
            bw,
            lat,
            devices_per_host,
            intra_bandwidth_Bps=intra_bw,
            intra_latency_s=intra_lat,
            network=network,
        )
        title = f"all-reduce · link {format_bandwidth(bw)}, latency {format_duration(lat)}"
        if network.topology == "leaf_spine":
            title += (
                f" · leaf_spine {network.hosts_per_leaf} hosts/leaf, "
                f"{network.oversubscription:g}:1, hop {format_duration(network.hop_latency_s)}"
            )
        if network.intra_host != "shared":
            title += f" · {network.intra_host} {format_bandwidth(intra_bw)}"
        elif devices_per_host is not None and "hierarchical" in algos:
            title += f" · intra-host {format_bandwidth(intra_bw)}, {format_duration(intra_lat)}"
        return rows, title

    rows, title = guarded(table_rows)
    table = Table(title=title, caption="busbw = algbw × 2(n−1)/n (nccl-tests, PERFORMANCE.md)")
    for column in ("size", "n", "algorithm", "time", "algbw", "busbw", "note"):
        table.add_column(
            column,
            justify="right" if column in ("n", "time") else "left",
            no_wrap=column != "note",
        )
    for row in rows:
        timed = row["time_s"] is not None
        table.add_row(
            format_size(row["nbytes"]),
            str(row["n"]),
            row["algo"],
            format_duration(row["time_s"]) if timed else "—",
            format_bandwidth(row["algbw_Bps"]) if timed else "—",
            format_bandwidth(row["busbw_Bps"]) if timed else "—",
            row["note"],
        )
    console.print(table)
