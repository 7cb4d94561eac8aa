"""The live topology view's document (``GET /topology.json`` on the view port, docs/view.md),
made from a ``service.topoview.TopologySnapshot`` outside the service lock.

    {"levels": ["spine", "leaf", "nvlink"],                  # short words, broadest first
     "totals": {"nodes": 2, "gpus": 16, "used": 8, "reserved": 8, "free": 0, "blocked": 0},
     "tree": {"name": "cluster", "children": [               # one object per domain, broadest first;
        {"name": "s1", "children": [ ... {"name": "n1",      # the narrowest level's domains hold
          "nodes": [{"name": "h1", "gpus": 8, "used": 8, "reserved": 0,    # the nodes in rank order
                     "bound": {"ml/a": 8}}, ...]}]}]},       # optional keys: blocked, bound, held
     "gangs": [{"gang": "ml/a", "phase": "bound", "reason": "...", "level": "nvlink",
                "domain": "s1/l1/n1", "nodes": ["h1"], "closest": null, ...}]}

A node's ``reserved``: GPUs held for gangs that no pod uses. Its optional keys: ``blocked``
(cordoned, not ready), ``bound`` (gang -> GPUs its bound plan put there, at most the GPUs in
use), ``held`` (gang -> GPUs reserved for it there, in use or not), ``draining`` (gangs past the
starvation bound for which the node's GPUs are held as its pods finish). A gang's ``closest``
is, while it has no plan, the domain that came closest (``{"level": "leaf", "domain": "s1/l2"}``).
"""

from __future__ import annotations

from typing import Any

from extender.core.cluster.topology import Domain, Topology, format_path
from extender.core.gangs.starvation import DRAIN
from extender.service.topoview import GangSnapshot, TopologySnapshot

BOUND = "bound"


def topology_json(snap: TopologySnapshot) -> dict[str, Any]:
    topo = snap.topology
    held: dict[str, dict[str, int]] = {}
    draining: dict[str, list[str]] = {}
    for res in snap.reservations.values():
        gang = res.gang.removesuffix(DRAIN)
        for slot in res.slots:
            if slot.gpus:
                per = held.setdefault(slot.node, {})
                per[gang] = per.get(gang, 0) + slot.gpus
                if gang != res.gang and gang not in draining.setdefault(slot.node, []):
                    draining[slot.node].append(gang)
    bound: dict[str, dict[str, int]] = {}
    for g in snap.gangs:
        if g.phase == BOUND and g.placement is not None:
            for slot in g.placement.slots:
                if slot.gpus:
                    per = bound.setdefault(slot.node, {})
                    per[g.gang] = per.get(g.gang, 0) + slot.gpus
    nodes = []
    totals = {"nodes": len(snap.nodes), "gpus": 0, "used": 0, "reserved": 0, "free": 0, "blocked": 0}
    for i, facts in enumerate(snap.nodes):
        name = facts.name
        used = snap.used.get(name, 0)
        holds = held.get(name, {})
        # A drain holds GPUs still in use, for when they free up: only those no pod uses count.
        reserved = max(min(sum(holds.values()), facts.gpus - used), 0)
        node: dict[str, Any] = {"name": name, "gpus": facts.gpus, "used": used, "reserved": reserved}
        if snap.blocked[i] is not None:
            node["blocked"] = snap.blocked[i]
            totals["blocked"] += 1
        painted = _capped(bound[name], used) if name in bound else None
        if painted:
            node["bound"] = painted
        if holds:
            node["held"] = holds
        if name in draining:
            node["draining"] = draining[name]
        nodes.append(node)
        totals["gpus"] += facts.gpus
        totals["used"] += used
        totals["reserved"] += reserved
        totals["free"] += max(facts.gpus - used - reserved, 0) if snap.blocked[i] is None else 0
    return {"levels": [topo.level_word(lvl) for lvl in range(topo.depth)], "totals": totals,
            "tree": _domain(topo, -1, 0, nodes), "gangs": [_gang(topo, g) for g in snap.gangs]}


def _capped(gangs: dict[str, int], used: int) -> dict[str, int]:
    """A bound plan's GPUs on a node, no more than the node's pods use (members that finished)."""
    out = {}
    for gang, gpus in gangs.items():
        gpus = min(gpus, used)
        used -= gpus
        if gpus:
            out[gang] = gpus
    return out


def _domain(topo: Topology, lvl: int, d: int, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    dom = topo.domain(lvl, d)
    name = "cluster" if lvl < 0 else format_path(dom.path[-1:])
    if lvl == topo.depth - 1:
        return {"name": name, "nodes": nodes[dom.start:dom.end]}
    return {"name": name, "children": [_domain(topo, lvl + 1, c, nodes) for c in topo.children(lvl, d)]}


def _where(topo: Topology, dom: Domain) -> dict[str, str]:
    return {"level": topo.level_word(dom.level), "domain": format_path(dom.path)}


def _gang(topo: Topology, g: GangSnapshot) -> dict[str, Any]:
    plan = g.placement
    out: dict[str, Any] = {"gang": g.gang, "phase": g.phase, "reason": g.reason,
                           "at_bind": g.at_bind, "min_member": g.min_member,
                           "deadline_in_seconds": g.deadline_in_seconds,
                           "pods": 0, "gpus": 0, "level": None, "domain": None, "nodes": [],
                           "closest": _where(topo, g.closest) if g.closest is not None and plan is None else None}
    if plan is not None:
        gpu_slots = [s for s in plan.slots if s.gpus]
        out.update(pods=len(gpu_slots), gpus=sum(s.gpus for s in gpu_slots), **_where(topo, plan.domain),
                   nodes=list(dict.fromkeys(s.node for s in gpu_slots)))
    return out
