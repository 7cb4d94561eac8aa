"""Warm restarts: the domain each workload's gang was last bound in, by lineage
(``GangSpec.lineage``), so that the workload's next instance (a restart attempt: a new gang) is
planned back into it when it fits there: same nodes, cached images, local checkpoints.

Bounded: at most ``WARM_LINEAGES`` workloads, each for ``WARM_SECONDS`` after its gang was
bound, the one bound longest ago forgotten first. A domain is kept as its level key and path,
so a new topology generation still finds it (or finds it gone). Time is an argument.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Collection

from extender.core.cluster.state import View
from extender.core.cluster.topology import Domain, Topology
from extender.core.model import GangSpec
from extender.core.placement.planner import Constraints, Placement, plan

WARM_SECONDS = 600.0
"""How long a workload's last domain is remembered."""
WARM_LINEAGES = 10_000
"""Workloads remembered at once."""


class WarmHomes:
    def __init__(self) -> None:
        self._homes: dict[str, tuple[str, tuple[str | None, ...], float]] = {}
        """lineage -> (level key, path, when bound), oldest first."""

    def remember(self, lineage: str, topo: Topology, domain: Domain, now: float) -> None:
        key = topo.level_key(domain.level)
        if key is None:
            return  # the whole cluster: nothing to go back to
        self._homes.pop(lineage, None)
        self._homes[lineage] = (key, domain.path, now)
        while len(self._homes) > WARM_LINEAGES:
            del self._homes[next(iter(self._homes))]

    def home(self, lineage: str, topo: Topology, now: float) -> Domain | None:
        """The domain the workload's last instance was bound in, if remembered and still one."""
        found = self._homes.get(lineage)
        if found is None or now - found[2] > WARM_SECONDS:
            return None
        lvl = topo.level_index(found[0])
        if lvl is None:
            return None
        d = next((d for d, path in enumerate(topo.paths[lvl]) if path == found[1]), None)
        return topo.domain(lvl, d) if d is not None else None

    def prune(self, now: float) -> None:
        while self._homes and now - next(iter(self._homes.values()))[2] > WARM_SECONDS:
            del self._homes[next(iter(self._homes))]

    def __len__(self) -> int:
        return len(self._homes)


def inside(spec: GangSpec, view: View, refused: Collection[str], home: Domain | None) -> Placement | None:
    """The gang planned inside its workload's last domain, or None (none, or it does not fit)."""
    if home is None:
        return None
    result = plan(spec, view, Constraints(refused, home))
    return replace(result, home=None) if isinstance(result, Placement) else None
