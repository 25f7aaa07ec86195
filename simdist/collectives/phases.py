"""The one-dimensional building blocks of every collective, over positions ``0..k−1`` of a line.

Each function returns the :class:`~simdist.collectives.pattern.Phase` (or phases) of one
published algorithm, shares as fractions of the buffer the line works on:

* ring reduce-scatter and all-gather: k − 1 rounds in which position i sends a chunk of
  S/k to i + 1 (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for
  clusters of workstations", JPDC 69(2); Thakur, Rabenseifner & Gropp 2005,
  "Optimization of collective communication operations in MPICH", IJHPCA 19(1));
* recursive halving reduce-scatter and recursive doubling all-gather over a power of two
  p: partners at distance 1, 2, …, p/2 exchange S/2, S/4, …, S/p, then back (Rabenseifner's
  algorithm as MPICH's all-reduce runs it, Thakur et al. 2005 §4.5); for k not a power of
  two the surplus ranks hand their buffer to a partner first and get the result last;
* binomial broadcast and reduce from position 0: rank r receives the whole buffer from r
  with its lowest set bit cleared, one round per bit (Thakur et al. 2005 §4.1, §4.4);
* NCCL's double binary tree: two complementary binary trees, each reducing then
  broadcasting half the buffer, streamed in small pieces (``ncclGetBtree`` /
  ``ncclGetDtree`` in NCCL's src/graph/trees.cc; Sanders, Speck & Träff 2009, "Two-tree
  algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 35(12));
* pairwise-exchange all-to-all: k − 1 rounds in which position i sends S/k to i + j
  (Thakur et al. 2005 §4.6, the long-message MPI_Alltoall; ASTRA-sim's direct AllToAll).

Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

from fractions import Fraction

from simdist.collectives.pattern import Phase, Round


def ring_phase(k: int) -> Phase:
    """A ring reduce-scatter or all-gather (the two move alike): k − 1 rounds of S/k."""
    if k < 2:
        return Phase(())
    ring = tuple((i, (i + 1) % k) for i in range(k))
    return Phase((Round(ring, Fraction(1, k), k - 1),))


def real_ranks(k: int) -> list[int]:
    """The p = 2^⌊log2 k⌋ positions that run recursive halving, in MPICH's layout.

    Of the first 2r positions (r = k − p) the odd ones stay (each holding its even
    neighbour's buffer too); the positions from 2r on all stay.
    """
    p = 1 << (k.bit_length() - 1)
    r = k - p
    return [2 * i + 1 if i < r else i + r for i in range(p)]


def halving_phase(p: int) -> Phase:
    """Recursive halving reduce-scatter over p = 2^m positions: distance 1, 2, …, p/2
    exchanging S/2, S/4, …, S/p."""
    rounds = []
    mask = 1
    while mask < p:
        pairs = tuple((i, i ^ mask) for i in range(p))
        rounds.append(Round(pairs, Fraction(1, 2 * mask)))
        mask <<= 1
    return Phase(tuple(rounds))


def doubling_phase(p: int) -> Phase:
    """Recursive doubling all-gather over p = 2^m positions: :func:`halving_phase` reversed."""
    return Phase(tuple(reversed(halving_phase(p).rounds)))


def fold_phases(k: int) -> tuple[Phase, Phase]:
    """The surplus positions of a non-power-of-two k: hand the buffer in, get it back.

    Of the first 2r positions (r = k − 2^⌊log2 k⌋) each even one sends its whole buffer to
    the next odd one before recursive halving, and receives the result after recursive
    doubling (MPICH's all-reduce, Thakur et al. 2005 §4.5). Empty for a power of two.
    """
    p = 1 << (k.bit_length() - 1)
    pairs = tuple((even, even + 1) for even in range(0, 2 * (k - p), 2))
    if not pairs:
        return Phase(()), Phase(())
    back = tuple((odd, even) for even, odd in pairs)
    return Phase((Round(pairs, Fraction(1)),)), Phase((Round(back, Fraction(1)),))


def binomial_phase(k: int, *, reduce: bool = False) -> Phase:
    """Binomial broadcast from position 0 (``reduce``: towards it), one round per bit.

    Rank r's partner is r with its lowest set bit cleared; the ranks whose lowest set bit
    is the same exchange in the same round, the highest bit first for a broadcast (and,
    reversed in time, the lowest first for a reduce).
    """
    rounds: dict[int, list[tuple[int, int]]] = {}
    for r in range(1, k):
        pair = (r, r & (r - 1)) if reduce else (r & (r - 1), r)
        rounds.setdefault(r & -r, []).append(pair)
    order = sorted(rounds, reverse=not reduce)
    return Phase(tuple(Round(tuple(rounds[low]), Fraction(1)) for low in order))


def btree_parent(n: int, rank: int) -> int:
    """The parent of ``rank`` in NCCL's binary tree over ``n`` ranks rooted at 0 (−1: the root)."""
    if rank == 0:
        return -1
    # ncclGetBtree (NCCL src/graph/trees.cc): find the lowest set bit, go up to xx10[0],
    # or to xx00[0] when that is out of range.
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def double_tree_parents(n: int) -> tuple[list[int], list[int]]:
    """Each rank's parent in the two trees of NCCL's double binary tree (−1: a root)."""
    first = [btree_parent(n, r) for r in range(n)]
    second = []
    for r in range(n):
        # ncclGetDtree: the second tree is the first shifted by one rank (odd n) or mirrored.
        if n % 2 == 1:
            u = btree_parent(n, (r - 1 + n) % n)
            second.append(-1 if u == -1 else (u + 1) % n)
        else:
            u = btree_parent(n, n - 1 - r)
            second.append(-1 if u == -1 else n - 1 - u)
    return first, second


def double_tree_phases(k: int) -> tuple[Phase, Phase]:
    """The double binary tree's reduce (every child → parent edge of both trees, streamed)
    and broadcast (every parent → child edge), each tree carrying half the buffer.

    Priced per phase as ⌈log2 k⌉ hops of latency plus both halves through a rank's
    link, S/B: in the two trees every rank is an inner node (two children) in at most one
    and a leaf in the other (Sanders, Speck & Träff 2009). At k = 2 the two roots are each
    other's only child and a real run moves S/2 per link: the model's S/B overcharges it,
    as NCCL's own tuning model does not, and is kept so published figures stay put.
    """
    if k < 2:
        return Phase(()), Phase(())
    ups = [
        Round(tuple((c, p) for c, p in enumerate(parents) if p >= 0), Fraction(1, 2))
        for parents in double_tree_parents(k)
    ]
    downs = [Round(tuple((p, c) for c, p in r.sends), r.chunk) for r in ups]
    return Phase(tuple(ups), pipelined=True), Phase(tuple(downs), pipelined=True)


def pairwise_phase(k: int) -> Phase:
    """Pairwise-exchange all-to-all: in round j position i sends its block for i + j."""
    rounds = tuple(
        Round(tuple((i, (i + j) % k) for i in range(k)), Fraction(1, k)) for j in range(1, k)
    )
    return Phase(rounds)
