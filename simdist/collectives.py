"""Collective costs in closed form: all-reduce per algorithm, broadcast, reduce, and tables.

Strategies decide *what* is reduced; these formulas say *how long* it takes, and
:mod:`simdist.network` applies them to a topology's links. Every formula
uses the alpha–beta model: ``latency_s`` (α) per message, ``bandwidth_Bps`` (B) per link,
``nbytes`` (S) the size of the buffer each participant contributes; the reduction
arithmetic itself is taken as free (γ = 0), as in nccl-tests' bus-bandwidth view.
One participant (n == 1) has nothing to exchange and costs 0 s.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from simdist.errors import SimdistError

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "halving_doubling", "hierarchical", "torus2d")

TOPOLOGY_KEYS: frozenset[str] = frozenset(
    {"devices_per_host", "intra_latency_s", "intra_bandwidth_Bps", "x", "y"}
)


def _check(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"participants must be a positive integer, got {n}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if latency_s < 0:
        raise ValueError(f"latency_s must be >= 0, got {latency_s}")
    if not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps must be > 0, got {bandwidth_Bps}")


def ring_allreduce_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Ring all-reduce: a reduce-scatter then an all-gather around a ring of ``n``.

    Bandwidth-optimal (each participant sends 2(n−1)/n·S bytes) but its latency grows
    linearly with n, so it suits large buffers.
    """
    _check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    # Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
    # workstations"; Thakur, Rabenseifner & Gropp 2005: 2(n−1) steps of S/n bytes,
    # T = 2(n−1)(α + S/(n·B)).
    return 2 * (n - 1) * (latency_s + nbytes / (n * bandwidth_Bps))


def tree_allreduce_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Double-binary-tree all-reduce (NCCL ≥ 2.4): logarithmic latency, near-full bandwidth.

    Model: two complementary binary trees each reduce then broadcast half the buffer,
    pipelined in small chunks. Depth is d = ⌈log2 n⌉, so each phase pays d·α to fill the
    pipeline. In the two trees every rank is an inner node (two children) in at most one
    and a leaf in the other, so per phase it receives 2·S/2 and sends S/2 + S/2: each phase
    streams S bytes through its link, S/B. This large-n model overestimates n = 2, where
    no node has two children (S/(2B) per phase in reality).
    """
    _check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    depth = math.ceil(math.log2(n))
    # Sanders, Speck & Träff 2009, "Two-tree algorithms for full bandwidth broadcast,
    # reduction and scan" (pipelined two-tree reduce / broadcast ≈ d·α + S/B each), as
    # adopted by NCCL 2.4 (NVIDIA blog "Massively scale your deep learning training with
    # NCCL 2.4", 2019).
    # All-reduce = reduce + broadcast: T = 2(⌈log2 n⌉·α + S/B).
    return 2 * (depth * latency_s + nbytes / bandwidth_Bps)


def halving_doubling_allreduce_s(
    n: int, nbytes: float, latency_s: float, bandwidth_Bps: float
) -> float:
    """Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling all-gather.

    For n not a power of two, the r = n − p' surplus ranks (p' = 2^⌊log2 n⌋) first hand
    their whole buffer to a partner, the p' ranks run the power-of-two algorithm, and the
    partners hand the result back: two extra full-buffer steps, 2(α + S/B).
    """
    _check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    steps = n.bit_length() - 1
    p = 1 << steps
    # Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
    # operations in MPICH" (Rabenseifner's algorithm):
    # T = 2·log2(p)·α + 2·(p−1)/p·S/B for p a power of two.
    t = 2 * steps * latency_s + 2 * (p - 1) / p * nbytes / bandwidth_Bps
    if p != n:
        # Same source, non-power-of-two case: one extra send before and one after.
        t += 2 * (latency_s + nbytes / bandwidth_Bps)
    return t


def hierarchical_allreduce_s(
    hosts: int,
    devices_per_host: int,
    nbytes: float,
    intra_latency_s: float,
    intra_bandwidth_Bps: float,
    inter_latency_s: float,
    inter_bandwidth_Bps: float,
) -> float:
    """Two-level all-reduce: reduce-scatter inside each host, ring across hosts, all-gather inside.

    Phase 1: a ring reduce-scatter over the host's d devices leaves each device owning S/d
    reduced bytes. Phase 2: d concurrent inter-host ring all-reduces, one per local rank,
    each on S/d; they share the host NIC, so together they move as one ring all-reduce of
    S over h hosts. Phase 3: a ring all-gather inside the host. Only the middle phase
    crosses the slow network, which is why it wins when the NIC is much slower than
    NVLink/PCIe. With h = 1 it is a ring inside the host; with d = 1, a ring across hosts.
    """
    _check(hosts, nbytes, inter_latency_s, inter_bandwidth_Bps)
    _check(devices_per_host, nbytes, intra_latency_s, intra_bandwidth_Bps)
    d, h = devices_per_host, hosts
    # Horovod's hierarchical all-reduce (HOROVOD_HIERARCHICAL_ALLREDUCE;
    # NCCLHierarchicalAllreduce in horovod/common/ops/nccl_operations.cc: ncclReduceScatter
    # in the node, MPI_Allreduce across nodes, ncclAllGather in the node). Each intra
    # phase is half a ring all-reduce (Thakur et al. 2005): (d−1)(α_i + S/(d·B_i)); the
    # inter phase is the ring formula of Patarasuk & Yuan 2009 on S over h hosts.
    intra = 2 * (d - 1) * (intra_latency_s + nbytes / (d * intra_bandwidth_Bps))
    inter = ring_allreduce_s(h, nbytes, inter_latency_s, inter_bandwidth_Bps)
    return intra + inter


def torus2d_allreduce_s(
    x: int, y: int, nbytes: float, latency_s: float, bandwidth_Bps: float
) -> float:
    """2D-torus all-reduce on an x × y grid (TPU pods).

    Ring reduce-scatter along x (S), then along y on the S/x shard, then the two
    all-gathers in reverse. The bandwidth term equals a flat ring over x·y; the latency
    term drops from 2(xy−1)α to 2(x+y−2)α. With y = 1 it is a ring over x.
    """
    _check(x, nbytes, latency_s, bandwidth_Bps)
    _check(y, nbytes, latency_s, bandwidth_Bps)
    # Ying, Kumar, Chen, Wang & Cheng 2018, "Image classification at supercomputer
    # scale" (2-D gradient summation on the TPU-v3 torus); each 1-D phase is the ring cost of
    # Patarasuk & Yuan 2009:
    # T = 2[(x−1)(α + S/(x·B)) + (y−1)(α + S/(x·y·B))].
    along_x = (x - 1) * (latency_s + nbytes / (x * bandwidth_Bps))
    along_y = (y - 1) * (latency_s + nbytes / (x * y * bandwidth_Bps))
    return 2 * (along_x + along_y)


def broadcast_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Binomial-tree broadcast: the root's buffer reaches all ``n`` in ⌈log2 n⌉ rounds.

    Each round every holder sends the whole buffer to one more participant, so
    the holders double; the model of choice for short and medium buffers.
    """
    _check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    # Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
    # operations in MPICH", §4.1 (binomial tree): T = ⌈log2 n⌉·(α + S/B).
    return math.ceil(math.log2(n)) * (latency_s + nbytes / bandwidth_Bps)


