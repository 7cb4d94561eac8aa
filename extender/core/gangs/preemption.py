"""Gang-aware preemption: which work a gang that cannot be placed takes, and where (issue 12).

The choice, in one place:

1. The preemptor's priority is its members' lowest; a gang with a member whose
   ``preemptionPolicy`` is ``Never`` preempts nothing. It may take, and only from work of
   *lower* priority: a pod of no gang, one by one; a running gang, whole (every bound member,
   wherever it runs, and only when every member has lower priority and none is protected);
   the reservation of a gang not yet bound (released: no pod is evicted). Never a pod of
   equal or higher priority, never part of a running gang, never the gang's own members,
   never a pod whose eviction a PodDisruptionBudget blocked a moment ago (``protected``).
   Pods already leaving (evicted, not yet gone) count as gone.
2. From the host level outward to the gang's required level (or the whole cluster), the first
   level with a domain where taking everything it may there makes room for the whole gang
   wins (a new round of a running gang: its home domains, nearest first).
3. In such a domain, start from taking every unit that frees GPUs in it, then give units back
   one by one whenever the gang still fits without them: what is left is minimal, no unit of
   it can be spared. Which are given back first decides who goes; three orders are tried
   (most pods first; most pods per GPU freed first; highest priority first) and the cheapest
   outcome is kept.
4. Among the level's domains, the cheapest: fewest pods evicted, fewest reservations released,
   lowest highest victim priority, lowest sum of victim priorities, fewest GPUs left over,
   then domain order.

"Fits" is the planner's rule: one class of equal members fits when the domain's nodes hold
them all (GPUs and every requested resource, node by node); several classes, first-fit
decreasing in node order. The caller then plans the gang inside the chosen domain on a view
with the victims gone (``without``) and reserves it while they terminate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Callable, Collection, Mapping, Sequence

from extender.core import verdicts
from extender.core.placement.eligibility import label_mask, room
from extender.core.model import PREEMPT_NEVER, Eligibility, GangSpec, PodFacts, Resources
from extender.core.placement.levels import landing_domains, resolve_levels
from extender.core.cluster.state import Slot, View
from extender.core.cluster.topology import Domain, Topology, format_path

POD, GANG, RESERVATION = "pod", "gang", "reservation"


@dataclass(frozen=True)
class Held:
    """Another gang's reservation, as the choice sees it."""

    gang: str
    priority: int
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class Unit:
    """Work taken together: one pod, a running gang whole, or a gang's reservation."""

    key: str
    """The pod's key, or the gang's."""
    kind: str
    """``pod``, ``gang`` or ``reservation``."""
    priority: int
    pods: tuple[PodFacts, ...]
    """The pods evicted (none for a reservation)."""
    frees: tuple[tuple[int, int, Resources], ...]
    """(node index, GPUs, other requests) given back on each node."""


@dataclass(frozen=True)
class Choice:
    gang: str
    priority: int
    domain: Domain
    units: tuple[Unit, ...]
    needed: int
    """GPUs the gang asks for."""
    free: int
    """GPUs free for it in the domain before (nodes its pods may use)."""
    leaving: int
    """GPUs of pods already leaving the domain (evicted before, not gone yet)."""
    reason: str

    @property
    def evict(self) -> tuple[PodFacts, ...]:
        return tuple(p for u in self.units for p in u.pods)

    @property
    def release(self) -> tuple[str, ...]:
        return tuple(u.key for u in self.units if u.kind == RESERVATION)


@dataclass(frozen=True)
class NoChoice:
    gang: str
    reason: str


@dataclass
class _Class:
    gpus: int
    eligibility: Eligibility
    count: int
    may: Sequence[bool] = ()


def gang_priority(members: Sequence[PodFacts]) -> tuple[int, str | None]:
    """(the members' lowest priority, the first member that never preempts, if any)."""
    never = next((p.key for p in members if p.preemption_policy == PREEMPT_NEVER), None)
    return min((p.priority for p in members), default=0), never


