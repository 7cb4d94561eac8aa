"""The tree of a cluster with two fabrics: one domain per pool at the top, each pool's own levels
below it, and a pool's nodes passing through the other pool's levels without a place there."""

from __future__ import annotations

from extender.core.cluster.topology import Topology
from extender.core.model import FABRIC_LEVEL, Level, NodeFacts

LEVELS = (Level(FABRIC_LEVEL, "fabric"),
          Level("t/spine", "spine", fabric="t"), Level("t/leaf", "leaf", fabric="t"),
          Level("g/block", "block", fabric="g"), Level("g/leaf", "leaf", fabric="g"))
NODES = [
    NodeFacts("t1", {"t/spine": "s1", "t/leaf": "l1"}, 8, fabric="t"),
    NodeFacts("t2", {"t/spine": "s1", "t/leaf": "l2"}, 8, fabric="t"),
    NodeFacts("g1", {"g/block": "b1", "g/leaf": "l1"}, 8, fabric="g"),
    NodeFacts("g2", {"g/block": "b1", "g/leaf": "l1"}, 8, fabric="g"),
    # A node of pool t that lacks its leaf label: a leaf of its own, as in one tree.
    NodeFacts("t3", {"t/spine": "s1"}, 8, fabric="t"),
]


def test_one_domain_per_pool_and_each_pools_own_levels():
    topo = Topology(LEVELS, NODES)
    assert [(f.name, f.levels, topo.names[f.start:f.end]) for f in topo.fabrics] == [
        ("g", (3, 4), ("g1", "g2")), ("t", (1, 2), ("t1", "t2", "t3"))]
    g, t = topo.fabrics
    assert topo.level_index("leaf", g) == 4 and topo.level_index("leaf", t) == 2
    assert topo.level_index("block", t) is None and topo.level_index("fabric", t) == 0


def test_steps_through_another_pools_levels_are_no_place():
    topo = Topology(LEVELS, NODES)
    i = {n: topo.index[n] for n in topo.names}
    # g1 and g2 share pool g's leaf: its narrowest common level, not t's leaf they pass through.
    assert topo.common_level([i["g1"], i["g2"]]) == 4
    assert topo.domain(4, topo.node_domain[4][i["g1"]]).path == ("g", "b1", "l1")
    # At t's leaf, g's nodes are one step (their pool) and show no value of t's.
    assert topo.domain(2, topo.node_domain[2][i["g1"]]).path == ("g",)
    # Across pools: no common domain at all, not even the cluster's fabric level.
    assert topo.common_level([i["g1"], i["t1"]]) == -1
    assert topo.common_level([i["t1"], i["t2"]]) == 1


def test_problems_count_a_pools_own_missing_labels_only():
    topo = Topology(LEVELS, NODES)
    assert topo.problems == ("1 node(s) (pool t) lack label t/leaf (e.g. t3); "
                             "each is a domain of its own at that level and below",)


def test_height_counts_a_pools_own_levels_so_pools_compare():
    # Each pool's leaf is one level above its nodes, whatever the index of the level in the tree;
    # railyard compares placements in different pools by it (a drained gang's landing, _best_of).
    topo = Topology(LEVELS, NODES)
    i = {n: topo.index[n] for n in topo.names}
    assert topo.height(4, i["g1"]) == topo.height(2, i["t1"]) == 1  # g/leaf, t/leaf
    assert topo.height(3, i["g1"]) == topo.height(1, i["t1"]) == 2  # g/block, t/spine
    assert topo.height(topo.depth, i["g1"]) == 0
