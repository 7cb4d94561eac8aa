"""Slices: every run of S consecutive ranks of a gang inside one domain of a slice level.

A gang may ask (``railyard.io/slice-size`` and ``railyard.io/slice-required-topology``, or
Kueue's ``podset-slice-*``) that its GPU members, in rank order, be cut into slices of S pods,
each inside one domain of level L: a tensor-parallel group in one NVLink domain. The gang as
a whole still lands at the narrowest level that holds it, inside its required level; the
planner calls ``pack`` for each domain it considers, and the gang takes the first that holds
every slice.

Inside that domain the slices take domains of level L in rank order, each the best fit among
those that still hold it: fewest GPUs left over, ties to the first in depth-first order. A
domain a slice left partly used is the best fit for the next slice while it holds one, so
slice k+1 sits next to slice k and the gang spreads over as few L-domains as it can. Inside
its L-domain a slice takes the fewest child domains, as a whole gang does.

For pods of one shape this is exact: a domain of c free slots holds c // S slices whichever
way earlier slices were placed. Slices that mix shapes are packed first-fit decreasing, as
mixed gangs are.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

from extender.core.model import GangSpec
from extender.core.placement.packing import Left, PodClass, Taken, allocate, rank_order
from extender.core.cluster.state import View
from extender.core.cluster.topology import Domain, Topology


@dataclass(frozen=True)
class SliceRule:
    size: int
    """GPU pods per slice."""
    level: int
    """The level each slice stays inside (an index into the topology's levels)."""


def resolve(gang: GangSpec, topo: Topology, bound: int, preferred: int | None) -> tuple[SliceRule | None, list[str]]:
    """The gang's slice rule for this topology, or the problems with it."""
    if not gang.slice_size or gang.slice_level is None:
        return None, []
    level = topo.level_index(gang.slice_level)
    if level is None:
        known = ", ".join(lvl.key for lvl in topo.levels) or "none"
        return None, [f"slice topology level {gang.slice_level!r} is not a level of this cluster (levels: {known})"]
    outer, which = (bound, gang.required) if gang.required is not None else (preferred, gang.preferred)
    if outer is not None and level < outer:
        kind = "required" if gang.required is not None else "preferred"
        return None, [f"slice level {gang.slice_level} is wider than the gang's {kind} level {which}"]
    return SliceRule(gang.slice_size, level), []


def cut(gang: GangSpec, classes: list[PodClass], size: int) -> list[list[PodClass]]:
    """The gang's slices in rank order, each as its own count of every class (indexes kept):
    members by rank, then the members not created yet, which look like the commonest one."""
    index = {(c.gpus, c.eligibility): k for k, c in enumerate(classes)}
    shapes = [(m.gpus, m.eligibility) for m in rank_order(gang.members)] + gang.slots()[len(gang.members):]
    seats = [index[shape] for shape in shapes if shape[0] > 0]
    out = []
    for start in range(0, len(seats), size):
        counts = [0] * len(classes)
        for k in seats[start:start + size]:
            counts[k] += 1
        out.append([c.counted(n) for c, n in zip(classes, counts)])
    return out


def pack(view: View, avail: list[int], dom: Domain, slices: list[list[PodClass]], level: int) -> list[Taken] | int:
    """What each slice takes inside dom, in rank order; or, when they do not all fit, how many
    whole slices did."""
    left = Left(view, avail)
    domains = _SliceDomains(view.topology, left, dom, level, slices[0] if slices else [])
    parts: list[Taken] = []
    for piece in slices:
        taken = domains.place(piece)
        if taken is None:
            return len(parts)
        parts.append(taken)
    return parts


def whole_slices(view: View, avail: list[int], dom: Domain, slices: list[list[PodClass]], level: int) -> int:
    """How many of the slices dom holds: for pods of one shape, each slice-level domain's slots
    // slice size (exact); else as many as ``pack`` places."""
    if not slices or len(slices[0]) != 1:
        parts = pack(view, avail, dom, slices, level)
        return len(parts) if isinstance(parts, list) else parts
    slots = _SliceDomains(view.topology, Left(view, avail), dom, level, slices[0]).slots[0]
    return min(len(slices), sum(n // slices[0][0].count for n in slots))


class _SliceDomains:
    """The domains of the slice level inside the gang's domain, by free GPUs (best fit first),
    with the slots each still has per class."""

    def __init__(self, topo: Topology, left: Left, dom: Domain, level: int, classes: list[PodClass]) -> None:
        self.topo, self.left = topo, left
        if level <= dom.level:
            self.domains = [dom]  # the gang's domain lies inside one domain of the slice level
        else:
            first, last = topo.node_domain[level][dom.start], topo.node_domain[level][dom.end - 1]
            self.domains = [topo.domain(level, d) for d in range(first, last + 1)]
        self.free = [sum(left.gpus_in(d.start, d.end)) for d in self.domains]
        self.slots = [[sum(c.cap[d.start:d.end]) for d in self.domains] for c in classes]
        self.order = sorted((free, d) for d, free in enumerate(self.free))

    def place(self, piece: list[PodClass]) -> Taken | None:
        need = sum(c.gpus * c.count for c in piece)
        for pos in range(bisect_left(self.order, (need, -1)), len(self.order)):
            d = self.order[pos][1]
            if any(c.count > self.slots[k][d] for k, c in enumerate(piece)):
                continue
            taken = allocate(self.topo, self.left, self.domains[d], piece)
            if taken is None:
                continue
            del self.order[pos]
            dom = self.domains[d]
            self.free[d] = sum(self.left.gpus_in(dom.start, dom.end))
            for k, c in enumerate(piece):
                self.slots[k][d] = sum(self.left.cap(c, i) for i in range(dom.start, dom.end))
            insort(self.order, (self.free[d], d))
            return taken
        return None
