"""Placement tables over drawn topologies, through the translator and the what-if service."""

from __future__ import annotations

import pytest

from tests.topologies import (
    BLOCKED,
    FOUR_LEVELS,
    MISSING_LABELS,
    REPEATED_NAMES,
    TWO_RACKS,
    cluster,
    gang,
    pod,
)

LEAF = "network.topology.nvidia.com/leaf"
NVL = "network.topology.nvidia.com/accelerator"
BLOCK = "network.topology.nvidia.com/spine"  # a drawing's block level: Topograph's spine
HOST = "kubernetes.io/hostname"
REQ = "railyard.io/required-topology"
PREF = "railyard.io/preferred-topology"


def answer(drawing, pending, **kw):
    (a,) = cluster(drawing, **kw).plan_pending(pending)
    return a


@pytest.mark.parametrize(
    "drawing, pods, level, nodes",
    [
        # Narrowest level that holds the gang, best fit among its domains.
        (TWO_RACKS, gang("g", 1, 8), HOST, {"h1"}),
        (TWO_RACKS, gang("g", 1, 2), HOST, {"h4"}),  # best fit: the node with 2 free
        (TWO_RACKS, gang("g", 2, 8), NVL, {"h1", "h2"}),
        (TWO_RACKS, gang("g", 3, 8), LEAF, {"h1", "h2", "h3"}),
        (TWO_RACKS, gang("g", 4, 8), BLOCK, {"h1", "h2", "h3", "h5"}),
        # 4 x 2 GPUs fit any empty node: h5, whose NVLink domain is already half used.
        (TWO_RACKS, gang("g", 4, 2), HOST, {"h5"}),
        (TWO_RACKS, gang("g", 5, 2), NVL, {"h3", "h4"}),  # 8 + 2: n2 has exactly 10 free
        # Repeated names: r1 under b1 and r1 under b2 are different racks.
        (REPEATED_NAMES, gang("g", 2, 8), NVL, {"a1", "a2"}),
        (REPEATED_NAMES, gang("g", 3, 8), None, {"a1", "a2", "c1"}),
        # Cordoned, not-ready and tainted nodes take nothing unless tolerated.
        (BLOCKED, gang("g", 2, 8), NVL, {"h2", "h4"}),
        (BLOCKED, gang("g", 3, 8), NVL, {"h6", "h7", "h8"}),
        (BLOCKED, gang("g", 4, 8, tolerations=[{"key": "dedicated", "operator": "Equal",
                                                 "value": "train", "effect": "NoSchedule"}]),
         NVL, {"h5", "h6", "h7", "h8"}),
        # Missing labels: unlabelled nodes are their own domains, never pooled together.
        (MISSING_LABELS, gang("g", 2, 8), NVL, {"h1", "h2"}),
        (MISSING_LABELS, gang("g", 4, 8), LEAF, {"h1", "h2", "h5", "h6"}),
    ],
)
def test_placement(drawing, pods, level, nodes):
    a = answer(drawing, pods)
    assert a.feasible, a.reason
    assert a.level == level
    assert set(a.placement.values()) == nodes
    assert set(a.placement.values()) == nodes
    assert len(a.placement) == len(pods)


def test_fewest_children_inside_the_chosen_domain():
    # 6 pods in spine s1: leaf l1 holds 8, so all 6 stay in l1 (n1 whole + 2 of n2), not spread to l2.
    a = answer(FOUR_LEVELS, gang("g", 6, 8))
    assert a.level == LEAF
    assert a.domain == ("c1", "s1", "l1")
    assert sorted(a.placement.values()) == ["x1", "x2", "x3", "x4", "x5", "x6"]


def test_the_fewest_nodes_among_the_racks_chosen_not_per_rack():
    # 6 one-GPU pods in block b1: rack r1 holds 5 (3 + 1 + 1), r2 holds 3, so both racks. Among
    # their nodes, h1 and h4 (3 each) hold all 6: 2 nodes, where filling r1 first took 4.
    drawing = "block b1\n  rack r1: h1[3/8] h2[1/8] h3[1/8]\n  rack r2: h4[3/8]\n"
    a = answer(drawing, gang("g", 6, 1, annotations={REQ: BLOCK}), levels=[BLOCK, LEAF])
    assert a.feasible, a.reason
    assert sorted(a.placement.values()) == ["h1"] * 3 + ["h4"] * 3


