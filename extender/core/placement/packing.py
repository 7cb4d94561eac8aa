"""How a gang's pods fill nodes: the building blocks of ``planner`` (whole gangs) and ``slices``
(slices of consecutive ranks).

- ``PodClass``: a gang's GPU slots of equal (GPUs, eligibility), with per node ``cap`` (how many
  of them the node holds alone) and ``may`` (whether one may run there at all, GPUs aside).
- ``Left``: what a plan has left on each node, GPUs and every requested resource, as it takes
  slots (a negative take gives them back).
- ``allocate``: the slots of some classes inside one domain over the fewest domains at every
  level (``fewest_domains``); first-fit decreasing when that fails.
- ``fits``: how many pods of the classes a domain holds, largest shapes first.
- ``rank_order``, ``seats``: which member takes which of a plan's slots (its rank).

``Taken`` is what a plan takes: node index -> class index -> pods.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from typing import Collection, Sequence

from extender.core.placement.eligibility import label_mask, room
from extender.core.model import Eligibility, GangSpec, Member
from extender.core.cluster.state import View
from extender.core.cluster.topology import Domain, Topology

Taken = dict[int, dict[int, int]]


@dataclass
class PodClass:
    gpus: int
    eligibility: Eligibility
    count: int
    cap: list[int] = field(default_factory=list)
    """Per node index, pods of this class the node holds alone."""
    may: list[bool] = field(default_factory=list)
    """Per node index, whether a pod of this class may run there at all (GPUs aside)."""

    def counted(self, count: int) -> "PodClass":
        """``count`` pods of the same class (its per-node numbers shared)."""
        return PodClass(self.gpus, self.eligibility, count, self.cap, self.may)


def classes_of(gang: GangSpec) -> list[PodClass]:
    """GPU slots grouped by (GPUs, eligibility), largest pods first."""
    counts: dict[tuple[int, Eligibility], int] = {}
    for gpus, e in gang.slots():
        if gpus > 0:
            counts[(gpus, e)] = counts.get((gpus, e), 0) + 1
    return [PodClass(g, e, n) for (g, e), n in sorted(counts.items(), key=lambda kv: -kv[0][0])]


def rank_order(members: Sequence[Member]) -> list[Member]:
    """Members by rank index (those without one last), then by name: the order slots are given in."""
    return sorted(members, key=lambda m: (m.rank is None, m.rank or (), m.key))


def position(rank: tuple[int, ...] | None, layout: tuple[tuple[int, int], ...] = ()) -> int | None:
    """Where the workload's own numbering puts a member among its gang's GPU slots (depth-first),
    whichever of its pods exist yet: a one-part rank (a Job's completion index, a
    LeaderWorkerSet's worker index, Kueue's pod-group pod index) is its own place; a (Job, index
    in the Job) rank comes after every pod of the Jobs before it (``layout``: (Jobs, pods per
    Job) in Job order); any other rank has none."""
    if rank is None:
        return None
    if len(rank) == 1:
        return rank[0]
    if len(rank) != 2 or not layout:
        return None
    job, index = rank
    first_jobs, first_pods = _layout_starts(layout)
    k = bisect_right(first_jobs, job) - 1  # the replicatedJob the Job is one of
    if k < 0 or job - first_jobs[k] >= layout[k][0] or index >= layout[k][1]:
        return None
    return first_pods[k] + (job - first_jobs[k]) * layout[k][1] + index


@lru_cache(maxsize=64)
def _layout_starts(layout: tuple[tuple[int, int], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The first Job's global index and the first pod's place of each entry of ``layout``
    (computed once per layout: a gang's members ask one by one)."""
    first_jobs = tuple(accumulate((jobs for jobs, _ in layout[:-1]), initial=0))
    first_pods = tuple(accumulate((jobs * pods for jobs, pods in layout[:-1]), initial=0))
    return first_jobs, first_pods


def seats(gang: GangSpec, members: list[Member], by_class: dict[int, list[int]]) -> list[Member | None] | None:
    """While members of a one-class gang are missing: the member its workload numbers p
    (``position``) in the p-th slot, depth-first, the others in the lowest free slots in
    rank order, None for a slot kept for a member not created yet; so the rank railyard tells
    each member, its place in the plan, is its workload's own, whatever order the controller
    creates them in (``GangBook.steer`` seats a later one the same way). None: every
    member exists (rank order, as always), or none has a place to keep, or the plan is a round
    beside running members (their ranks: ``address.whole_ranks``)."""
    if len(by_class) != 1 or gang.ranks:
        return None
    count = len(next(iter(by_class.values())))
    if len(members) >= count:
        return None
    seated: list[Member | None] = [None] * count
    rest = []
    for m in members:
        p = position(m.rank, gang.rank_layout)
        if p is not None and 0 <= p < count and seated[p] is None:
            seated[p] = m
        else:
            rest.append(m)
    if len(rest) == len(members):
        return None
    free = iter([i for i, m in enumerate(seated) if m is None])
    for m in rest:
        seated[next(free)] = m
    return seated