def choose(spec: GangSpec, view: View, members: Sequence[PodFacts],
           pods_on: Callable[[str], Mapping[str, PodFacts]], gang_members: Callable[[str], Sequence[PodFacts]],
           held: Sequence[Held] = (), *, protected: Collection[str] = frozenset(),
           leaving: Collection[str] = frozenset(), refused: Collection[str] = frozenset(),
           homes: Sequence[Domain] = ()) -> Choice | NoChoice:
    """The domain and victims for ``spec`` (its pending ``members`` give its priority).

    ``pods_on(node)``: uid -> every bound, unfinished pod there; ``gang_members(gang)``: a named
    gang's bound pods; ``held``: other gangs' reservations not yet bound; ``protected``: uids
    not to evict now; ``leaving``: uids already evicted; ``refused``: nodes kube-scheduler's
    filters refused for this gang; ``homes``: a running gang's domains, nearest first.
    """
    topo = view.topology
    bound, _, problems = resolve_levels(spec, topo)
    if spec.invalid or problems:
        return NoChoice(spec.key, verdicts.cannot_preempt_invalid(spec.key, [*spec.invalid, *problems]))
    priority, never = gang_priority(members)
    if never is not None:
        return NoChoice(spec.key, verdicts.never_preempts(spec.key, never))
    classes = _classes(spec)
    if not classes:
        return NoChoice(spec.key, verdicts.cannot_preempt_no_gpus(spec.key))
    n = len(topo.names)
    refused = set(refused)
    usable = [view.blocked[i] is None and topo.names[i] not in refused for i in range(n)]
    for c in classes:
        mask = label_mask(view, c.eligibility)
        c.may = [usable[i] and mask[i] for i in range(n)]
    free, taken, left = _after_leaving(view, pods_on, leaving)
    units, unit_at = _units(spec.key, priority, view, pods_on, gang_members, held, protected, leaving)
    total = sum(c.gpus * c.count for c in classes)
    may_any = [any(c.may[i] for c in classes) for i in range(n)]
    potential = [0] * n
    for u in units:
        for i, g, _ in u.frees:
            potential[i] += g
    prefix = [0, *accumulate((max(free[i], 0) + potential[i]) if may_any[i] else 0 for i in range(n))]

    def domains() -> list[list[Domain]]:
        if homes:
            return [[h] for h in homes]
        return landing_domains(spec, topo)

    best_fits: tuple[int, Domain] | None = None
    for candidates in domains():
        found = []
        for dom in candidates:
            if prefix[dom.end] - prefix[dom.start] < total:
                continue
            trial = _Trial(view, classes, free, taken, dom)
            inside = sorted({k for i in range(dom.start, dom.end) for k in unit_at[i]})
            for k in inside:
                trial.apply(units[k], 1)
            fits = trial.fits()
            if fits < trial.count:
                if best_fits is None or fits > best_fits[0]:
                    best_fits = (fits, dom)
                continue
            chosen = _spare(trial, [units[k] for k in inside])
            found.append(((*_cost(chosen, trial), dom.start), dom, chosen))
        if found:
            found.sort(key=lambda f: f[0])
            _, dom, chosen = found[0]
            return _choice(spec, priority, topo, dom, chosen, classes, view.free, left, total)
    return _nothing(spec, priority, view, classes, free, taken, units, unit_at, pods_on, protected,
                    bound, homes, best_fits)


def without(view: View, pods: Sequence[PodFacts]) -> View:
    """A copy of ``view`` in which ``pods`` are gone: what the gang is planned on while its
    victims terminate (reservations to release are released in the state first)."""
    topo = view.topology
    free, taken = list(view.free), list(view.taken)
    for p in pods:
        i = topo.index.get(p.node)
        if i is not None:
            free[i] += p.gpus
            taken[i] = _minus(taken[i], p.eligibility.requests)
    by_free: dict[int, set[int]] = {}
    for i, f in enumerate(free):
        if f > 0 and view.blocked[i] is None:
            by_free.setdefault(f, set()).add(i)
    return replace(view, free=free, taken=taken, by_free=by_free)


