"""Exclusive domains (``railyard.io/exclusive-topology``; Slurm's ``--exclusive=topo``): which
gang holds which domains to itself, and so which nodes no other pod is placed on.

A claim is kept by domain path (a domain's identity, ``Topology``), not by node index, so it
outlives a topology generation: a node that joins a claimed domain later is held too. The book
claims when it plans an exclusive gang and ends a claim once the gang holds and runs nothing
(``GangBook.end_claims``). Not thread-safe: the service serialises access.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from extender.core.cluster.topology import Domain, Topology


@dataclass(frozen=True)
class Hold:
    """A node inside a domain an exclusive gang claims: no other gang and no lone pod is placed on it."""

    gang: str
    domain: Domain
    """The claimed domain, at the gang's exclusive level."""


class Claims:
    def __init__(self) -> None:
        self._claims: dict[str, tuple[str, frozenset[tuple[str | None, ...]]]] = {}
        """Exclusive gang -> (its level's key, the paths of the domains it claims)."""
        self._held: tuple[Topology, dict[int, Hold]] | None = None
        """``held`` for one topology generation and the claims as they are (None: stale)."""
        self.writes = 0
        """Moves with every change of a claim (``ClusterState.writes``)."""

    def claim(self, topo: Topology, gang: str, level: int, nodes: Iterable[str],
              keep: bool = False) -> tuple[Domain, ...]:
        """The domains at ``level`` that hold ``nodes`` become the gang's alone; with ``keep``,
        beside those it claims already (a round beside its running members). The claimed domains."""
        key = topo.level_key(level)
        assert key is not None  # a level of the tree, never the whole cluster
        paths = {topo.domain(level, topo.node_domain[level][topo.index[n]]).path for n in nodes if n in topo.index}
        old = self._claims.get(gang)
        if keep and old is not None and old[0] == key:
            paths |= old[1]
        self._claims[gang] = (key, frozenset(paths))
        self._held = None
        self.writes += 1
        return self.claimed(topo, gang)

    def claimed(self, topo: Topology, gang: str) -> tuple[Domain, ...]:
        """The domains the gang holds exclusively, in tree order (none: it claims none)."""
        return tuple(dict.fromkeys(h.domain for h in self.held(topo).values() if h.gang == gang))

    def unclaim(self, gang: str) -> bool:
        """The gang's domains are open to every pod again; False when it claimed none."""
        if self._claims.pop(gang, None) is None:
            return False
        self._held = None
        self.writes += 1
        return True

    def gangs(self) -> list[str]:
        return list(self._claims)

    def held(self, topo: Topology) -> dict[int, Hold]:
        """Per node index of ``topo``, the claim that holds it (only such nodes; read-only)."""
        if self._held is not None and self._held[0] is topo:
            return self._held[1]
        held: dict[int, Hold] = {}
        for gang, (key, paths) in self._claims.items():
            lvl = topo.level_index(key)
            if lvl is None:
                continue  # the level is gone (nodes relabelled): nothing of it is held
            for d in range(topo.domain_count(lvl)):
                dom = topo.domain(lvl, d)
                if dom.path in paths:
                    held.update((i, Hold(gang, dom)) for i in range(dom.start, dom.end))
        self._held = (topo, held)
        return held