def test_the_last_leaf_is_the_one_that_needs_the_fewest_nvlink_domains_not_the_best_fit():
    # 7 x 8 GPUs in block b1; no leaf holds them. r1 (4 free nodes) is taken whole, then 3 more:
    # r2 has exactly 3 free but over two NVLink domains (2 + 1), r3 has 4 with 3 in one. Best
    # fit alone took r2 (3 NVLink domains in all); r3 uses 2 (issue 23, g0-48 in its run 2).
    drawing = ("block b1\n"
               "  rack r1\n    nvl n1: a1 a2 a3 a4\n"
               "  rack r2\n    nvl n1: b1 b2\n    nvl n2: b3\n"
               "  rack r3\n    nvl n1: c1 c2 c3\n    nvl n2: c4\n")
    a = answer(drawing, gang("g", 7, 8))
    assert a.feasible, a.reason
    assert a.level == BLOCK
    assert sorted(a.placement.values()) == ["a1", "a2", "a3", "a4", "c1", "c2", "c3"]


def test_best_fit_keeps_large_domains_whole():
    # 3 pods fit n1, n2, n3 and n4; with x1 busy, n1 has exactly 3 nodes free: zero left over.
    a = answer(FOUR_LEVELS, gang("g", 3, 8), pods=[pod("busy", 8, node="x1")])
    assert a.level == NVL
    assert a.domain == ("c1", "s1", "l1", "n1")  # exactly 3 nodes free there: zero leftover