# -- building blocks ------------------------------------------------------------------------


def _classes(spec: GangSpec) -> list[_Class]:
    counts: dict[tuple[int, Eligibility], int] = {}
    for gpus, e in spec.slots():
        if gpus > 0:
            counts[(gpus, e)] = counts.get((gpus, e), 0) + 1
    return [_Class(g, e, k) for (g, e), k in sorted(counts.items(), key=lambda kv: -kv[0][0])]


def _after_leaving(view: View, pods_on: Callable[[str], Mapping[str, PodFacts]],
                   leaving: Collection[str]) -> tuple[list[int], list[Mapping[str, int]], list[int]]:
    """Free GPUs and taken resources per node with the leaving pods gone; GPUs leaving per node."""
    free, taken = list(view.free), list(view.taken)
    left = [0] * len(free)
    names = view.topology.names
    for i, name in enumerate(names) if leaving else ():
        for uid, p in pods_on(name).items():
            if uid in leaving:
                free[i] += p.gpus
                left[i] += p.gpus
                taken[i] = _minus(taken[i], p.eligibility.requests)
    return free, taken, left


def _units(gang: str, priority: int, view: View, pods_on: Callable[[str], Mapping[str, PodFacts]],
           gang_members: Callable[[str], Sequence[PodFacts]], held: Sequence[Held],
           protected: Collection[str], leaving: Collection[str]) -> tuple[list[Unit], list[list[int]]]:
    """Every unit the gang may take, and per node index the units that free GPUs on it."""
    topo = view.topology
    units: list[Unit] = []
    gangs_seen: set[str] = set()
    for i, name in enumerate(topo.names):
        for uid, p in pods_on(name).items():
            if uid in leaving or p.gang.key == gang:
                continue
            if p.gang.named:
                if p.gang.key in gangs_seen:
                    continue
                gangs_seen.add(p.gang.key)
                bound = [m for m in gang_members(p.gang.key) if (m.uid or m.key) not in leaving] or [p]
                if len(bound) > 1:
                    unit = _gang_unit(p.gang.key, bound, priority, topo, protected)
                    if unit is not None:
                        units.append(unit)
                    continue
            if p.priority < priority and uid not in protected and p.gpus > 0:
                units.append(Unit(p.key, POD, p.priority, (p,), ((i, p.gpus, p.eligibility.requests),)))
    for h in held:
        if h.priority < priority:
            frees = tuple((topo.index[s.node], s.gpus, s.requests) for s in h.slots
                          if s.node in topo.index and s.gpus > 0)
            if frees:
                units.append(Unit(h.gang, RESERVATION, h.priority, (), frees))
    unit_at: list[list[int]] = [[] for _ in topo.names]
    for k, u in enumerate(units):
        for i in {i for i, _, _ in u.frees}:
            unit_at[i].append(k)
    return units, unit_at


def _gang_unit(key: str, bound: Sequence[PodFacts], priority: int, topo: Topology,
               protected: Collection[str]) -> Unit | None:
    """A running gang, whole, or None when any member outranks the preemptor or is protected."""
    top = max(m.priority for m in bound)
    if top >= priority or any((m.uid or m.key) in protected for m in bound):
        return None
    frees = tuple((topo.index[m.node], m.gpus, m.eligibility.requests) for m in bound if m.node in topo.index)
    return Unit(key, GANG, top, tuple(sorted(bound, key=lambda m: m.key)), frees)


_Snapshot = tuple[list[int], list[Mapping[str, int]], list[int] | None, int | None]
"""A trial's counters (free GPUs, other resources taken, per-node caps and their total)."""
_Cost = tuple[int, int, int, int, int]


