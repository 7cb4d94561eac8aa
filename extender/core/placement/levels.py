"""Which levels a gang's request names, and where it may land: from the host level out to its
required level; with several fabrics (``Topology.fabrics``), per pool, the levels named as that
pool names them, never a step through another pool's level nor wider than the pool.
"""

from __future__ import annotations

from extender.core.model import GangSpec
from extender.core.cluster.topology import Domain, Fabric, Topology


def resolve_levels(gang: GangSpec, topo: Topology, fabric: Fabric | None = None) -> tuple[int, int | None, list[str]]:
    """(bound level, preferred level, problems) for the gang's topology request, by name among
    the levels of ``fabric`` when the cluster has several (never wider than the fabric)."""
    problems = []
    levels = [lvl.key for i, lvl in enumerate(topo.levels) if fabric is None or i in fabric.levels]
    known = ", ".join(levels) or "none"
    where = "this cluster" if fabric is None else f"pool {fabric.name}"
    bound, preferred = (-1 if fabric is None else 0), None
    if gang.required is not None:
        idx = topo.level_index(gang.required, fabric)
        if idx is None:
            problems.append(f"required topology level {gang.required!r} is not a level of {where} (levels: {known})")
        else:
            bound = idx
    if gang.preferred is not None:
        idx = topo.level_index(gang.preferred, fabric)
        if idx is None:
            problems.append(f"preferred topology level {gang.preferred!r} is not a level of {where} (levels: {known})")
        elif idx < bound:
            problems.append(f"preferred level {gang.preferred} is wider than required level {gang.required}")
        else:
            preferred = idx
    return bound, preferred, problems


def exclusive_level(gang: GangSpec, topo: Topology, fabric: Fabric | None = None) -> tuple[int | None, list[str]]:
    """(the level whose domains the gang keeps to itself, problems); None: it asks for none."""
    if gang.exclusive_domain is None:
        return None, []
    idx = topo.level_index(gang.exclusive_domain, fabric)
    if idx is None or idx < 0:
        levels = [lvl.key for i, lvl in enumerate(topo.levels) if fabric is None or i in fabric.levels]
        where = "this cluster" if fabric is None else f"pool {fabric.name}"
        return None, [f"exclusive topology level {gang.exclusive_domain!r} is not a level of {where} "
                      f"(levels: {', '.join(levels) or 'none'})"]
    return idx, []


def landing_levels(topo: Topology, bound: int, fabric: Fabric | None) -> list[int]:
    """The levels a gang may land at, narrowest first: from the host level out to ``bound``; in
    a fabric, its own levels and the fabric itself, never a step through another pool's."""
    if fabric is None:
        return list(range(topo.depth, bound - 1, -1))
    return [topo.depth, *(lvl for lvl in reversed(fabric.levels) if lvl >= bound), *([0] if bound <= 0 else [])]


def landing_domains(gang: GangSpec, topo: Topology) -> list[list[Domain]]:
    """Where the gang may land, narrowest first: per step, the domains of one level (with
    several fabrics, of each pool's level at that height above the host; pools without the
    gang's levels left out, and never a step through another pool's level)."""
    steps: list[list[Domain]] = []
    for fabric in topo.fabrics or (None,):
        bound, _, problems = resolve_levels(gang, topo, fabric)
        if problems:
            continue
        for height, lvl in enumerate(landing_levels(topo, bound, fabric)):
            doms = [topo.domain(lvl, d) for d in range(topo.domain_count(lvl))]
            if fabric is not None:
                doms = [d for d in doms if fabric.start <= d.start and d.end <= fabric.end]
            if height == len(steps):
                steps.append([])
            steps[height] += doms
    return steps