def test_rank_order_follows_depth_first_order():
    pods = gang("g", 8, 8)
    for i, p in enumerate(reversed(pods)):
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(i)
    a = answer(FOUR_LEVELS, pods)
    by_rank = sorted(pods, key=lambda p: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]))
    assert [a.placement[f"ml/{p['metadata']['name']}"] for p in by_rank] == [
        "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]


def test_jobset_rank_is_global_job_index_then_completion_index():
    # Two replicatedJobs of one Job each: job-index is 0 in both (jobset@v0.12.0 restarts it per
    # replicatedJob); job-global-index tells them apart.
    pods = gang("g", 4, 8)
    order = [(1, 1), (0, 1), (1, 0), (0, 0)]
    for p, (job, idx) in zip(pods, order):
        p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] = "0"
        p["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] = str(job)
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = str(idx)
    a = answer(FOUR_LEVELS, pods)
    # n4 is the exact fit in the smaller spine; ranks (0,0) (0,1) (1,0) (1,1) take it in order.
    assert [a.placement[f"ml/g-{i}"] for i in (3, 1, 2, 0)] == ["y1", "y2", "y3", "y4"]


def test_mixed_members_launcher_rides_with_rank_zero():
    pods = [pod("launcher", 0, labels={"scheduling.x-k8s.io/pod-group": "g"})] + gang("g", 2, 8)
    a = answer(TWO_RACKS, pods)
    assert a.feasible
    assert a.placement["ml/launcher"] in {a.placement["ml/g-0"], a.placement["ml/g-1"]}
    assert a.level == NVL


def test_mixed_shapes():
    pods = gang("g", 2, 8) + [pod("small", 4, labels={"scheduling.x-k8s.io/pod-group": "g"})]
    a = answer(TWO_RACKS, pods)
    assert a.feasible
    assert a.level == LEAF  # 8+8+4 does not fit one NVLink domain with 8+8 / 8+2 free


def test_required_level_is_an_outer_bound():
    a = answer(TWO_RACKS, gang("g", 3, 8, annotations={REQ: NVL}))
    assert not a.feasible
    assert a.reason == (
        "gang ml/g needs 3 pods x 8 GPUs within one network.topology.nvidia.com/accelerator; "
        "best nvlink b1/r1/n1 fits 2"
    )
    assert a.placement == {}


def test_required_reason_counts_blocked_nodes():
    a = answer(BLOCKED, gang("g", 4, 8, annotations={REQ: "nvlink"}))
    assert not a.feasible
    assert a.reason == (
        "gang ml/g needs 4 pods x 8 GPUs within one network.topology.nvidia.com/accelerator; "
        "best nvlink b1/r1/n2 fits 3 (1 node tainted)"
    )
    a = answer(BLOCKED, gang("g", 4, 8, annotations={REQ: "nvlink"}, tolerations=[{"operator": "Exists"}]))
    assert a.feasible


def test_unbounded_reason_counts_usage_and_reservations():
    w = cluster(TWO_RACKS)
    first, second = w.plan_pending(gang("a", 2, 8) + gang("b", 3, 8))
    assert first.feasible and not second.feasible
    assert second.reason == (
        "gang ml/b needs 3 pods x 8 GPUs; the cluster fits 2 (16 GPUs reserved for other gangs, 14 GPUs in use)"
    )


def test_preferred_falls_back_wider():
    a = answer(TWO_RACKS, gang("g", 3, 8, annotations={PREF: NVL}))
    assert a.feasible and a.level == LEAF
    assert "preferred level not available" in a.reason


def test_preferred_inside_required():
    a = answer(TWO_RACKS, gang("g", 2, 8, annotations={REQ: BLOCK, PREF: "leaf"}))
    assert a.feasible and a.level == NVL


@pytest.mark.parametrize(
    "annotations, reason",
    [
        ({REQ: "example.com/zone"}, "required topology level 'example.com/zone' is not a level of this cluster"),
        ({REQ: NVL, PREF: BLOCK}, f"preferred level {BLOCK} is wider than required level {NVL}"),
        ({"railyard.io/min-member": "two"}, "railyard.io/min-member must be a positive integer, got 'two'"),
        ({"railyard.io/min-member": "0"}, "railyard.io/min-member must be a positive integer, got '0'"),
        ({"railyard.io/min-member": "1"}, "2 members but min-member is 1"),
        ({"railyard.io/timeout-seconds": "-5"}, "railyard.io/timeout-seconds must be a positive integer, got '-5'"),
    ],
)
def test_invalid_requests_get_a_reason_and_other_gangs_are_unaffected(annotations, reason):
    w = cluster(TWO_RACKS)
    bad, good = w.plan_pending(gang("bad", 2, 8, annotations=annotations) + gang("good", 2, 8))
    assert not bad.feasible and reason in bad.reason
    assert good.feasible and good.level == NVL


def test_members_that_disagree_are_reported():
    pods = gang("g", 2, 8)
    pods[0]["metadata"]["annotations"][REQ] = NVL
    pods[1]["metadata"]["annotations"][REQ] = LEAF
    a = answer(TWO_RACKS, pods)
    assert not a.feasible
    assert "members disagree on railyard.io/required-topology" in a.reason


def test_missing_members_are_reserved_for():
    # min-member 4, 2 created: 4 slots are planned, the 2 pods get theirs.
    w = cluster(TWO_RACKS)
    (a,) = w.plan_pending(gang("g", 2, 8, annotations={"railyard.io/min-member": "4"}))
    assert a.feasible and a.level == BLOCK
    assert len(a.placement) == 2
    assert w.state.reservation("ml/g").gpus == 32


def test_gangs_in_order_see_earlier_reservations():
    w = cluster(TWO_RACKS)
    a, b = w.plan_pending(gang("a", 2, 8) + gang("b", 2, 8))
    assert a.feasible and b.feasible
    assert not set(a.placement.values()) & set(b.placement.values())


def test_pod_without_group_is_a_gang_of_one():
    (a,) = cluster(TWO_RACKS).plan_pending([pod("solo", 8)])
    assert a.gang == "ml/solo" and a.feasible and a.level == HOST


@pytest.mark.parametrize(
    "key",
    ["scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name"],
)
def test_membership_labels(key):
    pods = [pod(f"p{i}", 8, labels={key: "grp"}) for i in range(2)]
    (a,) = cluster(TWO_RACKS).plan_pending(pods)
    assert a.gang == "ml/grp" and len(a.placement) == 2


def test_membership_annotation_and_scheduling_group():
    pods = [pod("p0", 8, annotations={"scheduling.k8s.io/group-name": "grp"}),
            pod("p1", 8, schedulingGroup={"podGroupName": "grp"})]
    (a,) = cluster(TWO_RACKS).plan_pending(pods)
    assert a.gang == "ml/grp" and len(a.placement) == 2


def test_podgroup_min_member_and_kueue_total_count():
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 3}}
    w = cluster(TWO_RACKS, podgroups=[pg])
    (a,) = w.plan_pending(gang("g", 1, 8))
    assert w.state.reservation("ml/g").gpus == 24 and a.level == LEAF
    w = cluster(TWO_RACKS)
    (a,) = w.plan_pending(gang("k", 1, 8, annotations={"kueue.x-k8s.io/pod-group-total-count": "2"}))
    assert w.state.reservation("ml/k").gpus == 16 and a.level == NVL


def test_kueue_topology_annotations_are_aliases():
    a = answer(TWO_RACKS, gang("g", 3, 8, annotations={"kueue.x-k8s.io/podset-required-topology": NVL}))
    assert not a.feasible and "within one network.topology.nvidia.com/accelerator" in a.reason


def test_explicit_levels_override_detection():
    a = answer(TWO_RACKS, gang("g", 3, 8), levels=[BLOCK, LEAF])
    assert a.level == LEAF
    a = answer(TWO_RACKS, gang("g", 2, 8), levels=[BLOCK])
    assert a.level == BLOCK  # NVLink domains are not a level now


def test_init_containers_counted_as_kubernetes_does():
    p = pod("p", 2, labels={"scheduling.x-k8s.io/pod-group": "g"},
            initContainers=[{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "8"}}}])
    w = cluster(TWO_RACKS)
    w.plan_pending([p])
    assert w.state.reservation("ml/g").gpus == 8


def test_zero_gpu_gang_is_placed():
    (a,) = cluster(BLOCKED).plan_pending([pod("cpu", 0)])
    assert a.feasible and a.placement == {"ml/cpu": "h2"}
