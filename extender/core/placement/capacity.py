"""Whether a gang's request exceeds what the cluster has free, in one pass over the nodes'
free GPUs: a necessary condition of every plan, cheap enough to ask before a full one.

A domain can hold the gang only if its nodes have a slot for each of the gang's GPU pods,
counted node by node with the smallest pod (``free // gpus``), and its GPUs in all. Labels,
taints, other resources, refused nodes, slices, rails and exclusive domains only take room
away, so a gang this finds short of room finds no placement in ``planner.plan`` either; the
converse does not hold (the planner's reason has the numbers).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from extender.core.cluster.state import View
from extender.core.model import GangSpec


def lacks_room(gang: GangSpec, view: View, also_free: Mapping[str, int]) -> bool:
    """True when no domain the gang may land in (of its required level; the cluster when it
    requires none, or its levels are resolved per pool) has room for it by the counts above.
    ``also_free``: GPUs per node name to count as free besides the view's (the gang's own
    drain, which its plan gives back first)."""
    demand = [g for g in gang.demand() if g > 0]
    if not demand:
        return False
    topo = view.topology
    smallest, need, total = demand[-1], len(demand), sum(demand)
    free = [f if b is None else 0 for f, b in zip(view.free, view.blocked)]
    for name, gpus in also_free.items():
        i = topo.index.get(name)
        if i is not None and view.blocked[i] is None:
            free[i] += gpus
    level = topo.level_index(gang.required) if gang.required is not None and not topo.fabrics else None
    if level is None or level < 0:
        spans: Iterable[tuple[int, int]] = [(0, len(free))]
    elif level == topo.depth:
        spans = ((i, i + 1) for i in range(len(free)))
    else:
        spans = zip(topo.start[level], topo.end[level])
    for a, b in spans:
        part = free[a:b]
        if sum(f for f in part if f > 0) >= total and sum(f // smallest for f in part if f >= smallest) >= need:
            return False
    return True
