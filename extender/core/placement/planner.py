"""Whole-gang placement against a view of the counters.

The algorithm, in one place:

1. The gang's GPU slots are grouped into classes of equal (GPUs, eligibility); 0-GPU members
   ride along (step 5). For each class, every node gets ``cap`` = how many of its pods the node
   holds alone: 0 when the node is cordoned, not ready, tainted against the class, does not
   match its node selector or required affinity, was refused by kube-scheduler's own filters,
   or lies outside the domain the gang must stay in (a replacement); else the fewest of free
   GPUs // GPUs per pod and, per requested resource, free // request (``eligibility``).
2. From the host level outward to the required level (or the whole cluster when nothing is
   required), take the first level with a domain that holds every slot. Among that level's
   domains that do, pick the best fit: fewest GPUs left over (ties: the domain whose parent has
   least free, then the most preferred-affinity weight, then the fewest wholly free nodes), so
   large free domains and whole nodes stay whole for large gangs. Holding every slot is exact
   for one class (sum of cap); with several it is first-fit-decreasing, with GPUs and every
   requested resource shared on each node. With several fabrics (``Topology.fabrics``), all
   of this happens in each pool on its own tree, levels named as the pool names them, and the
   best pool's placement wins (``_best_of``).
3. Inside the chosen domain, use the fewest domains at every level below it: level by level,
   among the children of the domains chosen one level up, the largest until one holds the
   rest, then of those that hold it the one that leaves the fewest domains to the next level,
   then the best fit (``packing.fewest_domains``).
   A sliced gang (``slices``) takes, among that level's domains that hold every slice, the one
   whose slices span the fewest domains of each level below it, widest first, then the fewest
   nodes (then the best fit as above), so it is never spread wider than Kueue would spread it:
   each run of S consecutive ranks inside one domain of the slice level, the fewest such domains
   (and above them) counted in whole slices, a domain filled before the next opens.
   Exclusive slices (a JobSet's Jobs) are the gang's parts instead, each in a slice-level
   domain no other slice takes.
   A gang of one class of partial-node members spanning nodes is then moved, inside the
   narrowest domain it already occupies, onto nodes where one rail set is free (``rails``).
4. Members sorted by rank index take their class's slots in depth-first order, so consecutive
   ranks are topology neighbours (with slices: slice k's slots go to the k-th run of members).
5. A 0-GPU member (a launcher) goes to the node of the lowest-ranked GPU member if it may run
   there, else to the nearest node of the domain where it may.

A gang that cannot be placed gets a ``NoPlacement`` carrying the numbers of its best domain at
the level it is bound to (the most whole slices, then the most pods), and why the rest of it is
unusable; it holds nothing. The building blocks (pod classes, what is left on each node, the
fewest-children allocation) are in ``packing``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Collection, Sequence

from extender.core.placement import rails
from extender.core.placement.eligibility import UNBOUNDED, label_mask, preference, room, short_of
from extender.core.model import Eligibility, GangSpec, Member
from extender.core.placement.packing import (
    Left,
    PodClass,
    Taken,
    allocate,
    available,
    classes_of,
    ffd,
    fill_caps,
    fits,
    kept_out,
    rank_order,
    seats,
    usable_nodes,
)
from extender.core.placement.levels import exclusive_level, landing_levels, resolve_levels
from extender.core.placement.slices import SliceRule, cut, pack, resolve, runs, whole_slices
from extender.core.cluster.state import CORDONED, NOT_READY, Slot, View
from extender.core.cluster.topology import Domain, Fabric, Topology


@dataclass(frozen=True)
class Placement:
    gang: str
    slots: tuple[Slot, ...]
    """One per planned pod, members not created yet included (named ``<gang>#<n>``)."""
    level: int
    """Narrowest level whose single domain holds every slot (-1: none does)."""
    domain: Domain
    preferred_met: bool = True
    home: Domain | None = None
    """A replacement round: the domain of the gang's running members it was kept in."""
    slices: SliceRule | None = None
    """Each run of ``slices.size`` GPU slots (in order) lies inside one domain of ``slices.level``."""
    exclusive: int | None = None
    """The level whose domains holding a slot are the gang's alone (``GangSpec.exclusive_domain``)."""


@dataclass(frozen=True)
class Blockers:
    """Why nodes of a domain are not available to a gang, in numbers."""

    cordoned: int = 0
    not_ready: int = 0
    tainted: int = 0
    unmatched: int = 0
    """Nodes whose labels do not match the pods' node selector or required affinity."""
    refused: int = 0
    """Nodes kube-scheduler's own filters refused for the gang's pods."""
    outside: int = 0
    """Nodes outside the domain a replacement must stay in."""
    short: tuple[tuple[str, int], ...] = ()
    """(resource, nodes) with GPUs for a pod but too little of that resource."""
    reserved_gpus: int = 0
    used_gpus: int = 0
    held: int = 0
    """Nodes in domains another gang holds exclusively."""
    shared: int = 0
    """An exclusive gang's: nodes in domains of its exclusive level that another pod uses."""


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
    within: Domain | None = None
    """The domain a replacement had to stay in, if any."""
    slices: SliceRule | None = None
    slices_fit: int = 0
    """How many whole slices the best domain could hold."""
    exclusive: int | None = None
    """``Placement.exclusive``: the level at which the gang asked for domains of its own."""


PlanResult = Placement | NoPlacement


@dataclass(frozen=True)
class Constraints:
    """What limits a plan beyond the gang's own request."""

    refused: Collection[str] = frozenset()
    """Nodes kube-scheduler's filters refused for this gang's pods (its verdict as evidence)."""
    within: Domain | None = None
    """Replacements: the domain the gang's running members occupy."""


def plan(gang: GangSpec, view: View, limits: Constraints = Constraints()) -> PlanResult:
    """The gang's placement, or why there is none. With several fabrics, planned in each pool on
    its own tree (levels resolved by name there); the best of them wins (``_best_of``)."""
    topo = view.topology
    if not topo.fabrics:
        return _exclusive(gang, topo, None, _plan(gang, view, limits, None))
    w = limits.within
    return _best_of(view, gang, [
        (f, _exclusive(gang, topo, f, _plan(gang, view, limits, f))) for f in topo.fabrics
        if w is None or w.level < 0 or f.start <= w.start < f.end])


def _exclusive(gang: GangSpec, topo: Topology, fabric: Fabric | None, result: PlanResult) -> PlanResult:
    """The result with the level at which the gang keeps its domains to itself, if it asks."""
    if gang.exclusive_domain is None or isinstance(result, NoPlacement) and result.invalid:
        return result
    return replace(result, exclusive=exclusive_level(gang, topo, fabric)[0])


def _plan(gang: GangSpec, view: View, limits: Constraints, fabric: Fabric | None) -> PlanResult:
    topo = view.topology
    bound, preferred, problems = resolve_levels(gang, topo, fabric)
    rule, slice_problems = resolve(gang, topo, bound, preferred, fabric) if not problems else (None, [])
    exclusive, exclusive_problems = exclusive_level(gang, topo, fabric)
    problems = [*gang.invalid, *problems, *slice_problems, *exclusive_problems]
    demand = gang.demand()
    if problems:
        return NoPlacement(gang.key, demand, bound, None, 0, Blockers(), tuple(problems))
    classes = classes_of(gang)
    if (fabric is None and len(classes) == 1 and classes[0].count == 1 and len(gang.members) <= 1
            and bound <= topo.depth and not gang.rail_set and not view.held and exclusive is None):
        node = _best_fit_node(view, classes[0], limits)
        if node is not None:
            return _home(_assign(gang, view, [{node: {0: 1}}], classes, preferred, (), rule), limits)
    usable = kept_out(view, gang.key, usable_nodes(view, limits.refused, limits.within), exclusive)
    if fabric is not None:
        usable = [u and fabric.start <= i < fabric.end for i, u in enumerate(usable)]
    if not classes:
        return _zero_gpu_gang(gang, view, usable, bound, preferred)
    for c in classes:
        fill_caps(view, c, usable)
    avail = available(view, classes)
    total = sum(c.gpus * c.count for c in classes)
    free_prefix = [0, *accumulate(avail)]
    first = classes[0]
    cap_prefix = [0, *accumulate(first.cap)]
    pref = _preference_prefix(view, first.eligibility)
    sliced = cut(gang, classes, rule) if rule else []

    whole_prefix: list[int] = []
    for lvl in landing_levels(topo, bound, fabric):
        starts, ends = (topo.start[lvl], topo.end[lvl]) if lvl >= 0 else ([0], [len(avail)])
        frees = [free_prefix[b] - free_prefix[a] for a, b in zip(starts, ends)] if lvl < topo.depth else avail
        if not frees or max(frees) < total:
            continue  # no domain at this level has the GPUs: skip it without a closer look
        candidates = [
            (free - total, d, topo.domain(lvl, d))
            for d, free in enumerate(frees)
            if free >= total and cap_prefix[ends[d]] - cap_prefix[starts[d]] >= first.count
        ]
        candidates.sort(key=lambda c: (c[0], c[1]))
        if len(candidates) > 1 and candidates[0][0] == candidates[1][0]:
            # Equal fits: prefer the one whose parent (then grandparent...) has the least free,
            # so the gang fills an already used branch and whole branches stay whole; then the
            # one whose nodes the pods prefer most (preferred node affinity); then the one with
            # the fewest wholly free nodes, so the domains of whole nodes, the capacity large
            # gangs need, stay whole (issue 23 item 4).
            whole = whole_prefix or [0, *accumulate(int(0 < a == n.gpus) for a, n in zip(avail, topo.nodes))]
            whole_prefix = whole
            ties = [c for c in candidates if c[0] == candidates[0][0]]
            ties.sort(key=lambda c: (_ancestor_free(topo, lvl, c[1], free_prefix),
                                     -(pref[c[2].end] - pref[c[2].start]),
                                     whole[c[2].end] - whole[c[2].start], c[1]))
            candidates[: len(ties)] = ties
        packed: list[tuple[tuple[int, ...], int, list[Taken]]] = []
        for _, _, dom in candidates:
            if rule is not None:
                parts = pack(view, avail, dom, sliced, rule)
                if isinstance(parts, list):
                    packed.append((_spans(topo, fabric, lvl, parts), len(packed), parts))
            elif len(classes) == 1 or ffd(Left(view, avail), classes, dom.start, dom.end) is not None:
                left = Left(view, avail)
                taken = allocate(topo, left, dom, classes)
                assert taken is not None, "domain was checked to hold the gang"
                taken, rail_set = _rail_aligned(view, left, classes, taken, gang.rail_set, limits.within)
                return _home(_assign(gang, view, [taken], classes, preferred, usable, rail_set=rail_set), limits)
        if packed:  # sliced: the domain whose slices span the fewest domains below it, level by level
            return _home(_assign(gang, view, min(packed)[2], classes, preferred, usable, rule), limits)
    return _no_placement(gang, view, avail, demand, bound, classes, usable, limits, rule, sliced, fabric)


def _spans(topo: Topology, fabric: Fabric | None, lvl: int, parts: list[Taken]) -> tuple[int, ...]:
    """How many domains of each level below ``lvl`` (the pool's own) the slices use, widest
    first, nodes last."""
    nodes = {i for taken in parts for i in taken}
    below = [b for b in range(lvl + 1, topo.depth) if fabric is None or b in fabric.levels]
    return (*(len({topo.node_domain[b][i] for i in nodes}) for b in below), len(nodes))


def _best_of(view: View, gang: GangSpec, results: list[tuple[Fabric, PlanResult]]) -> PlanResult:
    """Across pools: the placement that meets the preferred level, then the one fewest of its
    pool's levels above the host, then the best fit; with none, the pool whose best domain holds
    the most (whole slices, then pods); with no pool able to take the gang at all, every reason."""
    topo = view.topology
    placed = [(f, r) for f, r in results if isinstance(r, Placement)]
    if placed:
        gpus = sum(gang.demand())

        def key(item: tuple[Fabric, Placement]) -> tuple[int, int, int, int]:
            f, p = item
            free = sum(max(x, 0) for x in view.free[p.domain.start:p.domain.end])
            return (not p.preferred_met, topo.height(p.level, f.start), free - gpus, f.index)

        return min(placed, key=key)[1]
    failed = [r for _, r in results if isinstance(r, NoPlacement)]
    valid = [r for r in failed if not r.invalid]
    if valid:
        return max(valid, key=lambda r: (r.slices_fit, r.fits))
    if not failed:
        return NoPlacement(gang.key, gang.demand(), -1, None, 0, Blockers())
    return replace(failed[0], invalid=tuple(dict.fromkeys(p for r in failed for p in r.invalid)))


@dataclass(frozen=True)
class DomainFit:
    """One domain's numbers for a gang, the rows of ``ExplainPod``'s fit table."""

    domain: Domain
    nodes: int
    gpus: int
    """Allocatable GPUs of the domain."""
    available: int
    """GPUs this gang could use: free on nodes its pods may run on."""
    fits: int
    """How many of the gang's pods the domain holds (largest shapes first)."""
    blocked_nodes: int
    """Nodes the gang's pods may not run on (cordoned, not ready, tainted, selector, resources)."""
    slices: int = 0
    """How many whole slices of a sliced gang the domain holds (0 when not sliced)."""


def domain_fits(gang: GangSpec, view: View) -> tuple[int, list[DomainFit]]:
    """The level the gang is bound to and, for every domain at it, how much of the gang fits,
    best first: the numbers behind a NoPlacement's one-line reason, for every domain. With
    several fabrics, the domains at each pool's own bound level (the level returned is the
    first pool's).
    """
    topo = view.topology
    classes = classes_of(gang) or [PodClass(1, Eligibility(), 0)]
    usable = usable_nodes(view, (), None)
    for c in classes:
        fill_caps(view, c, usable)
    avail = available(view, classes)
    first_bound, rows = None, []
    for fabric in topo.fabrics or (None,):
        bound, preferred, problems = resolve_levels(gang, topo, fabric)
        if problems and fabric is not None:
            continue  # a pool without the gang's levels: none of its domains is a place for it
        first_bound = bound if first_bound is None else first_bound
        rule = None if problems or gang.invalid else resolve(gang, topo, bound, preferred, fabric)[0]
        sliced = cut(gang, classes, rule) if rule else []
        for d in range(topo.domain_count(bound)):
            dom = topo.domain(bound, d)
            if fabric is not None and not fabric.start <= dom.start < fabric.end:
                continue
            span = range(dom.start, dom.end)
            rows.append(DomainFit(
                domain=dom,
                nodes=len(span),
                gpus=sum(topo.nodes[i].gpus for i in span),
                available=sum(avail[i] for i in span),
                fits=fits(view, classes, avail, dom),
                blocked_nodes=sum(1 for i in span if not classes[0].may[i]),
                slices=whole_slices(view, avail, dom, sliced, rule) if rule else 0,
            ))
    bound = first_bound if first_bound is not None else -1
    rows.sort(key=lambda r: (-r.slices, -r.fits, -r.available, r.domain.start))
    return bound, rows


def named_slot(placement: Placement | None, placeholder: str, member: str) -> Placement | None:
    """The placement with a member created after planning named in the slot it took, in the
    same place (so the same rank)."""
    if placement is None:
        return placement
    return replace(placement, slots=tuple(replace(s, member=member) if s.member == placeholder else s
                                          for s in placement.slots))


# -- building blocks ------------------------------------------------------------------------


def _home(result: PlanResult, limits: Constraints) -> PlanResult:
    if isinstance(result, Placement) and limits.within is not None:
        return replace(result, home=limits.within)
    return result


def _preference_prefix(view: View, e: Eligibility) -> list[int]:
    if not e.preferred:
        return [0] * (len(view.free) + 1)
    return [0, *accumulate(preference(e, n) for n in view.topology.nodes)]


def _best_fit_node(view: View, c: PodClass, limits: Constraints) -> int | None:
    """The node with the fewest free GPUs that holds the pod; ties: the most preferred.
    Walks the free-GPU buckets (unblocked nodes only), so it costs the nodes it looks at."""
    mask = label_mask(view, c.eligibility)
    requests, alloc, taken, names = c.eligibility.requests, view.allocatable, view.taken, view.topology.names
    w = limits.within if limits.within is not None and limits.within.level >= 0 else None

    def ok(i: int) -> bool:
        return (mask[i] and (w is None or w.start <= i < w.end) and names[i] not in limits.refused
                and room(requests, alloc[i], taken[i]) > 0)

    for free in sorted(f for f in view.by_free if f >= c.gpus):
        if not c.eligibility.preferred:
            # The bucket's first node that holds the pod (sets of small ints iterate in order).
            node = next((i for i in view.by_free[free] if ok(i)), None)
            if node is not None:
                return node
            continue
        fitting = [i for i in view.by_free[free] if ok(i)]
        if fitting:
            nodes = view.topology.nodes
            return max(fitting, key=lambda i: (preference(c.eligibility, nodes[i]), -i))
    return None


def _ancestor_free(topo: Topology, lvl: int, d: int, free_prefix: list[int]) -> tuple[int, ...]:
    """Free GPUs of the domain's parent, grandparent, ... (nearest first)."""
    out = []
    parent = topo.parent[lvl][d]
    for up in range(lvl - 1, -1, -1):
        out.append(free_prefix[topo.end[up][parent]] - free_prefix[topo.start[up][parent]])
        parent = topo.parent[up][parent]
    return tuple(out)


def _rail_aligned(view: View, left: Left, classes: list[PodClass], taken: Taken, given: tuple[str, ...],
                  within: Domain | None) -> tuple[Taken, tuple[str, ...] | None]:
    """One class of partial-node members over several nodes: moved onto nodes of the same
    narrowest domain where one rail set is free (``rails``); (taken, the rail set or None).
    Members that join running ones with rail set ``given`` (a replacement round, even of one
    member) keep that set, moved onto nodes of the domain they must stay in (``within``)."""
    nodes = sorted(taken)
    if len(classes) != 1 or not rails.wanted(view, classes[0].gpus, nodes, joined=bool(given)):
        return taken, None
    topo, c = view.topology, classes[0]
    lvl = topo.common_level(nodes)
    span = topo.domain(lvl, topo.node_domain[lvl][nodes[0]]) if lvl >= 0 else topo.domain(-1, 0)
    if given and within is not None and within.start <= nodes[0] < within.end:
        span = within
    spare = [i for i in range(span.start, span.end) if i not in taken and left.cap(c, i) > 0]
    moved, rail_set = rails.align(view, c.gpus, {i: taken[i][0] for i in nodes}, spare, given)
    return {i: {0: n} for i, n in moved.items()}, rail_set


def _assign(gang: GangSpec, view: View, parts: list[Taken], classes: list[PodClass],
            preferred: int | None, usable: Sequence[bool], rule: SliceRule | None = None,
            rail_set: tuple[str, ...] | None = None) -> PlanResult:
    """Give slots to members: per class, by rank, in depth-first (node index) order (while
    members are missing, each at the place its workload numbers it: ``packing.seats``); with slices,
    part k (slice k's nodes) to slice k's members (``slices.runs``), and with exclusive slices
    each slot of a member not created yet to that part, for its part's member to claim; with a
    rail set, each GPU slot its rails (``rails.member_rails``)."""
    topo = view.topology
    index = {(c.gpus, c.eligibility): k for k, c in enumerate(classes)}
    members = rank_order(gang.members)
    zero = [m for m in members if m.gpus == 0]
    by_slice = runs(gang, rule) if rule else [[m for m in members if m.gpus > 0]]
    slots: list[tuple[int, Slot]] = []
    missing = 0
    for s, taken in enumerate(parts):
        by_class: dict[int, list[int]] = {}
        for node in sorted(taken):
            for k, n in taken[node].items():
                by_class.setdefault(k, []).extend([node] * n)
        seated = seats(gang, by_slice[s], by_class) if rule is None else None
        order: list[tuple[int, int, Member | None]] = []  # (node, class, member; None: not created yet)
        if seated is not None:
            ((k, nodes),) = by_class.items()
            order = [(node, k, m) for node, m in zip(nodes, seated)]
        else:
            for m in by_slice[s]:
                k = index[(m.gpus, m.eligibility)]
                order.append((by_class[k].pop(0), k, m))
            order += [(node, k, None) for k, nodes in sorted(by_class.items()) for node in nodes]
        part = s if rule is not None and rule.exclusive else None
        for node, k, who in order:
            if who is None:
                missing += 1
                slots.append((node, Slot(f"{gang.key}#{missing}", topo.names[node], classes[k].gpus,
                                         classes[k].eligibility.requests, part=part)))
            else:
                slots.append((node, Slot(who.key, topo.names[node], who.gpus, who.eligibility.requests)))
    if rail_set is not None:
        slots = _with_rails(view, slots, rail_set)
    anchor = min((n for n, _ in slots), default=min((n for t in parts for n in t), default=0))
    for m in zero:
        at = _launcher_node(view, m, anchor, usable)
        if at is None:
            return _no_launcher_node(gang, view, m, usable)
        slots.append((at, Slot(m.key, topo.names[at], 0, m.eligibility.requests)))
    nodes = [n for n, _ in slots] or [anchor]
    level = topo.common_level(nodes)
    domain = topo.domain(level, topo.node_domain[level][nodes[0]]) if level >= 0 else topo.domain(-1, 0)
    met = preferred is None or level >= preferred
    return Placement(gang.key, tuple(s for _, s in slots), level, domain, met, slices=rule)


def _with_rails(view: View, slots: list[tuple[int, Slot]], rail_set: tuple[str, ...]) -> list[tuple[int, Slot]]:
    per_node: dict[int, list[int]] = {}
    for j, (node, _) in enumerate(slots):
        per_node.setdefault(node, []).append(j)
    out = list(slots)
    for node, js in per_node.items():
        for j, r in zip(js, rails.member_rails(view, node, rail_set, slots[js[0]][1].gpus, len(js))):
            out[j] = (node, replace(slots[j][1], rails=r))
    return out


def _launcher_node(view: View, m: Member, anchor: int, usable: Sequence[bool]) -> int | None:
    """The anchor if the member may run there, else the node nearest to it where it may."""
    if not view.free:
        return None
    mask = label_mask(view, m.eligibility)
    requests = m.eligibility.requests

    def ok(i: int) -> bool:
        return usable[i] and mask[i] and room(requests, view.allocatable[i], view.taken[i]) > 0

    if anchor < len(view.free) and ok(anchor):
        return anchor
    fitting = [i for i in range(len(view.free)) if ok(i)]
    return min(fitting, key=lambda i: (abs(i - anchor), i)) if fitting else None


def _zero_gpu_gang(gang: GangSpec, view: View, usable: Sequence[bool], bound: int,
                   preferred: int | None) -> PlanResult:
    first = gang.members[0] if gang.members else None
    if first is None:
        return NoPlacement(gang.key, (), bound, None, 0, Blockers())
    node = _launcher_node(view, first, 0, usable)
    if node is None:
        return _no_launcher_node(gang, view, first, usable)
    return _assign(gang, view, [{node: {}}], [], preferred, usable)


def _no_launcher_node(gang: GangSpec, view: View, m: Member, usable: Sequence[bool]) -> NoPlacement:
    if not view.free:
        return NoPlacement(gang.key, gang.demand(), -1, None, 0, Blockers())
    c = PodClass(0, m.eligibility, 1)
    blockers = _blockers(view, [c], range(len(view.free)), usable, Constraints(), gpu_check=False, gang=gang.key)
    return NoPlacement(gang.key, gang.demand(), -1, view.topology.domain(-1, 0), 0, blockers)


def _no_placement(gang: GangSpec, view: View, avail: list[int], demand: tuple[int, ...], bound: int,
                  classes: list[PodClass], usable: Sequence[bool], limits: Constraints,
                  rule: SliceRule | None = None, sliced: Sequence[list[PodClass]] = (),
                  fabric: Fabric | None = None) -> NoPlacement:
    """The best domain at the bound level (of the fabric, if any): most whole slices (when
    sliced), then most pods."""
    topo = view.topology
    best, most = None, (-1, -1)
    if limits.within is not None and limits.within.level >= 0:
        domains = [limits.within]
    else:
        domains = [topo.domain(bound, d) for d in range(topo.domain_count(bound))]
        if fabric is not None:
            domains = [d for d in domains if fabric.start <= d.start and d.end <= fabric.end]
    for dom in domains:
        n = (whole_slices(view, avail, dom, list(sliced), rule) if rule else 0, fits(view, classes, avail, dom))
        if n > most:
            best, most = dom, n
    if best is None:
        return NoPlacement(gang.key, demand, bound, None, 0, Blockers(), within=limits.within, slices=rule)
    blockers = _blockers(view, classes, range(best.start, best.end), usable, limits, gang=gang.key,
                         exclusive=gang.exclusive_domain is not None)
    return NoPlacement(gang.key, demand, bound, best, most[1], blockers, within=limits.within, slices=rule,
                       slices_fit=most[0])


def _blockers(view: View, classes: list[PodClass], span: range, usable: Sequence[bool], limits: Constraints,
              gpu_check: bool = True, gang: str = "", exclusive: bool = False) -> Blockers:
    """Why the nodes of ``span`` do not hold more of ``gang``, each node counted once
    (``exclusive``: the gang keeps domains to itself, ``kept_out``)."""
    topo = view.topology
    c = classes[0]
    mask = label_mask(view, c.eligibility)
    bare = label_mask(view, c.eligibility, taints=False)
    refused = set(limits.refused)
    counts = {"cordoned": 0, "not_ready": 0, "tainted": 0, "unmatched": 0, "refused": 0, "outside": 0,
              "held": 0, "shared": 0}
    short: dict[str, int] = {}
    w = limits.within
    for i in span:
        if view.blocked[i] == CORDONED:
            counts["cordoned"] += 1
        elif view.blocked[i] == NOT_READY:
            counts["not_ready"] += 1
        elif w is not None and w.level >= 0 and not w.start <= i < w.end:
            counts["outside"] += 1
        elif topo.names[i] in refused:
            counts["refused"] += 1
        elif (h := view.held.get(i)) is not None and h.gang != gang:
            counts["held"] += 1
        elif not bare[i]:
            counts["unmatched"] += 1
        elif not mask[i]:
            counts["tainted"] += 1
        elif exclusive and not usable[i]:
            counts["shared"] += 1  # kept_out: a domain of its exclusive level that another pod uses
        elif not gpu_check or view.free[i] >= c.gpus:
            lacking = short_of(c.eligibility.requests, view.allocatable[i], view.taken[i])
            if lacking is not None:
                short[lacking] = short.get(lacking, 0) + 1
    reserved = sum(view.reserved[i] for i in span)
    return Blockers(
        **counts,
        short=tuple(sorted(short.items())),
        reserved_gpus=reserved,
        used_gpus=sum(topo.nodes[i].gpus for i in span) - sum(max(view.free[i], 0) for i in span) - reserved,
    )


__all__ = ["UNBOUNDED", "Blockers", "Constraints", "DomainFit", "NoPlacement", "Placement", "PlanResult",
           "domain_fits", "named_slot", "plan"]
