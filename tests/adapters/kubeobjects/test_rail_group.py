"""The rail-group level (``railyard.io/rail-group``, docs/dra.md): detected under any switch tree,
above the NVLink levels, and usable as a required level like any other."""

from __future__ import annotations

from extender.adapters.kubeobjects import detect_levels, explicit_levels
from extender.core.model import NodeFacts
from extender.service.whatif import WhatIf
from tests.topologies import TRANSLATE, gang

LEAF, SPINE = "network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine"
RAIL = "railyard.io/rail-group"


def test_rail_group_sits_under_the_switch_tree_and_above_nvlink():
    node = NodeFacts("a", {SPINE: "s1", LEAF: "l1", RAIL: "rg1", "nvidia.com/gpu.clique": "u.1"})
    choice = detect_levels([node])
    assert [lvl.key for lvl in choice.levels] == [SPINE, LEAF, RAIL, "nvidia.com/gpu.clique:cluster",
                                                  "nvidia.com/gpu.clique"]
    assert choice.preset == "topograph" and choice.problems == ()
    alone = detect_levels([NodeFacts("b", {RAIL: "rg1"})])
    assert [lvl.key for lvl in alone.levels] == [RAIL] and alone.preset == "rail-group"
    assert explicit_levels([RAIL]).levels[0].name == "rail-group"


def test_a_gang_required_within_one_rail_group():
    # Two rail groups under one spine: rg1 = r1 r2 (r1 half used), rg2 = r3 r4. A gang of
    # 2 x 8 within one rail group fits only rg2; then 3 x 8 fits in none: rg2 is reserved, rg1
    # holds one 8-GPU pod (r2; r1 has 4 free).
    nodes = [TRANSLATE.node({"metadata": {"name": n, "labels": {SPINE: "s1", RAIL: rg}},
                             "status": {"allocatable": {"nvidia.com/gpu": "8", "pods": "110"}}})
             for n, rg in (("r1", "rg1"), ("r2", "rg1"), ("r3", "rg2"), ("r4", "rg2"))]
    used = TRANSLATE.pod({"metadata": {"name": "u", "namespace": "ml", "uid": "u"},
                          "spec": {"nodeName": "r1", "containers": [{"name": "c", "resources": {
                              "limits": {"nvidia.com/gpu": "4"}}}]}, "status": {"phase": "Running"}})
    whatif = WhatIf.load(nodes, detect_levels(nodes), [used])
    required = {"railyard.io/required-topology": "rail-group"}
    two = gang("two", 2, 8, annotations={**required, "railyard.io/min-member": "2"})
    three = gang("three", 3, 8, annotations={**required, "railyard.io/min-member": "3"})
    a, b = whatif.plan_pending([TRANSLATE.pod(p) for p in two + three])
    assert a.placement == {"ml/two-0": "r3", "ml/two-1": "r4"} and a.domain == ("s1", "rg2")
    assert b.reason == ("gang ml/three needs 3 pods x 8 GPUs within one railyard.io/rail-group; best rail-group "
                        "s1/rg1 fits 1 (4 GPUs in use)")