def usable_nodes(view: View, refused: Collection[str], within: Domain | None) -> list[bool]:
    """Per node: takes placements at all (not blocked, not refused, inside ``within``)."""
    topo = view.topology
    usable = [b is None for b in view.blocked]
    for name in refused:
        i = topo.index.get(name)
        if i is not None:
            usable[i] = False
    if within is not None and within.level >= 0:
        usable = [u and within.start <= i < within.end for i, u in enumerate(usable)]
    return usable


def kept_out(view: View, gang: str, usable: Sequence[bool], exclusive: int | None) -> list[bool]:
    """``usable`` without the nodes another gang's exclusive claim holds (``View.held``); for a
    gang exclusive at level ``exclusive``, also without every domain there that another pod
    uses (GPUs in use or reserved, its own claim's excepted) or another gang holds."""
    held = view.held
    out = [u and (i not in held or held[i].gang == gang) for i, u in enumerate(usable)] if held else list(usable)
    if exclusive is None:
        return out
    topo, free = view.topology, view.free
    for a, b in zip(topo.start[exclusive], topo.end[exclusive]):
        if any((h := held.get(i)) is not None and h.gang != gang
               or h is None and free[i] < topo.nodes[i].gpus for i in range(a, b)):
            out[a:b] = [False] * (b - a)
    return out


