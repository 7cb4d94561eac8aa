"""The static topology tree of one node-set generation.

Nodes are sorted by their path (their value at each level, broadest first), so every domain
at every level is a contiguous range of node indexes, and depth-first order is index order.
A domain is identified by its whole path: rack ``r1`` under block ``b1`` and rack ``r1``
under block ``b2`` are two domains.

Rules for imperfect labels (each reported with a count and an example, never silent):

- A node missing the label of a level gets a domain of its own at that level and every
  narrower level (it still shares the broader domains it has labels for). It is never merged
  with other unlabelled nodes: "no label" is not a place.
- A value seen under two parents (an NVLink domain spread over two leaves, or a rack name
  reused in two blocks) is split: one domain per parent. Splitting can only under-promise
  locality; merging could promise an NVLink domain that is not there.

Several fabrics (node pools whose labels follow different schemes or depths): the broadest
level is ``FABRIC_LEVEL``, one domain per pool, and below it the levels of every pool's tree in
turn. A node's value at a level of another pool's tree is ``OTHER_FABRIC``: the domain there is
its parent's, a step passed through, never a place (``fabrics`` lists each pool's own levels;
display paths leave the steps out).

The tree is rebuilt only when the set of nodes or their labels change; capacity lives in
``state.ClusterState``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from extender.core.model import FABRIC_LEVEL, HOST_LEVEL, OTHER_FABRIC, Level, NodeFacts

_DIGITS = re.compile(r"(\d+)")


def _natural(value: str) -> tuple[str | int, ...]:
    """``node-9`` before ``node-10``: depth-first order is what ranks follow."""
    parts = _DIGITS.split(value)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


@dataclass(frozen=True)
class Domain:
    level: int
    """Index into ``Topology.levels``; ``len(levels)`` is the host level, -1 the whole cluster."""
    index: int
    start: int
    end: int
    """Node index range [start, end)."""
    path: tuple[str | None, ...]


@dataclass(frozen=True)
class Fabric:
    """One node pool of a cluster with several fabrics: its domain at ``FABRIC_LEVEL`` (level 0)
    and the positions of its own levels, broadest first."""

    name: str
    index: int
    start: int
    end: int
    levels: tuple[int, ...]


class Topology:
    """The tree is read-only after construction; cheap to share between threads. Only a node's
    facts change in place (``renew``), never its place in the tree."""

    def __init__(self, levels: Sequence[Level], nodes: Sequence[NodeFacts]):
        self.levels: tuple[Level, ...] = tuple(levels)
        depth = len(self.levels)
        path_of = {n.name: n.path(self.levels) for n in nodes}

        def sort_key(n: NodeFacts) -> tuple[tuple[Any, ...], ...]:
            # A missing value becomes unique to the node, so it never merges with another.
            key: list[tuple[Any, ...]] = []
            missing = False
            for v in path_of[n.name]:
                missing = missing or v is None
                # The raw value closes the key: "n01" and "n1" sort together but never merge.
                key.append((1, n.name) if missing or v is None else (0, _natural(v), v))
            return (*key, (0, _natural(n.name), n.name))

        ordered = sorted(nodes, key=sort_key)
        self.nodes: list[NodeFacts] = list(ordered)
        """In node index order; an entry changes when the node's facts do (``renew``)."""
        self.names: tuple[str, ...] = tuple(n.name for n in ordered)
        self.node_paths: tuple[tuple[str | None, ...], ...] = tuple(path_of[n] for n in self.names)
        """Each node's value at each level, in node index order."""
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("duplicate node names")
        keys = [sort_key(n) for n in ordered]

        # Per level: domain ranges, display paths, parent domain, child range.
        self.start: list[list[int]] = []
        self.end: list[list[int]] = []
        self.paths: list[list[tuple[str | None, ...]]] = []
        self.parent: list[list[int]] = []
        self.node_domain: list[list[int]] = []
        for lvl in range(depth):
            starts: list[int] = []
            ends: list[int] = []
            paths: list[tuple[str | None, ...]] = []
            parents: list[int] = []
            node_dom = [0] * len(ordered)
            prev = None
            for i, k in enumerate(keys):
                prefix = k[: lvl + 1]
                if prefix != prev:
                    if starts:
                        ends.append(i)
                    starts.append(i)
                    paths.append(_display_path(self.node_paths[i], lvl))
                    parents.append(self.node_domain[lvl - 1][i] if lvl else -1)
                    prev = prefix
                node_dom[i] = len(starts) - 1
            if starts:
                ends.append(len(ordered))
            self.start.append(starts)
            self.end.append(ends)
            self.paths.append(paths)
            self.parent.append(parents)
            self.node_domain.append(node_dom)
        # Host level: one domain per node.
        n_nodes = len(ordered)
        self.start.append(list(range(n_nodes)))
        self.end.append(list(range(1, n_nodes + 1)))
        self.paths.append([_display_path(p, depth - 1) + (n.name,) for p, n in zip(self.node_paths, ordered)])
        self.parent.append(list(self.node_domain[depth - 1]) if depth else [-1] * n_nodes)
        self.node_domain.append(list(range(n_nodes)))

        # Children of domain d at level l are the domains [child_lo, child_hi) at level l+1.
        self.child_lo: list[list[int]] = []
        self.child_hi: list[list[int]] = []
        for lvl in range(depth):
            lo = [0] * len(self.start[lvl])
            hi = [0] * len(self.start[lvl])
            for d in range(len(self.start[lvl])):
                lo[d] = self.node_domain[lvl + 1][self.start[lvl][d]]
                hi[d] = self.node_domain[lvl + 1][self.end[lvl][d] - 1] + 1
            self.child_lo.append(lo)
            self.child_hi.append(hi)
        self.fabrics: tuple[Fabric, ...] = ()
        """Empty unless the broadest level is ``FABRIC_LEVEL``."""
        if depth and self.levels[0].key == FABRIC_LEVEL:
            self.fabrics = tuple(
                Fabric(path[0], d, self.start[0][d], self.end[0][d],
                       tuple(i for i, lvl in enumerate(self.levels) if lvl.fabric == path[0]))
                for d, path in enumerate(self.paths[0]) if path[0] is not None)
        self.problems: tuple[str, ...] = tuple(self._find_problems())

    # -- lookups ---------------------------------------------------------------------------

    def renew(self, node: NodeFacts) -> None:
        """The node's facts as they are now (labels, GPUs, resources, rails), its path
        unchanged. One entry is swapped (atomic): a reader sees the old facts or the new."""
        self.nodes[self.index[node.name]] = node

    @property
    def depth(self) -> int:
        """Number of levels above the host level."""
        return len(self.levels)

    def level_key(self, lvl: int) -> str | None:
        if lvl < 0:
            return None
        return HOST_LEVEL if lvl == self.depth else self.levels[lvl].key

    def level_word(self, lvl: int) -> str:
        """A short word for a level in sentences: its name, else the last part of its key."""
        if lvl < 0:
            return "cluster"
        if lvl == self.depth:
            return "node"
        level = self.levels[lvl]
        return level.name or level.key.rsplit("/", 1)[-1]

    def level_index(self, key_or_name: str, fabric: Fabric | None = None) -> int | None:
        """The level a request names: a level key, its short name, or the host level; with a
        fabric, among that pool's levels (and the fabric level itself)."""
        if key_or_name in (HOST_LEVEL, "hostname", "node", "host"):
            return self.depth
        for i, lvl in enumerate(self.levels):
            if fabric is not None and i and lvl.fabric != fabric.name:
                continue
            if key_or_name == lvl.key or (lvl.name and key_or_name == lvl.name):
                return i
        return None

    def height(self, lvl: int, node: int) -> int:
        """How high a domain at level ``lvl`` holding node index ``node`` is: 0 the node itself,
        else 1 plus the levels of the node's pool below ``lvl``. Comparable across pools (a
        pool's nvlink domain is 1 high in a tree of any depth); -1 is the whole cluster."""
        if lvl >= self.depth:
            return 0
        fabric = self.fabric_at(node)
        levels = fabric.levels if fabric is not None else range(self.depth)
        return 1 + sum(1 for other in levels if other > lvl)

    def fabric_at(self, node: int) -> Fabric | None:
        """The pool of a node index (None: one fabric, or a node of none)."""
        return next((f for f in self.fabrics if f.start <= node < f.end), None)

    def domain_count(self, lvl: int) -> int:
        return 1 if lvl < 0 else len(self.start[lvl])

    def domain(self, lvl: int, d: int) -> Domain:
        if lvl < 0:
            return Domain(-1, 0, 0, len(self.names), ())
        path = self.paths[lvl][d]
        if self.fabrics:
            path = tuple(v for v in path if v != OTHER_FABRIC)
        return Domain(lvl, d, self.start[lvl][d], self.end[lvl][d], tuple(path))

    def children(self, lvl: int, d: int) -> range:
        """Child domain indexes (at level lvl + 1) of domain d at level lvl; lvl -1 is the root."""
        if lvl < 0:
            return range(self.domain_count(0)) if self.depth else range(len(self.names))
        return range(self.child_lo[lvl][d], self.child_hi[lvl][d])

    def common_level(self, node_indexes: Sequence[int]) -> int:
        """The narrowest level at which one domain holds all the given nodes (-1: none)."""
        if not node_indexes:
            return -1
        for lvl in range(self.depth, -1, -1):
            doms = {self.node_domain[lvl][i] for i in node_indexes}
            if len(doms) == 1:
                if lvl < self.depth and self.paths[lvl][doms.pop()][-1] in (None, OTHER_FABRIC):
                    continue  # a node-private "missing label" domain, or a step through another pool's level
                return lvl
        return -1

    # -- reporting -------------------------------------------------------------------------

    def _find_problems(self) -> list[str]:
        problems = []
        for lvl, level in enumerate(self.levels):
            missing = [n.name for n, p in zip(self.nodes, self.node_paths) if p[lvl] is None]
            if missing:
                pool = f" (pool {level.fabric})" if level.fabric else ""
                problems.append(
                    f"{len(missing)} node(s){pool} lack label {level.key} (e.g. {missing[0]}); "
                    f"each is a domain of its own at that level and below"
                )
            if lvl == 0:
                continue
            parents_of: dict[str, set[tuple[str | None, ...]]] = {}
            for d, path in enumerate(self.paths[lvl]):
                if path[-1] not in (None, OTHER_FABRIC):
                    parents_of.setdefault(path[-1], set()).add(tuple(path[:-1]))
            split = {v: ps for v, ps in parents_of.items() if len(ps) > 1}
            if split:
                value, ps = sorted(split.items())[0]
                where = " and ".join(sorted(format_path([v for v in p if v != OTHER_FABRIC]) for p in ps)[:2])
                problems.append(
                    f"{len(split)} value(s) of {level.key} appear under more than one "
                    f"{self.levels[lvl - 1].key} (e.g. {value} under {where}); "
                    f"kept as separate domains, one per parent"
                )
        return problems


def another_placement(topo: Topology, names: Sequence[str], planned: str) -> bool:
    """The nodes offered all share one value of some level's label, and the planned node has
    another: a candidate placement of kube-scheduler's pod-group cycle (by label value, as its
    TopologyPlacement plugin groups nodes), not the planned node's domain."""
    at = topo.index.get(planned)
    offered = [topo.index[n] for n in names if n in topo.index]
    if at is None or not offered:
        return False
    for lvl in range(topo.depth):
        values = {topo.node_paths[i][lvl] for i in offered}
        if len(values) == 1 and None not in values and topo.node_paths[at][lvl] not in values:
            return True
    return False


def _display_path(path: tuple[str | None, ...], lvl: int) -> tuple[str | None, ...]:
    out: list[str | None] = []
    missing = False
    for v in path[: lvl + 1]:
        missing = missing or v is None
        out.append(None if missing else v)
    return tuple(out)


def format_path(path: Sequence[str | None]) -> str:
    """``b1/r1/n1``; a missing label shows as ``-``."""
    return "/".join("-" if v is None else v for v in path) or "cluster"
