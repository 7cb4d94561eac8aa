"""Sliced gangs over drawn topologies, through the translator and the what-if planner: which
nodes each slice takes, and every reason with its numbers."""

from __future__ import annotations

import pytest

from tests.topologies import cluster, gang, pod

LEAF = "network.topology.nvidia.com/leaf"
NVL = "network.topology.nvidia.com/accelerator"
SIZE, LEVEL = "railyard.io/slice-size", "railyard.io/slice-required-topology"
REQ, PREF = "railyard.io/required-topology", "railyard.io/preferred-topology"
RANK = "batch.kubernetes.io/job-completion-index"

# Rack r1 holds 6 pods: 4 in NVLink domain n1, 2 in n2 (h7 and h8 are busy). Rack r2 is empty.
PARTLY_USED = """
block b1
  rack r1
    nvl n1: h1 h2 h3 h4
    nvl n2: h5 h6 h7[0/8] h8[0/8]
  rack r2
    nvl n3: h9 h10 h11 h12
    nvl n4: h13 h14 h15 h16
"""

# Rack r1 has 6 free nodes, 3 in each NVLink domain: 6 pods fit, but only 2 slices of 2.
UNEVEN = """
block b1
  rack r1
    nvl n1: h1 h2 h3 h4[0/8]
    nvl n2: h5 h6 h7 h8[0/8]
  rack r2
    nvl n3: h9 h10 h11 h12
    nvl n4: h13 h14 h15 h16
"""

# One free node in every NVLink domain: 4 pods fit the cluster, no 2 of them in one domain.
SCATTERED = """
block b1
  rack r1
    nvl n1: h1 h2[0/8] h3[0/8] h4[0/8]
    nvl n2: h5 h6[0/8] h7[0/8] h8[0/8]
  rack r2
    nvl n3: h9 h10[0/8] h11[0/8] h12[0/8]
    nvl n4: h13 h14[0/8] h15[0/8] h16[0/8]
"""


def ranked(name: str, count: int, gpus: int = 8, annotations: dict | None = None, ranks=None) -> list[dict]:
    """A gang whose members carry job-completion-index ``ranks`` (default 0..count-1)."""
    pods = gang(name, count, gpus, annotations={"railyard.io/min-member": str(count), **(annotations or {})})
    for p, r in zip(pods, ranks or range(count)):
        p["metadata"]["labels"][RANK] = str(r)
    return pods


def by_rank(answer, pods) -> list[str]:
    """The nodes of the members in rank order."""
    order = sorted(pods, key=lambda p: int(p["metadata"]["labels"][RANK]))
    return [answer.placement[f"ml/{p['metadata']['name']}"] for p in order]


def plan(drawing, pods):
    (a,) = cluster(drawing).plan_pending(pods)
    return a


def test_slices_fill_the_largest_nvlink_domain_first_then_the_best_fit_in_depth_first_order():
    pods = ranked("g", 6, annotations={SIZE: "2", LEVEL: "nvlink", REQ: "leaf"})
    a = plan(PARTLY_USED, pods)
    assert a.feasible, a.reason
    # Rack r1 is the exact fit. n1 holds 2 slices, n2 (two free nodes) the third: slices 0 and 1
    # in n1, slice 2 in n2, ranks in depth-first order.
    assert by_rank(a, pods) == ["h1", "h2", "h3", "h4", "h5", "h6"]
    assert a.reason == ("gang ml/g: 6 pods, 48 GPUs on 6 nodes within network.topology.nvidia.com/leaf b1/r1, "
                        "in 3 slices of 2 pods, each within one network.topology.nvidia.com/accelerator")


def test_the_same_gang_unsliced_fills_the_rack_depth_first():
    pods = ranked("g", 6, annotations={REQ: "leaf"})
    assert by_rank(plan(PARTLY_USED, pods), pods) == ["h1", "h2", "h3", "h4", "h5", "h6"]


def test_a_domain_where_the_pods_fit_but_not_whole_slices_is_passed_over():
    pods = ranked("g", 6, annotations={SIZE: "2", LEVEL: NVL, REQ: LEAF})
    a = plan(UNEVEN, pods)
    # Rack r1 has exactly 6 free nodes (the unsliced best fit) but holds 2 slices: 3 + 3.
    assert a.feasible and a.domain == ("b1", "r2")
    # In r2 slice 0 takes n3 (a tie with n4: the first), slice 1 the rest of n3, slice 2 n4.
    assert by_rank(a, pods) == ["h9", "h10", "h11", "h12", "h13", "h14"]
    unsliced = ranked("g", 6, annotations={REQ: LEAF})
    assert by_rank(plan(UNEVEN, unsliced), unsliced) == ["h1", "h2", "h3", "h5", "h6", "h7"]