def reduce_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Binomial-tree reduce to one root: the mirror image of :func:`broadcast_s`.

    The reduction arithmetic is free (γ = 0), so it costs what the broadcast costs.
    """
    _check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    # Thakur, Rabenseifner & Gropp 2005, §4.4 (binomial tree reduce, γ = 0):
    # T = ⌈log2 n⌉·(α + S/B).
    return math.ceil(math.log2(n)) * (latency_s + nbytes / bandwidth_Bps)


def square_factors(n: int) -> tuple[int, int]:
    """The most square (x, y) with x·y = n and x ≥ y; a prime n gives (n, 1)."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    y = math.isqrt(n)
    while n % y:
        y -= 1
    return n // y, y


def allreduce_s(
    algo: str,
    n: int,
    nbytes: float,
    latency_s: float,
    bandwidth_Bps: float,
    **topology: Any,
) -> float:
    """Seconds for an all-reduce of ``nbytes`` over ``n`` participants with ``algo``.

    ``latency_s`` / ``bandwidth_Bps`` are the network (inter-host) link. Topology keywords,
    ignored by algorithms that do not need them:

    - hierarchical: ``devices_per_host`` (required, must divide n), ``intra_latency_s``
      and ``intra_bandwidth_Bps`` (default: the network values);
    - torus2d: ``x`` and ``y`` (x·y = n); without them, ``square_factors(n)``.
    """
    unknown = set(topology) - TOPOLOGY_KEYS
    if unknown:
        raise ValueError(
            f"unknown topology keyword(s) {sorted(unknown)}; expected {sorted(TOPOLOGY_KEYS)}"
        )
    if algo == "ring":
        return ring_allreduce_s(n, nbytes, latency_s, bandwidth_Bps)
    if algo == "tree":
        return tree_allreduce_s(n, nbytes, latency_s, bandwidth_Bps)
    if algo == "halving_doubling":
        return halving_doubling_allreduce_s(n, nbytes, latency_s, bandwidth_Bps)
    if algo == "hierarchical":
        d = topology.get("devices_per_host")
        if d is None or d < 1 or n % d:
            raise SimdistError(
                f"hierarchical all-reduce needs devices_per_host dividing n={n}, got {d}"
            )
        intra_latency_s = topology.get("intra_latency_s")
        intra_bandwidth_Bps = topology.get("intra_bandwidth_Bps")
        return hierarchical_allreduce_s(
            n // d,
            d,
            nbytes,
            latency_s if intra_latency_s is None else intra_latency_s,
            bandwidth_Bps if intra_bandwidth_Bps is None else intra_bandwidth_Bps,
            latency_s,
            bandwidth_Bps,
        )
    if algo == "torus2d":
        x, y = topology.get("x"), topology.get("y")
        if x is None and y is None:
            x, y = square_factors(n)
        if x is None or y is None or x * y != n:
            raise SimdistError(f"torus2d all-reduce needs x*y == n={n}, got x={x}, y={y}")
        return torus2d_allreduce_s(x, y, nbytes, latency_s, bandwidth_Bps)
    raise SimdistError(f"unknown all-reduce algorithm {algo!r}; expected one of {ALGORITHMS}")