class _Trial:
    """The gang against one domain while units are taken and given back: free GPUs and taken
    resources of the domain's nodes, and how many of the gang's pods fit."""

    def __init__(self, view: View, classes: list[_Class], free: Sequence[int],
                 taken: Sequence[Mapping[str, int]], dom: Domain) -> None:
        self.view, self.classes, self.dom = view, classes, dom
        self.start, self.end = dom.start, dom.end
        self.free = list(free[dom.start:dom.end])
        self.taken: list[Mapping[str, int]] = list(taken[dom.start:dom.end])
        self.count = sum(c.count for c in classes)
        self.single = len(classes) == 1
        if self.single:
            self.caps = [self._cap(j) for j in range(len(self.free))]
            self.total = sum(self.caps)

    def _cap(self, j: int, c: _Class | None = None, gpus: int | None = None,
             taken: Mapping[str, int] | None = None) -> int:
        c = c or self.classes[0]
        i = self.start + j
        free = self.free[j] if gpus is None else gpus
        if not c.may[i] or free < c.gpus:
            return 0
        return min(free // c.gpus, room(c.eligibility.requests, self.view.allocatable[i],
                                        self.taken[j] if taken is None else taken))

    def apply(self, unit: Unit, sign: int) -> None:
        """sign 1: take the unit (its GPUs and requests are free); -1: give it back."""
        for i, gpus, requests in unit.frees:
            if not self.start <= i < self.end:
                continue
            j = i - self.start
            self.free[j] += sign * gpus
            self.taken[j] = _minus(self.taken[j], requests, sign)
            if self.single:
                cap = self._cap(j)
                self.total += cap - self.caps[j]
                self.caps[j] = cap

    def snapshot(self) -> _Snapshot:
        return (list(self.free), list(self.taken), list(self.caps) if self.single else None,
                self.total if self.single else None)

    def restore(self, saved: _Snapshot) -> None:
        free, taken, caps, total = saved
        self.free, self.taken = list(free), list(taken)
        if self.single and caps is not None and total is not None:
            self.caps, self.total = list(caps), total

    def fits(self) -> int:
        """How many of the gang's pods the domain holds now."""
        if self.single:
            return min(self.total, self.count)
        gpus = list(self.free)
        used: dict[int, dict[str, int]] = {}
        placed = 0
        for c in self.classes:
            want = c.count
            for j in range(len(gpus)):
                if not want:
                    break
                taken = self.taken[j] if j not in used else _minus(self.taken[j], tuple(used[j].items()), -1)
                k = min(want, self._cap(j, c, gpus[j], taken))
                if k:
                    gpus[j] -= k * c.gpus
                    extra = used.setdefault(j, {})
                    for name, amount in c.eligibility.requests:
                        extra[name] = extra.get(name, 0) + k * amount
                    want -= k
                    placed += k
        return placed

    def useful(self, unit: Unit) -> int:
        return sum(g for i, g, _ in unit.frees if self.start <= i < self.end)


SPARE_ORDERS = (
    # Keep (give back first) the units that cost most: most pods, then highest priority.
    lambda u, useful: (-len(u.pods), -u.priority, useful, u.kind, u.key),
    # Keep the units that free least per pod evicted, so few large pods go rather than many small.
    lambda u, useful: (-len(u.pods) / max(useful, 1), -u.priority, u.kind, u.key),
    # Keep the highest priorities whatever their size (kube-scheduler's reprieve order).
    lambda u, useful: (-u.priority, -len(u.pods), useful, u.kind, u.key),
)
"""The orders in which ``_spare`` gives units back; the cheapest outcome is kept."""


def _spare(trial: _Trial, taken: list[Unit]) -> list[Unit]:
    """From every unit taken, give back each one the gang fits without; one pass per order of
    ``SPARE_ORDERS``, the cheapest result wins (each is minimal: nothing more can be spared)."""
    start = trial.snapshot()
    best: tuple[_Cost, list[Unit], _Snapshot] | None = None
    tried = []
    for order in SPARE_ORDERS:
        sequence = sorted(taken, key=lambda u: order(u, trial.useful(u)))
        if sequence in tried:
            continue  # the same order as one tried already: the same outcome
        tried.append(sequence)
        trial.restore(start)
        kept = []
        for u in sequence:
            trial.apply(u, -1)
            if trial.fits() < trial.count:
                trial.apply(u, 1)
                kept.append(u)
        cost = _cost(kept, trial)
        if best is None or cost < best[0]:
            best = (cost, kept, trial.snapshot())
    assert best is not None
    trial.restore(best[2])
    return best[1]