def test_scattered_free_nodes_are_no_place_for_a_slice_and_the_reason_counts_whole_slices():
    a = plan(SCATTERED, ranked("g", 2, annotations={SIZE: "2", LEVEL: "nvlink", REQ: "leaf"}))
    assert not a.feasible and a.placement == {}
    assert a.reason == (
        "gang ml/g needs 2 pods x 8 GPUs in 1 slice of 2 pods, each within one "
        "network.topology.nvidia.com/accelerator, all within one network.topology.nvidia.com/leaf; "
        "best leaf b1/r1 holds 0 of 1 slices: it fits 2 pods, but only 0 in whole slices (48 GPUs in use)")


def test_without_a_gang_level_the_reason_is_about_the_cluster():
    a = plan(SCATTERED, ranked("g", 4, annotations={SIZE: "2", LEVEL: "nvlink"}))
    assert a.reason == (
        "gang ml/g needs 4 pods x 8 GPUs in 2 slices of 2 pods, each within one "
        "network.topology.nvidia.com/accelerator; the cluster holds 0 of 2 slices: it fits 4 pods, "
        "but only 0 in whole slices (96 GPUs in use)")


def test_the_best_domain_is_the_one_with_most_whole_slices():
    # Slices of 4: r1 fits 6 pods but no slice (3 + 3); r2 fits 4 pods, one slice (n4 is busy).
    drawing = UNEVEN.replace("nvl n4: h13 h14 h15 h16", "nvl n4: h13[0/8] h14[0/8] h15[0/8] h16[0/8]")
    a = plan(drawing, ranked("g", 8, annotations={SIZE: "4", LEVEL: NVL, REQ: LEAF}))
    assert a.reason.endswith("; best leaf b1/r2 holds 1 of 2 slices (32 GPUs in use)")


def test_slices_follow_job_completion_index_not_creation_order():
    pods = ranked("g", 6, annotations={SIZE: "2", LEVEL: NVL, REQ: LEAF}, ranks=[5, 3, 1, 0, 2, 4])
    a = plan(UNEVEN, pods)
    assert by_rank(a, pods) == ["h9", "h10", "h11", "h12", "h13", "h14"]
    assert [a.placement["ml/g-3"], a.placement["ml/g-2"]] == ["h9", "h10"]  # ranks 0 and 1


def test_a_slice_level_alone_places_the_gang_as_tight_as_the_slices_allow():
    pods = ranked("g", 6, annotations={SIZE: "2", LEVEL: NVL})
    a = plan(UNEVEN, pods)
    # Without slices, 6 pods fit rack r1 (the best fit); with them, only rack r2 does.
    assert a.domain == ("b1", "r2") and a.level == LEAF
    assert plan(UNEVEN, ranked("g", 6)).domain == ("b1", "r1")


def test_slices_inside_a_preferred_level():
    pods = ranked("g", 6, annotations={SIZE: "2", LEVEL: NVL, PREF: "nvlink"})
    a = plan(UNEVEN, pods)
    assert a.domain == ("b1", "r2") and "preferred level not available, placed wider" in a.reason


def test_a_slice_per_node_with_one_gpu_pods():
    drawing = "rack r1\n  nvl n1: a1[4/8] a2[6/8] a3[5/8]\n"
    pods = ranked("g", 8, 1, annotations={SIZE: "4", LEVEL: "kubernetes.io/hostname"})
    # Each node holds one slice: a1 (exactly 4 free) first, then the best fit for the last: a3 (5), not a2 (6).
    assert by_rank(plan(drawing, pods), pods) == ["a1"] * 4 + ["a3"] * 4
    # Unsliced, the fewest nodes: a2 whole, then the best fit for the other 2 (a1).
    unsliced = ranked("g", 8, 1)
    assert sorted(plan(drawing, unsliced).placement.values()) == ["a1"] * 2 + ["a2"] * 6


def test_members_not_created_yet_fill_the_last_slices():
    pods = ranked("g", 3, annotations={"railyard.io/min-member": "4", SIZE: "2", LEVEL: NVL, REQ: LEAF})
    w = cluster(UNEVEN)
    (a,) = w.plan_pending(pods)
    assert a.feasible and len(a.placement) == 3
    held = w.state.reservation("ml/g").slots
    assert [s.member for s in held] == ["ml/g-0", "ml/g-1", "ml/g-2", "ml/g#1"]
    assert [s.node for s in held] == ["h9", "h10", "h11", "h12"]  # n3: 4 slots, the exact fit


def test_a_launcher_without_gpus_is_in_no_slice():
    common = {SIZE: "2", LEVEL: NVL, REQ: LEAF, "railyard.io/min-member": "7"}
    pods = ranked("g", 6, annotations=common) + [
        pod("launcher", 0, labels={"scheduling.x-k8s.io/pod-group": "g"}, annotations=common)]
    a = plan(UNEVEN, pods)  # 6 GPU pods in 3 slices; 7 members
    assert a.feasible and a.placement["ml/launcher"] == "h9"
    assert by_rank(a, pods[:6]) == ["h9", "h10", "h11", "h12", "h13", "h14"]