def algbw_Bps(nbytes: float, time_s: float) -> float:
    """Algorithm bandwidth: buffer size over elapsed time."""
    if not time_s > 0:
        raise ValueError(f"time_s must be > 0, got {time_s}")
    # NVIDIA nccl-tests, doc/PERFORMANCE.md, "Algorithm bandwidth": algbw = S / t.
    return nbytes / time_s


def busbw_Bps(nbytes: float, time_s: float, n: int) -> float:
    """Bus bandwidth of an all-reduce: algbw rescaled so it compares with link speed.

    A bandwidth-optimal all-reduce moves 2(n−1)/n·S per rank, so busbw reaches the link
    bandwidth whatever n is; it is the figure to hold against the hardware.
    """
    # NVIDIA nccl-tests, doc/PERFORMANCE.md, "Bus bandwidth", AllReduce:
    # busbw = algbw · 2(n−1)/n.
    return algbw_Bps(nbytes, time_s) * 2 * (n - 1) / n


def allreduce_figures(nbytes: float, time_s: float, n: int) -> dict[str, float | None]:
    """``allreduce_s``, ``algbw_Bps`` and ``busbw_Bps`` of one all-reduce, for summaries.

    The two bandwidths are ``None`` when nothing is exchanged (n = 1 or a zero time).
    """
    if n < 2 or not time_s > 0:
        return {"allreduce_s": time_s, "algbw_Bps": None, "busbw_Bps": None}
    return {
        "allreduce_s": time_s,
        "algbw_Bps": algbw_Bps(nbytes, time_s),
        "busbw_Bps": busbw_Bps(nbytes, time_s, n),
    }


def _skip_reason(algo: str, n: int, devices_per_host: int | None) -> str | None:
    if n < 2:
        return "one participant: nothing to reduce"
    if algo == "hierarchical":
        if devices_per_host is None:
            return "needs devices_per_host"
        if n % devices_per_host:
            return f"n={n} is not a multiple of devices_per_host={devices_per_host}"
    if algo == "torus2d" and square_factors(n)[1] == 1:
        return f"n={n} is prime: no 2D grid (an {n}x1 torus is a ring)"
    return None


def _note(algo: str, n: int, devices_per_host: int | None) -> str:
    if algo == "hierarchical" and devices_per_host is not None:
        return f"{n // devices_per_host} hosts x {devices_per_host} devices"
    if algo == "torus2d":
        x, y = square_factors(n)
        return f"{x}x{y} torus"
    if algo == "halving_doubling" and n & (n - 1):
        return "n not a power of two: +2 full-buffer steps"
    return ""