def _cost(units: list[Unit], trial: _Trial) -> _Cost:
    """Fewest pods evicted, fewest reservations released, lowest highest priority, lowest sum,
    fewest GPUs left over on the nodes the gang may use."""
    pods = sum(len(u.pods) for u in units)
    released = sum(1 for u in units if u.kind == RESERVATION)
    priorities = [p.priority for u in units for p in u.pods] + [u.priority for u in units if not u.pods]
    need = sum(c.gpus * c.count for c in trial.classes)
    leftover = sum(max(f, 0) for j, f in enumerate(trial.free)
                   if any(c.may[trial.start + j] for c in trial.classes)) - need
    return (pods, released, max(priorities, default=0), sum(priorities), leftover)


def _choice(spec: GangSpec, priority: int, topo: Topology, dom: Domain, units: list[Unit],
            classes: list[_Class], free_now: Sequence[int], left: Sequence[int], total: int) -> Choice:
    may = [any(c.may[i] for c in classes) for i in range(dom.start, dom.end)]
    free = sum(max(free_now[i], 0) for i, m in zip(range(dom.start, dom.end), may) if m)
    leaving = sum(left[i] for i, m in zip(range(dom.start, dom.end), may) if m)
    units = sorted(units, key=lambda u: (u.kind, u.key))
    inside = range(dom.start, dom.end)
    outside = sum(1 for u in units for p in u.pods if topo.index.get(p.node, -1) not in inside)
    pods: dict[int, int] = {}
    for u in units:
        for p in u.pods:
            pods[p.priority] = pods.get(p.priority, 0) + 1
    released = [(u.key, u.priority) for u in units if u.kind == RESERVATION]
    reason = verdicts.preempting(spec.key, priority, topo.level_word(dom.level), format_path(dom.path),
                                 pods, released, outside, total, free, leaving)
    return Choice(spec.key, priority, dom, tuple(units), total, free, leaving, reason)


def _nothing(spec: GangSpec, priority: int, view: View, classes: list[_Class], free: Sequence[int],
             taken: Sequence[Mapping[str, int]], units: list[Unit], unit_at: list[list[int]],
             pods_on: Callable[[str], Mapping[str, PodFacts]], protected: Collection[str], bound: int,
             homes: Sequence[Domain], best: tuple[int, Domain] | None) -> NoChoice:
    """Why no domain works, with the numbers of the one that comes closest."""
    topo = view.topology
    if best is None:  # every domain was skipped on GPUs alone: measure the first one at the level
        dom = homes[0] if homes else topo.domain(bound, 0) if topo.names else None
        if dom is None:
            return NoChoice(spec.key, verdicts.cannot_preempt_empty(spec.key))
        trial = _Trial(view, classes, free, taken, dom)
        for k in sorted({k for i in range(dom.start, dom.end) for k in unit_at[i]}):
            trial.apply(units[k], 1)
        best = (trial.fits(), dom)
    fits, dom = best
    outranking = guarded = shielded = 0
    taken_units = {p.uid or p.key for u in units for p in u.pods}
    for i in range(dom.start, dom.end):
        for uid, p in pods_on(topo.names[i]).items():
            if p.gang.key == spec.key or uid in taken_units:
                continue
            if uid in protected:
                shielded += p.gpus
            elif p.priority >= priority:
                outranking += p.gpus
            else:
                guarded += p.gpus
    where = "that home domain" if homes else topo.level_word(dom.level)
    return NoChoice(spec.key, verdicts.cannot_preempt(
        spec.key, priority, where, format_path(dom.path), fits, sum(c.count for c in classes),
        outranking, guarded, shielded))


def _minus(taken: Mapping[str, int], requests: Resources, sign: int = 1) -> Mapping[str, int]:
    if not requests:
        return taken
    out = dict(taken)
    for name, amount in requests:
        out[name] = out.get(name, 0) - sign * amount
    return out