@pytest.mark.parametrize("annotations", [
    {"kueue.x-k8s.io/podset-slice-size": "2", "kueue.x-k8s.io/podset-slice-required-topology": NVL},
    {SIZE: "2", "kueue.x-k8s.io/podset-slice-required-topology": NVL},
    # railyard's own annotations come first; Kueue's say otherwise and are not read.
    {SIZE: "2", LEVEL: NVL, "kueue.x-k8s.io/podset-slice-size": "3",
     "kueue.x-k8s.io/podset-slice-required-topology": "leaf"},
])
def test_kueue_slice_annotations_are_aliases(annotations):
    pods = ranked("g", 6, annotations={REQ: LEAF, **annotations})
    assert plan(UNEVEN, pods).domain == ("b1", "r2")


@pytest.mark.parametrize("annotations, reason", [
    ({SIZE: "3", LEVEL: NVL},
     "gang ml/g: railyard.io/slice-size 3 does not cut the gang's 4 GPU pods into whole slices "
     "(sizes that do: 1, 2, 4)"),
    ({SIZE: "8", LEVEL: NVL}, "gang ml/g: railyard.io/slice-size is 8, more than the gang's 4 GPU pods"),
    ({SIZE: "0", LEVEL: NVL}, "gang ml/g: railyard.io/slice-size must be a positive integer, got '0'"),
    ({SIZE: "two", LEVEL: NVL}, "gang ml/g: railyard.io/slice-size must be a positive integer, got 'two'"),
    ({SIZE: "2"}, "gang ml/g: railyard.io/slice-size is set without a slice topology level: a slice needs both"),
    ({"kueue.x-k8s.io/podset-slice-required-topology": NVL},
     "gang ml/g: kueue.x-k8s.io/podset-slice-required-topology is set without a slice size: a slice needs both"),
    ({SIZE: "2", LEVEL: LEAF, REQ: NVL},
     f"gang ml/g: slice level {LEAF} is wider than the gang's required level {NVL}"),
    ({SIZE: "2", LEVEL: "spine", PREF: "nvlink"},
     "gang ml/g: slice level spine is wider than the gang's preferred level nvlink"),
    ({SIZE: "2", LEVEL: "example.com/zone"},
     "gang ml/g: slice topology level 'example.com/zone' is not a level of this cluster (levels: "
     "network.topology.nvidia.com/spine, network.topology.nvidia.com/leaf, network.topology.nvidia.com/accelerator)"),
])
def test_invalid_slice_requests_are_a_reason_and_other_gangs_are_unaffected(annotations, reason):
    bad, good = cluster(UNEVEN).plan_pending(ranked("g", 4, annotations=annotations) + ranked("ok", 2))
    assert not bad.feasible and bad.reason == reason
    assert good.feasible


def test_the_sizes_that_divide_the_gang_are_listed_up_to_twelve():
    a = plan(PARTLY_USED, ranked("g", 720, 1, annotations={SIZE: "7", LEVEL: NVL}))
    assert a.reason == ("gang ml/g: railyard.io/slice-size 7 does not cut the gang's 720 GPU pods into whole "
                        "slices (sizes that do: 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, ...)")


def test_slices_of_mixed_shapes_share_their_domains_nodes_best_fit():
    # Ranks 0 and 2 ask 8 GPUs, 1 and 3 ask 4: each slice is one of each (12 GPUs). n1 is the
    # best fit for 24 GPUs (ties with n3, n4 go to the rack with least free); inside it slice 0
    # takes h1 and half of h2, slice 1 h3 and the other half of h2.
    pods = ranked("g", 4, annotations={SIZE: "2", LEVEL: NVL})
    for p, gpus in zip(pods, ["8", "4", "8", "4"]):
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    a = plan(PARTLY_USED, pods)
    assert a.feasible and a.domain == ("b1", "r1", "n1")
    assert by_rank(a, pods) == ["h1", "h2", "h3", "h2"]


def test_slices_of_mixed_shapes_fill_an_nvlink_domain_before_opening_the_next():
    # Three slices of one 8-GPU and one 4-GPU pod (36 GPUs): no NVLink domain holds all three, so
    # the first goes to the largest (n1, 32 free), the second fills n1 on, and the third takes
    # the best fit for what is left (n2, tied with n3: the first). Two NVLink domains, not three.
    drawing = ("block b1\n  rack r1\n    nvl n1: h1 h2 h3 h4\n    nvl n2: h5 h6 h7[0/8] h8[0/8]\n"
               "    nvl n3: h9 h10 h11[0/8] h12[0/8]\n")
    pods = ranked("g", 6, annotations={SIZE: "2", LEVEL: NVL, REQ: LEAF})
    for p, gpus in zip(pods, ["8", "4"] * 3):
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    a = plan(drawing, pods)
    assert a.feasible, a.reason
    nodes = by_rank(a, pods)
    assert set(nodes[:4]) <= {"h1", "h2", "h3", "h4"} and set(nodes[4:]) == {"h5", "h6"}
