"""Where a new round of a running gang goes: its replacements, kept beside the members that run.

A round is planned in the narrowest domain that holds every running member first, then each wider
one up to the gang's required level (``home_domains``); a sliced gang whose new members all take
one slice stays near that slice's running members (``home_nodes``). ``plan_near`` tries them in
that order. The gang's promise (rank, slice, rails) is the planner's; this module only says where
to look first.
"""

from __future__ import annotations

from typing import Collection, Sequence

from extender.core.cluster.state import View
from extender.core.cluster.topology import Domain, Topology
from extender.core.model import GangSpec
from extender.core.placement import planner
from extender.core.placement.planner import Constraints, Placement, PlanResult


def plan_near(gang: GangSpec, view: View, refused: Collection[str], homes: Sequence[Domain]) -> PlanResult:
    """Plan within the first of ``homes`` (nearest first) that holds the gang, or anywhere when
    there are none; when none holds it, the last one's answer."""
    result = planner.plan(gang, view, Constraints(refused, homes[0] if homes else None))
    for home in homes[1:]:
        if isinstance(result, Placement):
            break
        result = planner.plan(gang, view, Constraints(refused, home))
    return result


def home_domains(topo: Topology, gang: GangSpec, running: Sequence[str]) -> list[Domain]:
    """Where a new round of a running gang (replacements) may go, nearest first: the narrowest
    domain holding every running member, then each wider one up to the gang's required level
    (never past it). Empty: nothing runs, or the running members share no domain."""
    idx = [topo.index[n] for n in running if n in topo.index]
    if not idx:
        return []
    bound = topo.level_index(gang.required, topo.fabric_at(idx[0])) if gang.required else None
    lvl = topo.common_level(idx)
    if bound is not None and lvl < bound:
        return []  # the running members already break the required level: nothing to keep
    if lvl < 0:
        return []
    out = []
    d = topo.node_domain[lvl][idx[0]]
    while lvl >= (bound if bound is not None else 0):
        out.append(topo.domain(lvl, d))
        if lvl == 0:
            break
        d, lvl = topo.parent[lvl][d], lvl - 1
    return out


def home_nodes(gang: GangSpec, running: Sequence[tuple[str, str]]) -> list[str]:
    """The nodes a round beside running members ((member, node) each) stays near: for a sliced
    gang whose new members all take one slice (``GangSpec.ranks``), that slice's running members'
    nodes, so a replacement lands in its slice's domain when it fits; else every running one's."""
    nodes = [node for _, node in running if node]
    rank, size = dict(gang.ranks), gang.gang_slice_size
    mine = {rank[m.key] // size for m in gang.members if m.key in rank} if size else set()
    if len(mine) != 1:
        return nodes
    return [node for key, node in running if node and key in rank and rank[key] // size in mine] or nodes


__all__ = ["home_domains", "home_nodes", "plan_near"]
