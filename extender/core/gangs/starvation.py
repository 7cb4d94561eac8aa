"""The starvation bound: a gang that has lacked room for ``gangs.starvation_seconds`` drains a domain.

Without it, placement is first come, first placed: a large gang waits until enough GPUs are
free at once in one domain, and smaller gangs that fit in the GPUs freed one pod at a time keep
taking them (the ``contention`` benchmark: a 4 x 8 GPU gang waiting 132 s while 20 smaller gangs
created after it were placed). Past the bound, the gang is planned on the cluster as it will be
once every pod bound now and every gang planned now has finished (``drained_view``), and the GPUs of that plan
are reserved as they are and as they free up: no other gang or GPU pod is planned onto them.
The gang then waits at most the bound plus the longest remaining runtime of the pods there, and
lands there: a domain elsewhere only if it is no wider, or after ``gangs.max_preferred_wait_seconds``
(``landing``).

A drain binds nothing, so it cannot deadlock: drains are planned one after another, each seeing
the ones before. A gang that would not fit even on the drained cluster drains nothing (it is
too large, not starved). The gang's own drain is given back before each of its plans; a drain
whose gang stops asking lapses after the bound (``GangBook.expire``).
"""

from __future__ import annotations

from dataclasses import replace

from typing import Any, Callable, Collection, Sequence

from extender.core import verdicts
from extender.core.model import GangSpec
from extender.core.placement.homes import plan_near
from extender.core.placement.planner import Constraints, Placement, PlanResult, plan
from extender.core.cluster.state import ClusterState, Reservation, View
from extender.core.cluster.topology import Domain, Topology

DRAIN = "#drain"
"""Suffix of a drain's reservation key (and of its slots' member keys)."""


def drained_view(state: ClusterState, counted: Collection[str]) -> View:
    """The cluster as it will be once every pod bound now and every gang planned now has
    finished: only the drains ``counted`` (reservation keys) take GPUs. (Counting the short-lived
    plans of small gangs would scatter a large gang's drain over the GPUs they happen to leave,
    across the domains others need.)"""
    v = state.view()
    held = [0] * len(v.topology.names)
    for key, reservation in state.reservations().items():
        if key in counted:
            for s in reservation.slots:
                held[v.topology.index[s.node]] += s.gpus
    free = [_gpus(state, name) - held[i] for i, name in enumerate(v.topology.names)]
    by_free: dict[int, set[int]] = {}
    for i, f in enumerate(free):
        if v.blocked[i] is None:
            by_free.setdefault(f, set()).add(i)
    reserved_nodes = {name: held[i] for i, name in enumerate(v.topology.names) if held[i]}
    return replace(v, free=free, reserved=held, by_free=by_free, reserved_nodes=reserved_nodes)


def inside(spec: GangSpec, view: View, drain: Reservation | None, refused: Collection[str]) -> Placement | None:
    """The gang's plan on the nodes of its drain, once they hold it (so it lands where it
    waited, not wherever GPUs happen to be free); None without a drain, or while it does not."""
    if drain is None:
        return None
    outside = set(view.topology.names) - {s.node for s in drain.slots}
    result = plan(spec, view, Constraints({*refused, *outside}, None))
    return result if isinstance(result, Placement) else None


def landing(topo: Topology, drain: Reservation, there: Placement | None, elsewhere: PlanResult,
            patient: bool) -> PlanResult | None:
    """Where a drained gang goes now, given its plan on its drain (``there``, None while the
    drain does not hold it yet) and its plan anywhere else (``elsewhere``): a placement narrower
    than the drain; else the drain, once it holds the gang; else a placement as narrow as the
    drain, or (no longer ``patient``) any. None: it waits for its drain, though a wider domain
    holds it now. The drained GPUs were kept idle for it; taking a wider domain a moment before
    they free is what put a 2-node gang across two leaves (bench/README, issue 23)."""
    if not isinstance(elsewhere, Placement):
        return there or elsewhere
    nodes = [topo.index[s.node] for s in drain.slots if s.node in topo.index]
    drained = topo.height(topo.common_level(nodes), nodes[0]) if nodes else topo.height(-1, 0)
    height = topo.height(elsewhere.level, elsewhere.domain.start)
    if height < drained:
        return elsewhere
    if there is not None:
        return there
    return elsewhere if height == drained or not patient else None


