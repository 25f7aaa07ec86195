"""A collective as data: which rank sends how big a share of the buffer to which, per step.

A :class:`Pattern` is what :mod:`simdist.collectives.registry` defines once per collective
and algorithm; everything else is derived from it: its closed form
(:func:`simdist.collectives.closed_form.pattern_s`), the bytes each rank-to-rank edge
carries (:meth:`Pattern.edges`, which a topology routes onto its links) and the steps a
topology's bottleneck pricing shares max-min fairly (:meth:`Pattern.steps`).

The shape follows ASTRA-sim 2.0's system layer (Won et al. 2023, "ASTRA-sim2.0: Modeling
hierarchical networks and disaggregated systems for large-model training at scale",
ISPASS; the ``Ring``, ``HalvingDoubling``, ``DoubleBinaryTreeAllReduce`` and ``AllToAll``
classes of astra-sim/system/collective/): a collective is a sequence of *phases*, each a
one-dimensional algorithm run over one dimension of the ranks, and a multi-dimensional
all-reduce is the per-dimension reduce-scatters followed by the all-gathers in reverse.

* A :class:`Round` is one exchange: every listed ``(src, dst)`` pair of positions sends
  ``chunk`` of the stage's buffer at once; ``repeat`` rounds alike follow each other
  (a ring's n − 1 steps, each moving a different chunk over the same edges).
* A :class:`Phase` is a sequence of rounds, or a set of rounds streamed at once in small
  pieces (``pipelined``: the two trees of NCCL's double binary tree).
* A :class:`Stage` is one dimension: the same phases run at once on every *line* of
  ranks (a host's devices, the j-th device of every host, a torus row), on a ``shard`` of
  the buffer S. Its ``scope`` says which links a topology prices it with: ``flat`` (the
  collective's one network), ``intra`` (inside a host) or ``inter`` (across hosts, every
  line of the stage through the same host NIC).

Shares are exact fractions, so the bytes of a reduce-scatter and an all-gather add up to
the all-reduce's exactly. Pure arithmetic: nothing here imports SimPy or JAX.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import NamedTuple

#: A stage over the collective's ranks as one network (its only scope for flat algorithms).
FLAT = "flat"
#: A stage inside each host (hierarchical's first and last stage).
INTRA = "intra"
#: A stage across hosts whose lines (one per local rank) share each host's NIC.
INTER = "inter"

#: One message of a collective: (source rank, destination rank, bytes per byte of S).
Edge = tuple[int, int, float]


@dataclass(frozen=True)
class Round:
    """``repeat`` exchanges alike: each ``(src, dst)`` position pair sends ``chunk``."""

    sends: tuple[tuple[int, int], ...]
    chunk: Fraction
    repeat: int = 1

    @cached_property
    def volume(self) -> Fraction:
        """The most a position sends or receives in one exchange, as a share of the buffer."""
        out: dict[int, int] = {}
        into: dict[int, int] = {}
        for src, dst in self.sends:
            out[src] = out.get(src, 0) + 1
            into[dst] = into.get(dst, 0) + 1
        return self.chunk * max(*out.values(), *into.values())

    @cached_property
    def depth(self) -> int:
        """The longest chain of sends (a tree's depth): how many hops a pipeline fills."""
        parent = dict(self.sends)
        if len(parent) != len(self.sends):  # a tree streamed downwards: walk it reversed
            parent = {dst: src for src, dst in self.sends}
        longest = 0
        for start in parent:
            hops, node = 0, start
            while node in parent:
                node, hops = parent[node], hops + 1
            longest = max(longest, hops)
        return longest


@dataclass(frozen=True)
class Phase:
    """Rounds one after another, or (``pipelined``) all at once in small pieces."""

    rounds: tuple[Round, ...]
    pipelined: bool = False


class Cost(NamedTuple):
    """A phase's price in the alpha–beta model, read off its rounds once.

    ``rounds`` latencies, and the bytes through the busiest port as a share of S: the same
    ``numerator / denominator`` in each round (``per_round``), else ``in_all`` together.
    """

    rounds: int
    per_round: bool
    numerator: int
    denominator: int
    in_all: float


@dataclass(frozen=True)
class Stage:
    """The same phases on every line of ranks at once, on ``shard`` of the buffer."""

    lines: tuple[tuple[int, ...], ...]
    shard: Fraction
    scope: str
    phases: tuple[Phase, ...] = ()

    def key(self) -> tuple[tuple[tuple[int, ...], ...], Fraction, str]:
        """What makes two stages one dimension: same lines, shard and scope."""
        return self.lines, self.shard, self.scope

    @property
    def ports_per_line(self) -> Fraction:
        """The lines that share one port: all of them across hosts (the host's NIC), else 1."""
        return Fraction(len(self.lines)) if self.scope == INTER else Fraction(1)

    @cached_property
    def costs(self) -> tuple[Cost, ...]:
        """Each phase's :class:`Cost`: a round's busiest port carries its volume times the
        stage's shard (times the lines sharing the port); a streamed phase pays its depth
        in latencies and all its streams' shares at once."""
        scale = self.shard * self.ports_per_line
        return tuple(_cost(phase, scale) for phase in self.phases)


@dataclass(frozen=True)
class Pattern:
    """A collective over ``n`` ranks: its stages (dimensions), each with its phases in time
    order; ``timeline`` lists (stage, phase) in the order they run."""

    n: int
    stages: tuple[Stage, ...] = ()
    timeline: tuple[tuple[int, int], ...] = field(default=())

    def then(self, other: Pattern) -> Pattern:
        """This collective followed by ``other`` over the same ranks (all-reduce = reduce-
        scatter then all-gather). Stages over the same lines, shard and scope are one
        dimension: ``other``'s phases join them, as ASTRA-sim runs a dimension's all-gather
        on the links its reduce-scatter used."""
        stages = list(self.stages)
        index = {stage.key(): i for i, stage in enumerate(stages)}
        timeline = list(self.timeline)
        for s, p in other.timeline:
            stage = other.stages[s]
            i = index.get(stage.key())
            if i is None:
                i = index[stage.key()] = len(stages)
                stages.append(Stage(stage.lines, stage.shard, stage.scope))
            mine = stages[i]
            stages[i] = Stage(mine.lines, mine.shard, mine.scope, (*mine.phases, stage.phases[p]))
            timeline.append((i, len(stages[i].phases) - 1))
        return Pattern(max(self.n, other.n), tuple(stages), tuple(timeline))

    def scopes(self) -> list[str]:
        """The scopes of the stages, in stage order, once each."""
        return list(dict.fromkeys(stage.scope for stage in self.stages))

    def edges(self) -> list[Edge]:
        """Every rank-to-rank edge with the bytes it carries in all, per byte of S.

        Stage by stage and line by line, each edge of a line once (in the order it first
        sends), its share summed exactly over the stage's rounds and then scaled by the
        stage's shard: a topology routes each edge and adds ``share · S`` to its links.
        """
        out: list[Edge] = []
        for stage in self.stages:
            totals: dict[tuple[int, int], Fraction] = {}
            for phase in stage.phases:
                for r in phase.rounds:
                    for pair in r.sends:
                        totals[pair] = totals.get(pair, Fraction(0)) + r.chunk * r.repeat
            num, den = stage.shard.numerator, stage.shard.denominator
            for line in stage.lines:
                out += [(line[s], line[t], float(v) * num / den) for (s, t), v in totals.items()]
        return out

    def steps(self, scope: str) -> Iterator[tuple[Stage, list[tuple[int, int, float]]]]:
        """The distinct exchanges of the stages of ``scope``, for bottleneck pricing.

        In time order, each as (stage, its ``(src, dst, share)`` position triples),
        ``share`` being a send's part of its exchange's volume (1, or 1/2 in each of two
        streamed trees): a flow at rate r stands for a link of bandwidth r / share.
        """
        seen: set[tuple[int, tuple[tuple[int, int, float], ...]]] = set()
        for i, p in self.timeline:
            stage = self.stages[i]
            if stage.scope != scope:
                continue
            phase = stage.phases[p]
            for group in _exchanges(phase):
                volume = sum((r.chunk for r in group), Fraction(0)) if phase.pipelined else None
                step = [
                    (s, t, float(r.chunk / (volume or r.volume))) for r in group for s, t in r.sends
                ]
                key = (i, tuple(step))
                if step and key not in seen:
                    seen.add(key)
                    yield stage, step


def _cost(phase: Phase, scale: Fraction) -> Cost:
    rounds = phase.rounds
    if not rounds:
        return Cost(0, True, 0, 1, 0.0)
    if phase.pipelined:
        volume = sum((r.chunk for r in rounds), Fraction(0)) * scale
        return Cost(max(r.depth for r in rounds), False, 0, 1, float(volume))
    count = sum(r.repeat for r in rounds)
    volumes = [r.volume * scale for r in rounds]
    v = volumes[0]
    if all(w == v for w in volumes):
        return Cost(count, True, v.numerator, v.denominator, float(v))
    total = sum((w * r.repeat for w, r in zip(volumes, rounds, strict=True)), Fraction(0))
    return Cost(count, False, 0, 1, float(total))


def _exchanges(phase: Phase) -> Iterable[tuple[Round, ...]]:
    """The rounds of a phase that run at once: all of a pipelined phase, else each alone."""
    if phase.pipelined:
        return [phase.rounds] if phase.rounds else []
    return [(r,) for r in phase.rounds]


def single(n: int, stage: Stage) -> Pattern:
    """A pattern of one stage, its phases in order."""
    return Pattern(n, (stage,), tuple((0, p) for p in range(len(stage.phases))))
