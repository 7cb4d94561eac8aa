"""Whole-gang placement against a view of the counters.

The algorithm, in one place:

1. Every node gets ``avail`` = its free GPUs, or 0 when it is cordoned, not ready, or tainted
   against the gang's tolerations. The gang's demand is a multiset of GPUs per pod (0-GPU
   members ride along on the node of the lowest-ranked GPU member).
2. From the host level outward to the required level (or the whole cluster when nothing is
   required), take the first level with a domain that holds every member. Among that level's
   domains that do, pick the best fit: fewest GPUs left over, so large free domains stay whole
   for large gangs. Holding every member is exact for one pod shape (sum of avail // size);
   with several shapes it is first-fit-decreasing, exact when the shapes divide each other
   (1, 2, 4, 8 GPUs).
3. Inside the chosen domain, recursively use the fewest child domains: if one child holds the
   rest, the best-fitting such child; otherwise the largest child, and again.
4. Members sorted by rank index take the slots in depth-first order, so consecutive ranks are
   topology neighbours.

A gang that cannot be placed gets a ``NoPlacement`` carrying the numbers of its best domain at
the level it is bound to; it holds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Sequence

from extender.core.model import GangSpec, Member, Toleration, tolerates_all
from extender.core.state import Slot, View
from extender.core.topology import Domain, Topology


@dataclass(frozen=True)
class Placement:
    gang: str
    slots: tuple[Slot, ...]
    """One per planned pod, members not created yet included (named ``<gang>#<n>``)."""
    level: int
    """Narrowest level whose single domain holds every slot (-1: none does)."""
    domain: Domain
    preferred_met: bool = True


@dataclass(frozen=True)
class Blockers:
    """Why GPUs of a domain are not available to a gang, in numbers."""

    cordoned: int = 0
    not_ready: int = 0
    tainted: int = 0
    reserved_gpus: int = 0
    used_gpus: int = 0


@dataclass(frozen=True)
class NoPlacement:
    gang: str
    demand: tuple[int, ...]
    bound_level: int
    """Level the gang must fit in (-1: the whole cluster)."""
    best: Domain | None
    fits: int
    """How many of the gang's pods the best domain could hold."""
    blockers: Blockers
    invalid: tuple[str, ...] = ()


PlanResult = Placement | NoPlacement


def resolve_levels(gang: GangSpec, topo: Topology) -> tuple[int, int | None, list[str]]:
    """(bound level, preferred level, problems) for the gang's topology request."""
    problems = []
    known = ", ".join(lvl.key for lvl in topo.levels) or "none"
    bound, preferred = -1, None
    if gang.required is not None:
        idx = topo.level_index(gang.required)
        if idx is None:
            problems.append(f"required topology level {gang.required!r} is not a level of this cluster (levels: {known})")
        else:
            bound = idx
    if gang.preferred is not None:
        idx = topo.level_index(gang.preferred)
        if idx is None:
            problems.append(f"preferred topology level {gang.preferred!r} is not a level of this cluster (levels: {known})")
        elif idx < bound:
            problems.append(f"preferred level {gang.preferred} is wider than required level {gang.required}")
        else:
            preferred = idx
    return bound, preferred, problems


def plan(gang: GangSpec, view: View) -> PlanResult:
    topo = view.topology
    bound, preferred, problems = resolve_levels(gang, topo)
    problems = [*gang.invalid, *problems]
    demand = gang.demand()
    if problems:
        return NoPlacement(gang.key, demand, bound, None, 0, Blockers(), tuple(problems))
    tolerations = _tolerations(gang.members)
    gpu_sizes = [s for s in demand if s > 0]
    if len(demand) == 1 and gpu_sizes and bound <= topo.depth:
        node = _best_fit_node(view, gpu_sizes[0], tolerations)
        if node is not None:
            return _assign(gang, topo, {node: {gpu_sizes[0]: 1}}, preferred)
    avail = _available(view, tolerations)
    if not gpu_sizes:
        eligible = [i for i in range(len(avail)) if _eligible(view, i, tolerations)]
        if not eligible:
            return _no_placement(gang, view, avail, demand, bound, tolerations)
        return _assign(gang, topo, {eligible[0]: {}}, preferred)
    classes = _classes(gpu_sizes)
    total = sum(gpu_sizes)
    free_prefix = [0, *accumulate(avail)]
    first_size, first_count = classes[0]
    slot_prefix = [0, *accumulate([a // first_size for a in avail])]

    for lvl in range(topo.depth, bound - 1, -1):
        starts, ends = (topo.start[lvl], topo.end[lvl]) if lvl >= 0 else ([0], [len(avail)])
        frees = [free_prefix[b] - free_prefix[a] for a, b in zip(starts, ends)] if lvl < topo.depth else avail
        if not frees or max(frees) < total:
            continue  # no domain at this level has the GPUs: skip it without a closer look
        candidates = [
            (free - total, d, topo.domain(lvl, d))
            for d, free in enumerate(frees)
            if free >= total and slot_prefix[ends[d]] - slot_prefix[starts[d]] >= first_count
        ]
        candidates.sort(key=lambda c: (c[0], c[1]))
        if len(candidates) > 1 and candidates[0][0] == candidates[1][0]:
            # Equal fits: prefer the one whose parent (then grandparent...) has the least free,
            # so the gang fills an already used branch and whole branches stay whole.
            ties = [c for c in candidates if c[0] == candidates[0][0]]
            ties.sort(key=lambda c: (_ancestor_free(topo, lvl, c[1], free_prefix), c[1]))
            candidates[: len(ties)] = ties
        for _, _, dom in candidates:
            if len(classes) == 1 or _ffd(avail, dom.start, dom.end, classes) is not None:
                taken = _allocate(topo, avail, dom, classes)
                return _assign(gang, topo, taken, preferred)
    return _no_placement(gang, view, avail, demand, bound, tolerations)


@dataclass(frozen=True)
class DomainFit:
    """One domain's numbers for a gang, the rows of ``ExplainPod``'s fit table."""

    domain: Domain
    nodes: int
    gpus: int
    """Allocatable GPUs of the domain."""
    available: int
    """GPUs this gang could use: free on nodes that are schedulable and whose taints it tolerates."""
    fits: int
    """How many of the gang's pods the domain holds (largest shapes first)."""
    blocked_nodes: int
    """Nodes cordoned, not ready, or tainted against the gang."""


def domain_fits(gang: GangSpec, view: View) -> tuple[int, list[DomainFit]]:
    """The level the gang is bound to and, for every domain at it, how much of the gang fits,
    best first: the numbers behind a NoPlacement's one-line reason, for every domain.
    """
    topo = view.topology
    bound, _, _ = resolve_levels(gang, topo)
    tolerations = _tolerations(gang.members)
    avail = _available(view, tolerations)
    classes = _classes([s for s in gang.demand() if s > 0]) or [(1, 0)]
    rows = []
    for d in range(topo.domain_count(bound)):
        dom = topo.domain(bound, d)
        span = range(dom.start, dom.end)
        rows.append(DomainFit(
            domain=dom,
            nodes=len(span),
            gpus=sum(topo.nodes[i].gpus for i in span),
            available=sum(avail[i] for i in span),
            fits=_fits(avail, dom, classes),
            blocked_nodes=sum(1 for i in span if not _eligible(view, i, tolerations)),
        ))
    rows.sort(key=lambda r: (-r.fits, -r.available, r.domain.start))
    return bound, rows


# -- building blocks ------------------------------------------------------------------------


def _tolerations(members: Sequence[Member]) -> tuple[Toleration, ...]:
    """Members of a gang come from one template; the GPU members' tolerations all must hold."""
    gpu = [m for m in members if m.gpus > 0] or list(members)
    if not gpu:
        return ()
    common = set(gpu[0].tolerations)
    for m in gpu[1:]:
        common &= set(m.tolerations)
    return tuple(sorted(common, key=repr))


def _eligible(view: View, i: int, tolerations: tuple[Toleration, ...]) -> bool:
    if view.blocked[i] is not None:
        return False
    taints = view.taints.get(i)
    return not taints or tolerates_all(tolerations, taints)


def _available(view: View, tolerations: tuple[Toleration, ...]) -> list[int]:
    avail = [f if f > 0 else 0 for f in view.free]
    for i, why in enumerate(view.blocked):
        if why is not None:
            avail[i] = 0
    for i, taints in view.taints.items():
        if not tolerates_all(tolerations, taints):
            avail[i] = 0
    return avail


def _best_fit_node(view: View, size: int, tolerations: tuple[Toleration, ...]) -> int | None:
    for free in sorted(f for f in view.by_free if f >= size):
        for i in view.by_free[free]:
            taints = view.taints.get(i)
            if not taints or tolerates_all(tolerations, taints):
                return i
    return None


def _classes(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """[(GPUs per pod, pods)], largest pods first."""
    counts: dict[int, int] = {}
    for s in sizes:
        counts[s] = counts.get(s, 0) + 1
    return sorted(counts.items(), reverse=True)


def _ancestor_free(topo: Topology, lvl: int, d: int, free_prefix: list[int]) -> tuple[int, ...]:
    """Free GPUs of the domain's parent, grandparent, ... (nearest first)."""
    out = []
    parent = topo.parent[lvl][d]
    for up in range(lvl - 1, -1, -1):
        out.append(free_prefix[topo.end[up][parent]] - free_prefix[topo.start[up][parent]])
        parent = topo.parent[up][parent]
    return tuple(out)


def _ffd(avail: list[int], start: int, end: int, classes: list[tuple[int, int]]) -> dict[int, dict[int, int]] | None:
    """First-fit decreasing over nodes [start, end): {node: {size: pods}}, or None."""
    left = avail[start:end]
    taken: dict[int, dict[int, int]] = {}
    for size, count in classes:
        for j in range(len(left)):
            if count == 0:
                break
            n = min(count, left[j] // size)
            if n:
                left[j] -= n * size
                count -= n
                taken.setdefault(start + j, {})[size] = n
        if count:
            return None
    return taken


def _allocate(topo: Topology, avail: list[int], dom: Domain, classes: list[tuple[int, int]]) -> dict[int, dict[int, int]]:
    """Place every class inside dom using the fewest child domains; FFD if that fails."""
    left = list(avail)
    taken: dict[int, dict[int, int]] = {}
    for size, count in classes:
        slot_prefix = _prefix_over(left, dom, lambda a: a // size)
        free_prefix = _prefix_over(left, dom, lambda a: a)
        got: list[tuple[int, int]] = []
        if not _fewest_children(topo, dom.level, dom.index, count, size, slot_prefix, free_prefix, dom.start, got):
            ffd = _ffd(avail, dom.start, dom.end, classes)
            assert ffd is not None, "domain was checked to hold the gang"
            return ffd
        for node, n in got:
            left[node] -= n * size
            taken.setdefault(node, {})[size] = taken.get(node, {}).get(size, 0) + n
    return taken


def _prefix_over(values: list[int], dom: Domain, f) -> list[int]:
    return [0, *accumulate([f(v) for v in values[dom.start:dom.end]])]


def _fewest_children(topo: Topology, lvl: int, d: int, k: int, size: int,
                     slots: list[int], free: list[int], base: int, out: list[tuple[int, int]]) -> bool:
    """Take k slots of `size` GPUs inside domain (lvl, d); append (node, pods) to out."""
    if lvl == topo.depth:
        out.append((d, k))
        return True
    child_lvl = lvl + 1

    def cap(c: int) -> int:
        return slots[topo.end[child_lvl][c] - base] - slots[topo.start[child_lvl][c] - base]

    def leftover(c: int, n: int) -> int:
        return free[topo.end[child_lvl][c] - base] - free[topo.start[child_lvl][c] - base] - n * size

    pool = sorted((c for c in topo.children(lvl, d) if cap(c) > 0), key=lambda c: (-cap(c), c))
    remaining = k
    for pos, c in enumerate(pool):
        if cap(c) >= remaining:
            # The rest fits in one child: the best-fitting one among those large enough.
            fitting = [x for x in pool[pos:] if cap(x) >= remaining]
            best = min(fitting, key=lambda x: (leftover(x, remaining), x))
            return _fewest_children(topo, child_lvl, best, remaining, size, slots, free, base, out)
        _fewest_children(topo, child_lvl, c, cap(c), size, slots, free, base, out)
        remaining -= cap(c)
    return remaining == 0


def _assign(gang: GangSpec, topo: Topology, taken: dict[int, dict[int, int]], preferred: int | None) -> Placement:
    """Give slots to members: per pod shape, by rank, in depth-first (node index) order."""
    by_size: dict[int, list[int]] = {}
    for node in sorted(taken):
        for size, n in taken[node].items():
            by_size.setdefault(size, []).extend([node] * n)
    members = sorted(gang.members, key=lambda m: (m.rank is None, m.rank or (), m.key))
    slots: list[tuple[int, Slot]] = []
    zero: list[Member] = []
    missing = 0
    for m in members:
        if m.gpus == 0:
            zero.append(m)
            continue
        node = by_size[m.gpus].pop(0)
        slots.append((node, Slot(m.key, topo.names[node], m.gpus)))
    for size, nodes in sorted(by_size.items(), reverse=True):  # members not created yet
        for node in nodes:
            missing += 1
            slots.append((node, Slot(f"{gang.key}#{missing}", topo.names[node], size)))
    anchor = min((n for n, _ in slots), default=min(taken) if taken else 0)
    for m in zero:
        slots.append((anchor, Slot(m.key, topo.names[anchor], 0)))
    nodes = [n for n, _ in slots] or [anchor]
    level = topo.common_level(nodes)
    domain = topo.domain(level, topo.node_domain[level][nodes[0]]) if level >= 0 else topo.domain(-1, 0)
    met = preferred is None or level >= preferred
    return Placement(gang.key, tuple(s for _, s in slots), level, domain, met)


def _no_placement(gang: GangSpec, view: View, avail: list[int], demand: tuple[int, ...],
                  bound: int, tolerations: tuple[Toleration, ...]) -> NoPlacement:
    topo = view.topology
    classes = _classes([s for s in demand if s > 0]) or [(1, 0)]
    best, fits = None, -1
    for d in range(topo.domain_count(bound)):
        dom = topo.domain(bound, d)
        n = _fits(avail, dom, classes)
        if n > fits:
            best, fits = dom, n
    if best is None:
        return NoPlacement(gang.key, demand, bound, None, 0, Blockers())
    blockers = Blockers(
        cordoned=sum(1 for i in range(best.start, best.end) if view.blocked[i] == "cordoned"),
        not_ready=sum(1 for i in range(best.start, best.end) if view.blocked[i] == "not ready"),
        tainted=sum(1 for i in range(best.start, best.end)
                    if view.blocked[i] is None and i in view.taints
                    and not tolerates_all(tolerations, view.taints[i])),
        reserved_gpus=sum(view.reserved[best.start:best.end]),
        used_gpus=sum(topo.nodes[i].gpus for i in range(best.start, best.end))
        - sum(max(f, 0) for f in view.free[best.start:best.end])
        - sum(view.reserved[best.start:best.end]),
    )
    return NoPlacement(gang.key, demand, bound, best, fits, blockers)


def _fits(avail: list[int], dom: Domain, classes: list[tuple[int, int]]) -> int:
    """How many pods of the gang fit in dom, largest shapes first."""
    left = avail[dom.start:dom.end]
    placed = 0
    for size, count in classes:
        for j in range(len(left)):
            if count == 0:
                break
            n = min(count, left[j] // size)
            left[j] -= n * size
            count -= n
            placed += n
    return placed
