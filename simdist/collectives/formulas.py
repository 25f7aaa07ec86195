"""The published closed forms, as their papers write them: documentation and a cross-check.

simdist prices collectives from their patterns (:mod:`simdist.collectives.closed_form`);
these are the formulas those derivations must equal, bit for bit, which the tests check.
They take the same alpha–beta arguments: ``latency_s`` (α) per message,
``bandwidth_Bps`` (B) per link, ``nbytes`` (S) the buffer each participant contributes.

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

import math

from simdist.collectives.closed_form import check


def ring_allreduce_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Ring all-reduce: a reduce-scatter then an all-gather around a ring of ``n``.

    Bandwidth-optimal (each participant sends 2(n−1)/n·S bytes) but its latency grows
    linearly with n, so it suits large buffers.
    """
    check(n, nbytes, latency_s, bandwidth_Bps)
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
    check(n, nbytes, latency_s, bandwidth_Bps)
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
    check(n, nbytes, latency_s, bandwidth_Bps)
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
    check(hosts, nbytes, inter_latency_s, inter_bandwidth_Bps)
    check(devices_per_host, nbytes, intra_latency_s, intra_bandwidth_Bps)
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
    check(x, nbytes, latency_s, bandwidth_Bps)
    check(y, nbytes, latency_s, bandwidth_Bps)
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
    check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    # Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
    # operations in MPICH", §4.1 (binomial tree): T = ⌈log2 n⌉·(α + S/B).
    return math.ceil(math.log2(n)) * (latency_s + nbytes / bandwidth_Bps)


def reduce_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Binomial-tree reduce to one root: the mirror image of :func:`broadcast_s`.

    The reduction arithmetic is free (γ = 0), so it costs what the broadcast costs.
    """
    check(n, nbytes, latency_s, bandwidth_Bps)
    if n == 1:
        return 0.0
    # Thakur, Rabenseifner & Gropp 2005, §4.4 (binomial tree reduce, γ = 0):
    # T = ⌈log2 n⌉·(α + S/B).
    return math.ceil(math.log2(n)) * (latency_s + nbytes / bandwidth_Bps)


def ring_reduce_scatter_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Ring reduce-scatter (an all-gather costs the same): half a ring all-reduce."""
    check(n, nbytes, latency_s, bandwidth_Bps)
    # Thakur et al. 2005 §4.3 / Patarasuk & Yuan 2009: T = (n−1)(α + S/(n·B)).
    return (n - 1) * (latency_s + nbytes / (n * bandwidth_Bps))


def halving_reduce_scatter_s(
    n: int, nbytes: float, latency_s: float, bandwidth_Bps: float
) -> float:
    """Recursive-halving reduce-scatter (recursive-doubling all-gather alike), n = 2^m."""
    check(n, nbytes, latency_s, bandwidth_Bps)
    # Thakur et al. 2005 §4.3 (recursive halving): T = log2 n·α + (n−1)/n·S/B.
    return (n.bit_length() - 1) * latency_s + (n - 1) / n * nbytes / bandwidth_Bps


def pairwise_all_to_all_s(n: int, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
    """Pairwise-exchange all-to-all: each rank sends S/n to each of the n − 1 others."""
    check(n, nbytes, latency_s, bandwidth_Bps)
    # Thakur et al. 2005 §4.6 (long messages): T = (n−1)(α + S/(n·B)).
    return (n - 1) * (latency_s + nbytes / (n * bandwidth_Bps))
