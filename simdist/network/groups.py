"""The max-min fair allocation of one set of links, kept up to date incrementally.

The allocation partitions the flows by bottleneck: the flows fixed at one link share one
level. Each such set is a :class:`Group`, and a group is processor sharing: its members
progress at one speed, so one *virtual clock* per group (the work a member has done since
the group's clock started) gives every member's finish as a fixed tag, kept in a heap
(Demers, Keshav & Shenker 1989, "Analysis and simulation of a fair queueing algorithm",
virtual time; Parekh & Gallager 1993 for generalised processor sharing). A flow joining
or leaving a group changes the group's level and clock in O(log n), not every member's
finish.

The allocation stays max-min as long as every group's bottleneck is full, every flow
crossing it that is fixed elsewhere (a *stranger*) gets no more than the group's level,
and every other link the members cross has room: a link M crossed by flows of total
weight W_M is never over capacity while every group on it has a level ≤ C_M / W_M (the
group's *theta*, kept as a count per value). Those conditions make every flow's
bottleneck a full link on which no flow gets more, the definition of max-min fairness
(Bertsekas & Gallager, *Data Networks*, §6.5.2), so the levels are the progressive
filling's. A change of level passes on to the groups whose bottleneck the members cross
(their strangers' share changed). Where a change breaks a condition (a new bottleneck, a
stranger that would get more, a link that may overflow), progressive filling
(:mod:`simdist.network.maxmin`) solves just the groups involved, with every other flow
held at its level, taking in held groups only when that cannot be right; the whole
connected component is solved only as a last resort — SimGrid's selective update solves
the component for every change (simgrid/simgrid @12a63c7, ``src/kernel/lmm/System.cpp``,
``update_modified_cnst_set_rec``; Casanova et al. 2014, "Versatile, scalable, and
accurate simulation of distributed applications and platforms", JPDC 74(10)).

A group a solve leaves over its theta (feasible, but not by theta) is *uncertified*: it,
and every group whose members share a link with it, raises its level only through a
solve. Each link's book logs what crosses it for the telemetry
(:mod:`simdist.network.load_steps`). Pure bookkeeping on times given by the caller
(:class:`~simdist.network.fair.FairShare` owns the clock): no SimPy, no JAX.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Protocol

from simdist.network.maxmin import progressive_filling

#: The slowest speed a flow is given: rounding can leave a link a hair short of a share.
MIN_SPEED = 1e-12
#: Levels this close (relative) count as equal in the max-min conditions: rounding.
TOLERANCE = 1e-12
#: Rounds of levelling and local solves in one settle before the components the changes
#: touch are solved in full (changes that keep moving each other).
MAX_ROUNDS = 32
#: Times a local solve may take in more groups before its components are solved in full.
MAX_GROW = 8


class SharedLink(Protocol):
    """What fair sharing needs of a link (:class:`simdist.network.link.Link` is one)."""

    name: str
    bandwidth_Bps: float
    flows: dict[Any, None]  # the flows crossing it, in arrival order
    share: Any  # its LinkShare, made by FairShare on first use
    load_log: list[Any]  # see simdist.network.load_steps


class Flow:
    """One flow: its links, its work, its group and its finish tag in the group's clock."""

    __slots__ = (
        "active",
        "bps",
        "callback",
        "gen",
        "group",
        "links",
        "ref_Bps",
        "remaining_s",
        "scale",
        "seq",
        "tag",
        "weights",
    )

    def __init__(
        self,
        links: Sequence[SharedLink],
        work_s: float,
        weights: Sequence[float],
        bps: Sequence[float],
        ref_Bps: float,
        callback: Callable[[], None],
        seq: int,
    ) -> None:
        self.links = links
        self.weights = weights  # capacity units consumed per unit of level, per link
        self.bps = bps  # bytes/s put on each link at full speed (telemetry)
        self.ref_Bps = ref_Bps  # level at which the flow runs at full speed
        self.remaining_s = work_s  # while in no group; then kept as ``tag``
        self.seq = seq
        self.callback = callback
        self.active = True
        self.group: Group | None = None
        self.tag = 0.0  # the group's clock reading at which the flow is done
        self.scale = 1.0  # ref_Bps / the group's ref_Bps: work in the group's seconds
        self.gen = 0  # bumped when its entry in its group's heap goes stale


