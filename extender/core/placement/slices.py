"""Slices: every run of S consecutive ranks of a gang inside one domain of a slice level.

A gang may ask (``railyard.io/slice-size`` and ``railyard.io/slice-required-topology``, or
Kueue's ``podset-slice-*``) that its GPU members, in rank order, be cut into slices of S pods,
each inside one domain of level L: a tensor-parallel group in one NVLink domain. The gang as
a whole still lands at the narrowest level that holds it, inside its required level; the
planner calls ``pack`` for each domain of that level, and the gang takes the one whose slices
span the fewest domains below it (each level in turn, then nodes), the best fit among equals.

Inside that domain, slices of one shape use the fewest domains at every level down to L, in
whole slices (``packing.fewest_domains``): the largest domains first until one holds the rest,
then the best fit for the rest, so a domain fills before the next opens (as Kueue's TAS packs
them, kubernetes-sigs/kueue@v0.17.0 pkg/cache/scheduler/tas_flavor_snapshot.go). An L-domain
given k slices holds their k x S pods over the fewest domains below it, and the slices follow
its nodes in depth-first order, so slice k+1 sits next to slice k.

Slices that mix shapes are packed one at a time in rank order, first-fit decreasing as mixed
gangs are, by the same rule as near as one slice at a time can follow it: into an L-domain
earlier slices opened while one holds the slice (it fills before the next opens), else the best
fit among the L-domains with the GPUs of every slice left, else the largest.

Exclusive slices (a JobSet with exclusive placement: ``GangSpec.exclusive``) are the gang's
parts, slice k holding the members of part k and the slots of its members not created yet;
each takes an L-domain no other slice of the gang takes, one at a time in part order: the best
fit (least free GPUs) among the L-domains not yet taken that hold it, so large domains stay
whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from extender.core.model import GangSpec, Member
from extender.core.placement.packing import Left, PodClass, Taken, Units, allocate, fewest_domains, rank_order
from extender.core.cluster.state import View
from extender.core.cluster.topology import Domain, Fabric, Topology


@dataclass(frozen=True)
class SliceRule:
    size: int
    """GPU pods per slice."""
    level: int
    """The level each slice stays inside (an index into the topology's levels)."""
    exclusive: bool = False
    """Each slice in a domain of ``level`` of its own (``GangSpec.exclusive``)."""


def resolve(gang: GangSpec, topo: Topology, bound: int, preferred: int | None,
            fabric: Fabric | None = None) -> tuple[SliceRule | None, list[str]]:
    """The gang's slice rule for this topology (by name among a fabric's levels, if any), or
    the problems with it."""
    if not gang.slice_size or gang.slice_level is None:
        return None, []
    level = topo.level_index(gang.slice_level, fabric)
    if level is None:
        known = ", ".join(lvl.key for i, lvl in enumerate(topo.levels) if fabric is None or i in fabric.levels)
        where = "this cluster" if fabric is None else f"pool {fabric.name}"
        return None, [f"slice topology level {gang.slice_level!r} is not a level of {where} (levels: {known or 'none'})"]
    outer, which = (bound, gang.required) if gang.required is not None else (preferred, gang.preferred)
    if outer is not None and level < outer:
        kind = "required" if gang.required is not None else "preferred"
        return None, [f"slice level {gang.slice_level} is wider than the gang's {kind} level {which}"]
    return SliceRule(gang.slice_size, level, gang.exclusive), []


def runs(gang: GangSpec, rule: SliceRule) -> list[list[Member]]:
    """The GPU members of each slice, in rank order: runs of ``rule.size`` members by rank; with
    exclusive slices, the members of each part. A slice with fewer members than its size gets
    the slots of members not created yet."""
    gpu = [m for m in rank_order(gang.members) if m.gpus > 0]
    count = sum(1 for gpus, _ in gang.slots() if gpus > 0) // rule.size
    if rule.exclusive:
        return [[m for m in gpu if m.part == k] for k in range(count)]
    return [gpu[k * rule.size:(k + 1) * rule.size] for k in range(count)]


def cut(gang: GangSpec, classes: list[PodClass], rule: SliceRule) -> list[list[PodClass]]:
    """The gang's slices (``runs``), each as its own count of every class (indexes kept): its
    members, then the members not created yet, which look like the commonest one."""
    index = {(c.gpus, c.eligibility): k for k, c in enumerate(classes)}
    missing = [index[shape] for shape in gang.slots()[len(gang.members):] if shape[0] > 0]
    out = []
    for run in runs(gang, rule):
        counts = [0] * len(classes)
        for m in run:
            counts[index[(m.gpus, m.eligibility)]] += 1
        for k in missing[:rule.size - len(run)]:
            counts[k] += 1
        missing = missing[rule.size - len(run):]
        out.append([c.counted(n) for c, n in zip(classes, counts)])
    return out


def pack(view: View, avail: list[int], dom: Domain, slices: list[list[PodClass]], rule: SliceRule) -> list[Taken] | int:
    """What each slice takes inside dom, in rank order; or, when they do not all fit, how many
    whole slices did."""
    if slices and len(slices[0]) == 1 and not rule.exclusive:
        return _pack_one_shape(view, avail, dom, slices, rule.level)
    left = Left(view, avail)
    domains = _SliceDomains(view.topology, left, dom, rule, slices[0] if slices else [])
    rest = [*accumulate(sum(c.gpus * c.count for c in piece) for piece in reversed(slices))][::-1]
    parts: list[Taken] = []
    for k, piece in enumerate(slices):
        taken = domains.place(piece, rest[k])
        if taken is None:
            return len(parts)
        parts.append(taken)
    return parts


def whole_slices(view: View, avail: list[int], dom: Domain, slices: list[list[PodClass]], rule: SliceRule) -> int:
    """How many of the slices dom holds: for pods of one shape, each slice-level domain's slots
    // slice size (exact); else (and for exclusive slices) as many as ``pack`` places."""
    if not slices or len(slices[0]) != 1 or rule.exclusive:
        parts = pack(view, avail, dom, slices, rule)
        return len(parts) if isinstance(parts, list) else parts
    return min(len(slices), _slice_units(view, avail, dom, slices[0][0], rule.level).cap(dom.level, dom.index))


def _slice_units(view: View, avail: list[int], dom: Domain, c: PodClass, level: int) -> Units:
    """Whole slices of ``c.count`` pods per domain of the slice level inside dom (or dom itself,
    when it lies inside one)."""
    topo = view.topology
    lvl = max(level, dom.level)
    first, last = topo.node_domain[lvl][dom.start], topo.node_domain[lvl][dom.end - 1]
    spans = [(topo.start[lvl][d], topo.end[lvl][d]) for d in range(first, last + 1)]
    held = [sum(c.cap[a:b]) // c.count for a, b in spans]
    free = [sum(avail[a:b]) for a, b in spans]
    return Units(topo, [0, *accumulate(held)], [0, *accumulate(free)], first, level=lvl)


def _pack_one_shape(view: View, avail: list[int], dom: Domain, slices: list[list[PodClass]],
                    level: int) -> list[Taken] | int:
    """Slices of one shape: the slice-level domains they use are the fewest at every level
    (``fewest_domains`` counting whole slices), each then holds its k slices (k x S pods) over the
    fewest domains below it, and the slices follow the nodes in depth-first order."""
    topo, c = view.topology, slices[0][0]
    units = _slice_units(view, avail, dom, c, level)
    have = units.cap(dom.level, dom.index)
    if have < len(slices):
        return have
    pods = Units(topo, [0, *accumulate(c.cap[dom.start:dom.end])], [0, *accumulate(avail[dom.start:dom.end])],
                 dom.start)
    seats: list[int] = []
    for d, k in fewest_domains(topo, dom, len(slices), c.gpus * c.count, units, max(level, dom.level)):
        within = topo.domain(max(level, dom.level), d) if max(level, dom.level) > dom.level else dom
        for node, n in fewest_domains(topo, within, k * c.count, c.gpus, pods, topo.depth):
            seats.extend([node] * n)
    parts: list[Taken] = []
    for start in range(0, len(seats), c.count):
        taken: Taken = {}
        for node in seats[start:start + c.count]:
            taken.setdefault(node, {0: 0})[0] += 1
        parts.append(taken)
    return parts


class _SliceDomains:
    """The domains of the slice level inside the gang's domain, with the free GPUs and the slots
    each still has per class, and which ones earlier slices opened."""

    def __init__(self, topo: Topology, left: Left, dom: Domain, rule: SliceRule, classes: list[PodClass]) -> None:
        self.topo, self.left, self.exclusive = topo, left, rule.exclusive
        level = rule.level
        if level <= dom.level:
            self.domains = [dom]  # the gang's domain lies inside one domain of the slice level
        else:
            first, last = topo.node_domain[level][dom.start], topo.node_domain[level][dom.end - 1]
            self.domains = [topo.domain(level, d) for d in range(first, last + 1)]
        self.free = [sum(left.gpus_in(d.start, d.end)) for d in self.domains]
        self.slots = [[sum(c.cap[d.start:d.end]) for d in self.domains] for c in classes]
        self.opened: set[int] = set()

    def place(self, piece: list[PodClass], rest: int) -> Taken | None:
        """The slice into, in turn: a domain earlier slices opened (least free first), so it
        fills before the next opens; else the best fit among the domains with the GPUs of this
        and every later slice (``rest``); else the largest. Exclusive slices: the best fit among
        the domains no earlier slice took. None: no domain holds it."""
        need = sum(c.gpus * c.count for c in piece)
        fits = [d for d, free in enumerate(self.free)
                if free >= need and all(c.count <= self.slots[k][d] for k, c in enumerate(piece))]
        fresh = [d for d in fits if d not in self.opened]
        if self.exclusive:
            order = sorted(fresh, key=lambda d: (self.free[d], d))
        else:
            opened = sorted((d for d in fits if d in self.opened), key=lambda d: (self.free[d], d))
            whole = sorted((d for d in fresh if self.free[d] >= rest), key=lambda d: (self.free[d], d))
            largest = sorted((d for d in fresh if self.free[d] < rest), key=lambda d: (-self.free[d], d))
            order = [*opened, *whole, *largest]
        for d in order:
            taken = allocate(self.topo, self.left, self.domains[d], piece)
            if taken is None:
                continue
            dom = self.domains[d]
            self.opened.add(d)
            self.free[d] = sum(self.left.gpus_in(dom.start, dom.end))
            for k, c in enumerate(piece):
                self.slots[k][d] = sum(self.left.cap(c, i) for i in range(dom.start, dom.end))
            return taken
        return None