def collectives_table(
    algos: Iterable[str],
    ns: Iterable[int],
    sizes: Iterable[float],
    bandwidth_Bps: float,
    latency_s: float,
    devices_per_host: int | None = None,
    *,
    intra_bandwidth_Bps: float | None = None,
    intra_latency_s: float | None = None,
    network: Any = None,
) -> list[dict[str, Any]]:
    """All-reduce time, algbw and busbw for every (size, n, algo), for a teaching table.

    Rows are ordered by size, then n, then algorithm as given, so that algorithms sit
    next to each other. Each row: ``algo, n, nbytes, time_s, algbw_Bps, busbw_Bps,
    note``. A combination the algorithm cannot do (n < 2, hierarchical without a
    devices_per_host dividing n, torus2d on a prime n) is kept as a row whose three
    numbers are ``None`` and whose ``note`` says why; otherwise ``note`` names the shape
    used (hosts x devices, the x x y torus). Hierarchical uses the intra-host link values
    when given, else the network values for both levels.

    ``network`` (a scenario's ``cluster.network`` section, :class:`NetworkSpec`) prices
    every row through the topology instead: n devices on n / ``devices_per_host`` hosts
    (default 1 device per host), wired as the section says (``leaf_spine`` racks and
    oversubscribed uplinks, ``nvlink`` or ``pcie`` inside the hosts), each collective
    priced by :mod:`simdist.network` from its communication pattern (the same closed
    form, with the bottleneck's α and B). The ``note`` then names the racks and the
    effective bandwidth. The default switch with the shared intra-host link gives the
    closed forms above, unchanged.
    """
    if network is not None and (network.topology != "switch" or network.intra_host != "shared"):
        return _topology_table(
            list(algos),
            list(ns),
            list(sizes),
            bandwidth_Bps,
            latency_s,
            devices_per_host or 1,
            300e9 if intra_bandwidth_Bps is None else intra_bandwidth_Bps,
            2e-6 if intra_latency_s is None else intra_latency_s,
            network,
        )
    algos, ns, sizes = list(algos), list(ns), list(sizes)
    for algo in algos:
        if algo not in ALGORITHMS:
            raise SimdistError(
                f"unknown all-reduce algorithm {algo!r}; expected one of {ALGORITHMS}"
            )
    rows: list[dict[str, Any]] = []
    for nbytes in sizes:
        for n in ns:
            for algo in algos:
                row: dict[str, Any] = {"algo": algo, "n": n, "nbytes": nbytes}
                reason = _skip_reason(algo, n, devices_per_host)
                if reason is not None:
                    row |= {"time_s": None, "algbw_Bps": None, "busbw_Bps": None}
                    row["note"] = f"skipped: {reason}"
                    rows.append(row)
                    continue
                topology: dict[str, Any] = {}
                if algo == "hierarchical":
                    topology = {
                        "devices_per_host": devices_per_host,
                        "intra_bandwidth_Bps": intra_bandwidth_Bps,
                        "intra_latency_s": intra_latency_s,
                    }
                t = allreduce_s(algo, n, nbytes, latency_s, bandwidth_Bps, **topology)
                row["time_s"] = t
                row["algbw_Bps"] = algbw_Bps(nbytes, t) if t > 0 else math.inf
                row["busbw_Bps"] = busbw_Bps(nbytes, t, n) if t > 0 else math.inf
                row["note"] = _note(algo, n, devices_per_host)
                rows.append(row)
    return rows


def _topology_table(
    algos: list[str],
    ns: list[int],
    sizes: list[float],
    bandwidth_Bps: float,
    latency_s: float,
    devices_per_host: int,
    intra_bandwidth_Bps: float,
    intra_latency_s: float,
    network: Any,
) -> list[dict[str, Any]]:
    """:func:`collectives_table`'s rows, each priced through the topology ``network`` names."""
    from simdist.network.leaf_spine import standalone_topology
    from simdist.units import format_bandwidth

    for algo in algos:
        if algo not in ALGORITHMS:
            raise SimdistError(
                f"unknown all-reduce algorithm {algo!r}; expected one of {ALGORITHMS}"
            )
    d = devices_per_host
    topologies: dict[int, Any] = {}
    rows: list[dict[str, Any]] = []
    for nbytes in sizes:
        for n in ns:
            for algo in algos:
                row: dict[str, Any] = {"algo": algo, "n": n, "nbytes": nbytes}
                reason = _skip_reason(algo, n, d)
                if reason is None and n % d:
                    reason = f"n={n} is not a multiple of devices_per_host={d}"
                if reason is not None:
                    row |= {"time_s": None, "algbw_Bps": None, "busbw_Bps": None}
                    row["note"] = f"skipped: {reason}"
                    rows.append(row)
                    continue
                if n not in topologies:
                    topologies[n] = standalone_topology(
                        n // d,
                        d,
                        network,
                        nic_latency_s=latency_s,
                        nic_bandwidth_Bps=bandwidth_Bps,
                        intra_latency_s=intra_latency_s,
                        intra_bandwidth_Bps=intra_bandwidth_Bps,
                    )
                topology = topologies[n]
                devices = topology.cluster.devices
                t = topology.collective("allreduce", devices, nbytes, algo)[0]
                row["time_s"] = t
                row["algbw_Bps"] = algbw_Bps(nbytes, t) if t > 0 else math.inf
                row["busbw_Bps"] = busbw_Bps(nbytes, t, n) if t > 0 else math.inf
                figures = topology.effective("allreduce", devices, algo)
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