class Group:
    """The flows fixed at one bottleneck link: one level, one speed, one virtual clock.

    ``clock_s`` is the work (seconds at full speed, for a member whose ``ref_Bps`` is the
    group's) every member has done since the group started, read at ``since_s``; a member
    is done when the clock reaches its ``tag``. ``times``/``speeds``/``clocks`` is the
    speed's history and the clock at each change, for the links' telemetry.
    """

    __slots__ = (
        "alive",
        "clock_s",
        "clocks",
        "crossed",
        "extra",
        "extras",
        "gen",
        "heap",
        "level",
        "link",
        "ref_Bps",
        "since_s",
        "size",
        "speed",
        "speeds",
        "taint",
        "theta",
        "times",
        "uncertified",
        "units",
    )

    def __init__(self, link: SharedLink, ref_Bps: float, level: float, speed: float, now: float):
        self.link = link
        self.ref_Bps = ref_Bps
        self.level = level
        self.speed = speed
        self.clock_s = 0.0
        self.since_s = now
        self.heap: list[tuple[float, int, int, Flow]] = []
        self.size = 0
        self.units = 0  # members of weight 1 on the bottleneck (counted exactly)
        self.extra = 0.0  # the other members' weights on it
        self.extras = 0
        self.crossed: dict[Any, int] = {}  # other groups' bottlenecks its members cross
        self.theta: dict[float, int] = {}  # C_M / W_M of every other link a member crosses
        # Over its theta when a solve made it (feasible, but not by theta): it and every
        # group whose members share a link with it (``taint`` > 0) rise only by a solve.
        self.uncertified = False
        self.taint = 0  # Σ over (member, link besides the bottleneck) of link.tainted
        self.alive = True
        self.gen = 0
        self.times = [now]
        self.speeds = [speed]
        self.clocks = [0.0]  # the clock at each of ``times``

    def weight(self) -> float:
        """The members' total weight on the bottleneck."""
        return self.units + self.extra if self.extras else float(self.units)

    def advance(self, now: float) -> None:
        """Read the clock at ``now``."""
        if self.since_s != now:
            self.clock_s += self.speed * (now - self.since_s)
            self.since_s = now

    def top(self) -> tuple[float, int]:
        """The tag and sequence number of the member done first."""
        heap = self.heap
        while heap[0][2] != heap[0][3].gen:
            heapq.heappop(heap)
        return heap[0][0], heap[0][1]

    def finish_of(self, tag: float) -> float:
        """When a member with ``tag`` is done, at the current speed."""
        return self.since_s + max(tag - self.clock_s, 0.0) / self.speed


class LinkShare:
    """Fair sharing's book of one link: the weight crossing it, the groups on it (with
    their bytes/s at speed 1, members, members not at their bottleneck, and weight), and
    its own group if it is a bottleneck."""

    __slots__ = ("extra", "extras", "group", "members", "strangers", "tainted", "units")

    def __init__(self) -> None:
        self.units = 0
        self.extra = 0.0
        self.extras = 0
        # group → [bytes/s at speed 1, members, members not at their bottleneck, weight]
        self.members: dict[Group, list[Any]] = {}
        self.group: Group | None = None
        self.strangers = 0  # flows crossing it fixed at another bottleneck
        self.tainted = 0  # members of uncertified groups crossing it besides their bottleneck

    def weight(self) -> float:
        return self.units + self.extra if self.extras else float(self.units)


def _share(link: SharedLink) -> LinkShare:
    share = link.share
    if share is None:
        share = link.share = LinkShare()
    return share