def fill_caps(view: View, c: PodClass, usable: Sequence[bool]) -> None:
    """Fill c.may (labels, taints, usable, one pod's other resources) and c.cap per node."""
    mask = label_mask(view, c.eligibility)
    requests = c.eligibility.requests
    g = c.gpus
    free, alloc, taken = view.free, view.allocatable, view.taken
    rooms = [room(requests, alloc[i], taken[i]) if usable[i] and mask[i] else 0 for i in range(len(free))]
    c.may = [r > 0 for r in rooms]
    c.cap = [min(free[i] // g, r) if r and free[i] >= g else 0 for i, r in enumerate(rooms)]


def available(view: View, classes: list[PodClass]) -> list[int]:
    """Free GPUs on each node some pod of the gang may run on (0 elsewhere)."""
    return [f if f > 0 and any(c.may[i] for c in classes) else 0 for i, f in enumerate(view.free)]


class Left:
    """What a plan has left on each node: GPUs and every requested resource. Only what it took
    is stored, so one costs nothing to make however many nodes the cluster has."""

    def __init__(self, view: View, avail: list[int]) -> None:
        self.view = view
        self.avail = avail
        """Free GPUs per node before the plan (read only)."""
        self.spent: dict[int, int] = {}
        self.used: dict[int, dict[str, int]] = {}
        self.fresh = True
        """Nothing taken yet: every class's ``cap`` still holds as computed."""

    def gpus(self, i: int) -> int:
        return self.avail[i] - self.spent.get(i, 0)

    def gpus_in(self, start: int, end: int) -> list[int]:
        """GPUs left on each node of [start, end)."""
        if not self.spent:
            return self.avail[start:end]
        spent, avail = self.spent, self.avail
        return [avail[i] - spent.get(i, 0) for i in range(start, end)]

    def cap(self, c: PodClass, i: int) -> int:
        if not c.cap[i]:
            return 0
        taken = self.view.taken[i]
        extra = self.used.get(i)
        if extra:
            taken = {k: taken.get(k, 0) + extra.get(k, 0) for k in {*taken, *extra}}
        return min(self.gpus(i) // c.gpus, room(c.eligibility.requests, self.view.allocatable[i], taken))

    def take(self, c: PodClass, i: int, n: int) -> None:
        """Take n pods of class c on node i (n < 0 gives them back)."""
        self.fresh = False
        self.spent[i] = self.spent.get(i, 0) + n * c.gpus
        extra = self.used.setdefault(i, {})
        for name, amount in c.eligibility.requests:
            extra[name] = extra.get(name, 0) + n * amount

    def give_back(self, classes: list[PodClass], taken: Taken) -> None:
        for node, per_class in taken.items():
            for k, n in per_class.items():
                self.take(classes[k], node, -n)


def ffd(left: Left, classes: list[PodClass], start: int, end: int) -> Taken | None:
    """First-fit decreasing over nodes [start, end), taken from ``left``; None (and ``left`` as
    it was) when the classes do not fit."""
    taken: Taken = {}
    for k, c in enumerate(classes):
        got, short = _first_fit(left, c, start, end)
        for j, n in got.items():
            taken.setdefault(j, {})[k] = n
        if short:
            left.give_back(classes, taken)
            return None
    return taken


def allocate(topo: Topology, left: Left, dom: Domain, classes: list[PodClass]) -> Taken | None:
    """Take every class inside dom over the fewest domains at every level (``fewest_domains``),
    FFD if that fails; None (and ``left`` as it was) when not even FFD fits them."""
    taken: Taken = {}
    for k, c in enumerate(classes):
        if not c.count:
            continue
        caps = c.cap[dom.start:dom.end] if left.fresh else [left.cap(c, i) for i in range(dom.start, dom.end)]
        if sum(caps) < c.count:
            left.give_back(classes, taken)
            return ffd(left, classes, dom.start, dom.end)
        slots = Units(topo, [0, *accumulate(caps)], [0, *accumulate(left.gpus_in(dom.start, dom.end))], dom.start)
        for node, n in fewest_domains(topo, dom, c.count, c.gpus, slots, topo.depth):
            left.take(c, node, n)
            taken.setdefault(node, {})[k] = taken.get(node, {}).get(k, 0) + n
    return taken


@dataclass(frozen=True)
class Units:
    """What each domain holds of some unit (a pod, or a slice of S pods): prefix sums over the
    node indexes from ``base`` (pods) or over the domains of one level (slices)."""

    topo: Topology
    held: list[int]
    """Prefix sums of units held, per node (``level`` None) or per domain of ``level``."""
    free: list[int]
    """Prefix sums of free GPUs, same indexing."""
    base: int = 0
    """The first node (or domain of ``level``) the sums start at."""
    level: int | None = None
    """None: per node; else per domain of this level."""

    def _span(self, lvl: int, d: int) -> tuple[int, int]:
        topo = self.topo
        if lvl < 0:
            lo, hi = 0, len(topo.names)
        else:
            lo, hi = topo.start[lvl][d], topo.end[lvl][d]
        if self.level is not None:
            lo, hi = topo.node_domain[self.level][lo], topo.node_domain[self.level][hi - 1] + 1
        return lo - self.base, hi - self.base

    def cap(self, lvl: int, d: int) -> int:
        a, b = self._span(lvl, d)
        return self.held[b] - self.held[a]

    def gpus(self, lvl: int, d: int) -> int:
        a, b = self._span(lvl, d)
        return self.free[b] - self.free[a]


def fewest_domains(topo: Topology, dom: Domain, count: int, size: int, units: Units, last: int) -> list[tuple[int, int]]:
    """``count`` units of ``size`` GPUs inside dom over the fewest domains at every level down to
    ``last``: (domain index at ``last``, units), by index. Level by level, among the children of
    the domains chosen one level up, take the largest (ties: least free) until one holds the
    rest, then, of those that hold the rest, the one that leaves the fewest domains to take at
    the next level (unless that is ``last``), then the best fit (fewest GPUs left over). So the
    domains of a level fill before the next opens, and one level's choice never adds a domain at
    the level above. (Kueue's TAS does the same down to its slice level, with best fit alone for
    the last domain: pkg/cache/scheduler/tas_flavor_snapshot.go ``updateCountsToMinimumGeneric``.
    A leaf that fits the rest exactly over two NVLink domains loses here to a larger leaf that
    holds it in one: issue 23's ``g0-48``.) The caller checks that dom holds ``count``."""
    if dom.level >= last:
        return [(dom.index, count)]
    picked = [(dom.index, count)]
    for lvl in range(dom.level + 1, last + 1):
        picked = _level(topo, [d for d, _ in picked], lvl, count, size, units, lookahead=lvl + 1 < last)
    return sorted(picked)


LOOKAHEAD = 16
"""At most this many of the domains that hold the rest (the best-fitting first) are compared by
what they leave to the next level."""


def _level(topo: Topology, parents: list[int], lvl: int, count: int, size: int, units: Units,
           lookahead: bool) -> list[tuple[int, int]]:
    """One level of ``fewest_domains``: (domain, units) among the children of ``parents``."""
    pool = sorted((c for d in parents for c in topo.children(lvl - 1, d) if units.cap(lvl, c) > 0),
                  key=lambda c: (-units.cap(lvl, c), units.gpus(lvl, c), c))
    picked: list[tuple[int, int]] = []
    remaining = count
    for pos, c in enumerate(pool):
        if units.cap(lvl, c) >= remaining:
            fitting = sorted((x for x in pool[pos:] if units.cap(lvl, x) >= remaining),
                             key=lambda x: (units.gpus(lvl, x) - remaining * size, x))

            def below(x: int) -> int:
                chosen = [d for d, _ in picked] + [x]
                return len(_level(topo, chosen, lvl + 1, count, size, units, lookahead=False))

            if lookahead:
                best = min(enumerate(fitting[:LOOKAHEAD]), key=lambda ix: (below(ix[1]), ix[0]))[1]
            else:
                best = fitting[0]
            return [*picked, (best, remaining)]
        picked.append((c, units.cap(lvl, c)))
        remaining -= units.cap(lvl, c)
    raise AssertionError("the caller checked that the parents hold count")


def fits(view: View, classes: list[PodClass], avail: list[int], dom: Domain) -> int:
    """How many pods of the gang fit in dom, largest shapes first."""
    left = Left(view, avail)
    return sum(c.count - _first_fit(left, c, dom.start, dom.end)[1] for c in classes)


def _first_fit(left: Left, c: PodClass, start: int, end: int) -> tuple[dict[int, int], int]:
    """Take the class's pods on nodes [start, end) in order, as many as each holds: (node ->
    pods taken, pods that found no room)."""
    got: dict[int, int] = {}
    count = c.count
    for j in range(start, end):
        if count == 0:
            break
        n = min(count, left.cap(c, j))
        if n:
            left.take(c, j, n)
            count -= n
            got[j] = n
    return got, count