def awaited(topo: Topology, view: View, gang: str, drain: Reservation, wider: Placement,
            left: float) -> tuple[Domain, str]:
    """The domain of a drain its gang waits for though ``wider`` holds it now, and the reason
    that says how many of the drained GPUs are still in use (``view``: without the drain)."""
    wanted: dict[int, int] = {}
    for s in drain.slots:
        if s.node in topo.index:
            wanted[topo.index[s.node]] = wanted.get(topo.index[s.node], 0) + s.gpus
    nodes = list(wanted)
    lvl = topo.common_level(nodes)
    domain = topo.domain(lvl, topo.node_domain[lvl][nodes[0]] if lvl >= 0 else 0)
    busy = sum(max(0, gpus - max(view.free[i], 0)) for i, gpus in wanted.items())
    return domain, verdicts.awaiting_drain(topo, gang, domain, busy, sum(wanted.values()), wider, left)


def lapse(state: ClusterState, now: float) -> None:
    """Give back the drains whose gang stopped asking (deleted, or placed)."""
    for key in state.expired(now):
        if key.endswith(DRAIN):
            state.release(key)


def drain(state: ClusterState, rec: Any, spec: GangSpec, bound: float, homes: Sequence[Domain],
          now: float, previous: Reservation | None, record: Callable[[str], Any]) -> str:
    """Reserve the drain of the gang of ``rec`` if it has lacked room (``rec.unplaced_since``)
    for ``bound`` seconds; the words to add to its reason ("" when it drains nothing).

    Drains go by the gangs' age (``first_seen``, then key): the drains of older starving gangs
    count, younger ones' do not, and a younger drain on the nodes this one takes is given back
    (its gang plans another on its next attempt). Without that, the many small gangs of a storm,
    starving too, drain every domain first and the oldest, largest gang none. ``record``: the
    book's record of a gang (``rec`` is one: ``key``, ``first_seen``, ``unplaced_since``,
    ``refused``; the book imports this module, not the other way round).

    Only the planned nodes kube-scheduler refused for this gang are left out (``rec.refused``),
    not the nodes it left out of this call: those are mostly the busy ones, which a drain is
    for. ``previous``: the gang's drain until now, given back by the caller: kept where it still
    fits, so a drain does not wander off the nodes it has already waited for."""
    gang, refused = rec.key, rec.refused
    waited = now - rec.unplaced_since if rec.unplaced_since is not None else 0.0
    if not bound or waited < bound:
        return ""
    others = {k: record(k[: -len(DRAIN)]) for k in state.reservations() if k.endswith(DRAIN)}
    older = {k for k, o in others.items() if o is not None and o.unplaced_since is not None
             and (o.first_seen, o.key) < (rec.first_seen, gang)}
    drained = drained_view(state, older)
    index = drained.topology.index
    if previous is not None and all(s.node in index and drained.blocked[index[s.node]] is None
                                    and drained.free[index[s.node]] >= s.gpus for s in previous.slots):
        slots = previous.slots
    else:
        result = plan_near(spec, drained, refused, homes)
        if not isinstance(result, Placement):
            return ""
        slots = tuple(replace(s, member=s.member + DRAIN) for s in result.slots if s.gpus > 0)
    mine = {s.node for s in slots}
    for key in set(others) - older:
        if mine & {s.node for s in state.reservations()[key].slots}:
            state.release(key)
    state.reserve(Reservation(gang + DRAIN, slots, now + bound))
    nodes = sorted({s.node for s in slots})
    return "; " + verdicts.draining(gang, waited, bound, nodes, sum(s.gpus for s in slots))


def due(rec: Any, drain: Reservation | None, bound: float, now: float) -> bool:
    """Whether a step of the gang's starvation is due, which only a plan takes: its bound has
    passed and it holds no drain, or its drain's hold is half run out (a drain lapses at its
    deadline unless the gang's plan holds it again)."""
    if not bound or rec.unplaced_since is None:
        return False
    if drain is None:
        return bool(now - rec.unplaced_since >= bound)
    return drain.deadline - now < bound / 2


def held(drain: Reservation | None) -> dict[str, int]:
    """GPUs per node the drain holds."""
    out: dict[str, int] = {}
    for s in drain.slots if drain is not None else ():
        out[s.node] = out.get(s.node, 0) + s.gpus
    return out


def _gpus(state: ClusterState, name: str) -> int:
    node = state.node(name)
    assert node is not None  # every node of the tree is one of the state's
    return node.gpus