def _clamp(speed: float) -> float:
    """A speed from level / ref: at least MIN_SPEED, and 1 where rounding put it a hair
    above. A group's speed may exceed 1 for real: it is measured in the ref of the member
    that made it, which may have left a faster one behind."""
    if speed > 1.0:
        return 1.0 if speed < 1.0 + 1e-9 else speed
    return max(speed, MIN_SPEED)


def _theta_min(group: Group) -> float:
    return min(group.theta) if group.theta else float("inf")


class Allocation:
    """The groups of one set of links and the changes waiting to be settled."""

    def __init__(self) -> None:
        self.version = 0  # bumped by every change: links' telemetry is rebuilt after one
        self.solves = 0  # local or full solves (a measure, for benchmarks and tests)
        self._loose: dict[Flow, None] = {}  # flows started this instant in no group yet
        self._relevel: dict[Group, None] = {}  # groups whose members or bottleneck changed
        self._check: dict[Group, None] = {}  # groups to check against their theta
        # Groups a solve made in this settle, exact as made (not checked against their
        # theta: a group over it is marked uncertified instead); changing one takes it out.
        self._made: set[Group] = set()

    def enter(self, flow: Flow, now: float) -> None:
        """A flow started on links others use: into a group now, or placed at the settle."""
        if not self._join(flow, now):
            self._loose[flow] = None

    def start_alone(self, flow: Flow, now: float) -> Group:
        """A flow on links nobody else uses: its own group, at full speed, done in
        ``work_s`` (see :meth:`_start_alone`)."""
        return self._start_alone(flow, now)

    def remove(self, flow: Flow, now: float, shared: bool) -> bool:
        """``flow`` left its links (``shared``: some still carry others); whether the
        others need settling."""
        group = flow.group
        if group is None:  # started this instant, not placed yet: nothing to undo
            self._loose.pop(flow, None)
            return False
        self._drop(group, flow, now)
        if shared or group.size:
            return True
        self._dissolve(group)  # alone on its links (so the last of its group)
        return False

    def speed(self, flow: Flow) -> float:
        """``flow``'s current speed (fraction of its full rate), as of the last settle."""
        group = flow.group
        if group is None:
            raise ValueError("the flow is not running (done, stopped, or not yet settled)")
        return group.speed if flow.scale == 1.0 else min(1.0, group.speed / flow.scale)

    def settle(self, now: float) -> dict[Group, None]:
        """Bring the levels up to date with this instant's changes; the groups whose
        finish may have moved.

        Until nothing is left: groups whose members or bottleneck changed get their new
        level, ``(C − what strangers take) / W``, and pass the change on to the groups
        whose bottleneck their members cross; groups whose level rose or whose links got
        busier are checked against their theta. A group that fails a condition, and a
        flow not placed yet, is solved again with progressive filling, alone with what
        it touches (:meth:`_regroup`).
        """
        changed: dict[Group, None] = {}
        made = self._made
        made.clear()
        for _ in range(MAX_ROUNDS):
            suspects: dict[Group, None] = {}
            for _ in range(MAX_ROUNDS):
                if not self._relevel:
                    break
                relevel, self._relevel = self._relevel, {}
                for group in relevel:
                    self._level(group, now, changed, suspects)
            else:  # levels that keep moving each other: solved in full below
                self._check.update(suspects)
                break
            check, self._check = self._check, {}
            for group in check:
                if (
                    group.alive
                    and group not in made
                    and group.level > _theta_min(group) * (1 + TOLERANCE)
                ):
                    suspects[group] = None
            if not suspects and not self._loose:
                break
            if not suspects:
                for flow in list(self._loose):
                    if not flow.active or flow.group is not None:
                        del self._loose[flow]
                    elif self._place(flow, now, changed, made):
                        del self._loose[flow]
                if not self._loose:
                    continue
            self._regroup(suspects, now, changed, made)
        if self._relevel or self._check or self._loose:
            # the changes keep moving each other: solve what they touch in full
            self._solve_all(now, changed, made)
        return changed

    def _start_alone(self, flow: Flow, now: float) -> Group:
        """A flow on links nobody else uses: its own group, at full speed, done in ``work_s``.

        Its bottleneck is its tightest link (the first by order among equals), as
        progressive filling would fix it.
        """
        best, best_level = 0, 0.0
        for i, (link, w) in enumerate(zip(flow.links, flow.weights, strict=True)):
            level = link.bandwidth_Bps / w if w > 0 else float("inf")
            if i == 0 or level < best_level:
                best, best_level = i, level
        link = flow.links[best]
        group = Group(link, flow.ref_Bps, best_level, 1.0, now)
        _share(link).group = group
        self._add(group, flow, now)
        return group

    def _join(self, flow: Flow, now: float) -> bool:
        """Add ``flow`` to the group of the lowest level among the bottlenecks it crosses
        (a stranger on the others); False when it crosses none. The settle checks it."""
        best = None
        for link in flow.links:
            group = _share(link).group
            if group is not None and (best is None or group.level < best.level):
                best = group
        if best is None:
            return False
        self._add(best, flow, now)
        return True

    def _add(self, group: Group, flow: Flow, now: float) -> None:
        """Make ``flow`` a member of ``group`` and enter it in its links' books; the groups
        whose level or theta this changes are marked for the settle."""
        self.version += 1
        self._made.discard(group)
        flow.group = group
        scale = 1.0 if flow.ref_Bps == group.ref_Bps else flow.ref_Bps / group.ref_Bps
        flow.scale = scale
        group.advance(now)
        flow.tag = group.clock_s + (flow.remaining_s if scale == 1.0 else flow.remaining_s * scale)
        flow.gen += 1
        heapq.heappush(group.heap, (flow.tag, flow.seq, flow.gen, flow))
        group.size += 1
        bottleneck = group.link
        check, relevel = self._check, self._relevel
        relevel[group] = None
        check[group] = None
        for link, w, bps in zip(flow.links, flow.weights, flow.bps, strict=True):
            share = _share(link)
            old = link.bandwidth_Bps / share.weight() if share.units or share.extras else 0.0
            if w == 1.0:
                share.units += 1
            else:
                share.extra += w
                share.extras += 1
            new = link.bandwidth_Bps / share.weight()
            members = share.members
            if old:
                for other, entry in members.items():
                    if entry[2]:
                        _move(other.theta, old, new, entry[2])
                    check[other] = None
            entry = members.get(group)
            if entry is None:
                entry = members[group] = [0.0, 0, 0, 0.0]
            entry[0] += bps if scale == 1.0 else bps / scale
            entry[1] += 1
            entry[3] += w
            if link is bottleneck:
                if w == 1.0:
                    group.units += 1
                else:
                    group.extra += w
                    group.extras += 1
            else:
                if group.uncertified:
                    share.tainted += 1
                    for other, other_entry in members.items():
                        other.taint += other_entry[2]
                entry[2] += 1
                group.taint += share.tainted
                group.theta[new] = group.theta.get(new, 0) + 1
                owner = share.group
                if owner is not None:
                    share.strangers += 1
                    group.crossed[link] = group.crossed.get(link, 0) + 1
                    relevel[owner] = None
            _log(link, share, now)

    def _drop(self, group: Group, flow: Flow, now: float) -> None:
        """Take ``flow`` out of ``group`` and its links' books (its links' flows already
        lost it); the groups whose level may change are marked for the settle."""
        self.version += 1
        self._made.discard(group)
        group.advance(now)
        flow.remaining_s = max(flow.tag - group.clock_s, 0.0) / flow.scale
        flow.group = None
        flow.gen += 1
        group.size -= 1
        bottleneck = group.link
        relevel = self._relevel
        relevel[group] = None
        scale = flow.scale
        for link, w, bps in zip(flow.links, flow.weights, flow.bps, strict=True):
            share = link.share
            old = link.bandwidth_Bps / share.weight()
            if w == 1.0:
                share.units -= 1
            else:
                share.extras -= 1
                share.extra = share.extra - w if share.extras else 0.0
            members = share.members
            entry = members[group]
            entry[1] -= 1
            if entry[1]:
                entry[0] -= bps if scale == 1.0 else bps / scale
                entry[3] -= w
            if link is bottleneck:
                if w == 1.0:
                    group.units -= 1
                else:
                    group.extras -= 1
                    group.extra = group.extra - w if group.extras else 0.0
            else:
                entry[2] -= 1
                group.taint -= share.tainted
                if group.uncertified:
                    share.tainted -= 1
                    for other, other_entry in members.items():
                        other.taint -= other_entry[2]
                _move(group.theta, old, None, 1)
                owner = share.group
                if owner is not None:
                    share.strangers -= 1
                    _move(group.crossed, link, None, 1)
                    relevel[owner] = None
            if not entry[1]:
                del members[group]
            if share.units or share.extras:
                new = link.bandwidth_Bps / share.weight()
                for other, other_entry in members.items():
                    if other_entry[2]:
                        _move(other.theta, old, new, other_entry[2])
            _log(link, share, now)

    def _dissolve(self, group: Group) -> None:
        """``group`` is gone (no members, or regrouped): its link is no bottleneck now."""
        group.alive = False
        group.gen += 1
        share = group.link.share
        if share.group is group:
            share.group = None
            share.strangers = 0
            link = group.link
            for other, entry in share.members.items():
                if other is not group and entry[2]:
                    _move(other.crossed, link, None, entry[2])

    def _level(
        self,
        group: Group,
        now: float,
        changed: dict[Group, None],
        suspects: dict[Group, None],
    ) -> None:
        """Give ``group`` the level its bottleneck leaves it, if that keeps it max-min."""
        if not group.alive:
            return
        if not group.size:
            self._dissolve(group)
            return
        share = group.link.share
        avail = group.link.bandwidth_Bps
        for other, entry in share.members.items():
            if other is not group:
                avail -= other.level * entry[3]
        level = max(avail, 0.0) / group.weight()
        for other in share.members:
            if other is not group and other.level > level * (1 + TOLERANCE):
                suspects[group] = suspects[other] = None  # a stranger would get more here
                return
        changed[group] = None  # its members changed, or what its bottleneck leaves it
        if level == group.level:
            return
        if level > group.level and (group.uncertified or group.taint):
            suspects[group] = None
            return
        self._set_level(group, level, now)
        changed[group] = None
        self._check[group] = None
        for link in group.crossed:
            owner = link.share.group
            if owner is not None:
                self._relevel[owner] = None

    def _set_level(self, group: Group, level: float, now: float) -> None:
        group.level = level
        speed = _clamp(level / group.ref_Bps)
        if speed != group.speed:
            group.advance(now)
            group.speed = speed
            times = group.times
            if times[-1] == now:
                group.speeds[-1] = speed
            else:
                times.append(now)
                group.speeds.append(speed)
                group.clocks.append(group.clock_s)
            self.version += 1

    def _regroup(
        self,
        suspects: dict[Group, None],
        now: float,
        changed: dict[Group, None],
        made: set[Group],
    ) -> None:
        """Solve the suspect groups' members and the flows not placed yet by progressive
        filling, with every other flow held at its level, and regroup them by bottleneck.

        The held flows' groups join the solve when that cannot be right: when a solved
        flow would be fixed at a held group's bottleneck, or a held flow crossing a new
        bottleneck would get more there than its flows. Past :data:`MAX_GROW` rounds the
        connected components are solved in full.
        """
        region: dict[Group, None] = {g: None for g in suspects if g.alive}
        loose = list(self._loose)
        self._loose = {}
        if len(region) == 1 and not loose:
            (single,) = region
            if single.size == 1:  # one flow: held against the rest, as a new one is
                (flow,) = _members(single)
                self._drop(single, flow, now)
                self._dissolve(single)
                region, loose = {}, [flow]
        if not region:
            kept = []
            for flow in loose:
                if flow.active and flow.group is None and not self._place(flow, now, changed, made):
                    kept.append(flow)
            loose = kept
            if not loose:
                return
        loose = [flow for flow in loose if flow.active and flow.group is None]
        for _ in range(MAX_GROW):
            flows = sorted([*loose, *(f for g in region for f in _members(g))], key=_SEQ)
            seen: dict[int, SharedLink] = {}
            for flow in flows:
                for link in flow.links:
                    seen.setdefault(id(link), link)
            links = sorted(seen.values(), key=_NAME)
            capacity = []
            for link in links:
                left = link.bandwidth_Bps
                share = _share(link)
                for other, entry in share.members.items():
                    if other not in region:
                        left -= other.level * entry[3]
                capacity.append(left)
            levels, fixed_at = progressive_filling(links, flows, capacity)
            grow: dict[Group, None] = {}
            level_at: dict[int, float] = {}
            for j, i in enumerate(fixed_at):
                level_at[i] = levels[j]
            for i, level in level_at.items():
                share = links[i].share
                owner = share.group
                if owner is not None and owner not in region:
                    grow[owner] = None
                for other in share.members:
                    if other not in region and other.level > level * (1 + TOLERANCE):
                        grow[other] = None
            if not grow:
                break
            region.update(grow)
        else:
            self._solve_components(flows, now, changed, made)
            return
        self.solves += 1
        for group in region:
            for flow in _members(group):
                self._drop(group, flow, now)
            self._dissolve(group)
        groups: dict[int, Group] = {}
        for j, flow in enumerate(flows):
            i = fixed_at[j]
            if i not in groups:
                level = levels[j]
                group = groups[i] = Group(
                    links[i], flow.ref_Bps, level, _clamp(level / flow.ref_Bps), now
                )
                links[i].share.group = group
                # flows held elsewhere that cross the new bottleneck are its strangers
                share = links[i].share
                for other, entry in share.members.items():
                    if entry[2]:
                        share.strangers += entry[1]
                        other.crossed[links[i]] = other.crossed.get(links[i], 0) + entry[1]
        for j, flow in enumerate(flows):
            self._add(groups[fixed_at[j]], flow, now)
        self._settled(list(groups.values()), changed, made)

    def _place(self, flow: Flow, now: float, changed: dict[Group, None], made: set[Group]) -> bool:
        """Progressive filling for one new flow with every other flow held: its level is
        the least its links leave it, at the first such link; there it joins the group,
        or starts one if no held flow crossing the link gets more. False to solve with
        the general case (:meth:`_regroup`)."""
        best, best_level = None, 0.0
        for link, w in zip(flow.links, flow.weights, strict=True):
            left = link.bandwidth_Bps
            for other, entry in _share(link).members.items():
                left -= other.level * entry[3]
            level = max(left, 0.0) / w
            if best is None or level < best_level:
                best, best_level = link, level
        assert best is not None
        share = best.share
        if share.group is not None:
            self._add(share.group, flow, now)
            return True
        limit = best_level * (1 + TOLERANCE)
        for other in share.members:
            if other.level > limit:
                return False
        self.solves += 1
        group = Group(best, flow.ref_Bps, best_level, _clamp(best_level / flow.ref_Bps), now)
        share.group = group
        for other, entry in share.members.items():
            if entry[2]:
                share.strangers += entry[2]
                other.crossed[best] = other.crossed.get(best, 0) + entry[2]
        self._add(group, flow, now)
        made.add(group)
        changed[group] = None
        self._relevel.pop(group, None)
        self._certify(group)
        return True

    def _settled(self, groups: list[Group], changed: dict[Group, None], made: set[Group]) -> None:
        """Groups just made by a solve: exact as made, and certified (:meth:`_certify`)."""
        for group in groups:
            made.add(group)
            changed[group] = None
            self._relevel.pop(group, None)
        for group in groups:
            self._certify(group)

    def _certify(self, group: Group) -> None:
        """Mark ``group`` uncertified if a solve left it over its theta, and taint the
        links its members cross besides its bottleneck."""
        if group.level <= _theta_min(group) * (1 + TOLERANCE):
            return
        group.uncertified = True
        bottleneck = group.link
        for flow in _members(group):
            for link in flow.links:
                if link is not bottleneck:
                    share = link.share
                    share.tainted += 1
                    for other, entry in share.members.items():
                        other.taint += entry[2]

    def _solve_components(
        self,
        flows: list[Flow],
        now: float,
        changed: dict[Group, None],
        made: set[Group],
    ) -> None:
        """Solve in full every connected component ``flows`` touch."""
        seen: set[int] = set()
        for flow in flows:
            for link in flow.links:
                if id(link) not in seen and link.flows:
                    self._solve(*_component(link, seen), now, changed, made)

    def _solve_all(self, now: float, changed: dict[Group, None], made: set[Group]) -> None:
        """Solve in full every component with a change still pending."""
        pending = [*self._loose]
        for group in (*self._relevel, *self._check):
            if group.alive:
                pending.extend(_members(group))
        self._relevel, self._check, self._loose = {}, {}, {}
        self._solve_components(pending, now, changed, made)

    def _solve(
        self,
        links: list[SharedLink],
        flows: list[Flow],
        now: float,
        changed: dict[Group, None],
        made: set[Group],
    ) -> None:
        """Solve one connected component in full and regroup its flows by bottleneck."""
        self.solves += 1
        for flow in flows:
            group = flow.group
            if group is not None:
                self._drop(group, flow, now)
                if group.alive and not group.size:
                    self._dissolve(group)
            self._loose.pop(flow, None)
        if len(flows) == 1:
            group = self._start_alone(flows[0], now)
            self._settled([group], changed, made)
            return
        levels, fixed_at = progressive_filling(links, flows)
        groups: dict[int, Group] = {}
        for j, flow in enumerate(flows):
            i = fixed_at[j]
            if i not in groups:
                groups[i] = Group(
                    links[i], flow.ref_Bps, levels[j], _clamp(levels[j] / flow.ref_Bps), now
                )
                _share(links[i]).group = groups[i]
        for j, flow in enumerate(flows):
            self._add(groups[fixed_at[j]], flow, now)
        self._settled(list(groups.values()), changed, made)


def _move(counts: dict[Any, int], old: Any, new: Any, count: int) -> None:
    """Move ``count`` of ``old``'s count to ``new`` (None: drop them)."""
    left = counts[old] - count
    if left:
        counts[old] = left
    else:
        del counts[old]
    if new is not None:
        counts[new] = counts.get(new, 0) + count


def _members(group: Group) -> list[Flow]:
    """``group``'s members (its heap's entries that are not stale)."""
    return [entry[3] for entry in group.heap if entry[2] == entry[3].gen]


def _log(link: SharedLink, share: LinkShare, now: float) -> None:
    """Note in ``link``'s load log what crosses it from ``now`` on (load_steps)."""
    log = link.load_log
    carried = tuple([(group, entry[0]) for group, entry in share.members.items()])
    if log and log[-1][0] == now:
        log[-1] = (now, carried)
    else:
        log.append((now, carried))


def _component(start: SharedLink, seen: set[int]) -> tuple[list[SharedLink], list[Flow]]:
    """The links and flows connected to ``start`` through shared flows, in a stable order."""
    links = [start]
    flows: dict[Flow, None] = {}
    seen.add(id(start))
    for link in links:  # grows as links are found: each link is visited once
        for flow in link.flows:
            if flow not in flows:
                flows[flow] = None
                for other in flow.links:
                    if id(other) not in seen:
                        seen.add(id(other))
                        links.append(other)
    links.sort(key=_NAME)
    return links, sorted(flows, key=_SEQ)


_NAME, _SEQ = attrgetter("name"), attrgetter("seq")  # sort keys called in C
