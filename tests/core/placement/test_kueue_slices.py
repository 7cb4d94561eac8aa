"""Kueue's sliced cases, as fixtures: railyard never uses more domains than Kueue at any level.

Source: kubernetes-sigs/kueue@v0.17.0, pkg/cache/scheduler/tas_cache_test.go,
``TestFindTopologyAssignments``: every case with ``PodSetSliceSize`` that railyard can express
(one slice layer, no balanced placement: ``TASBalancedPlacement`` is alpha and off by default in
v0.17.0, pkg/features/kube_features.go; no replacement of a node of a running workload). Kueue's
topology is block > rack > hostname (``cloud.com/topology-block``, ``cloud.com/topology-rack``),
here Topograph's spine > leaf > host; Kueue's pods ask for 1 CPU and its nodes have N CPUs, here
1 GPU each on nodes of N GPUs.

Each case gives Kueue's expected assignment (pods per host, copied from the case) and the
domains it uses per level are counted from it here. railyard must use no more at any level; where
it uses fewer the case says so and gives railyard's own, reasoned in the comment. Each slice of
railyard's answer (a run of consecutive ranks) must lie inside one domain of the slice level.
"""

from __future__ import annotations

import pytest

from tests.core.placement.test_slices import ranked
from tests.topologies import cluster, pod

BLOCK, RACK, HOST = "network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf", "kubernetes.io/hostname"
SIZE, LEVEL = "kueue.x-k8s.io/podset-slice-size", "kueue.x-k8s.io/podset-slice-required-topology"
REQ, PREF = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
RANK = "batch.kubernetes.io/job-completion-index"

Layout = dict[str, dict[str, dict[str, int]]]
"""block -> rack -> host -> free CPUs (here GPUs), as the case's nodes are labelled."""

# The case tables' shared node sets (their ASCII drawings are in the Kueue file above them).
DEFAULT_NODES: Layout = {"b1": {"r1": {"x3": 1}, "r2": {"x5": 1, "x1": 1, "x6": 1}},
                         "b2": {"r1": {"x2": 1}, "r2": {"x4": 2}}}
SCATTERED_NODES: Layout = {"b1": {"r1": {"x3": 4, "x5": 1, "x1": 1}}, "b2": {"r1": {"x6": 2, "x2": 1}}}


def drawing(layout: Layout) -> str:
    lines = []
    for block, racks in layout.items():
        lines.append(f"block {block}")
        for rack, hosts in racks.items():
            lines.append(f"  rack {rack}: " + " ".join(f"{h}[{n}/{n}]" for h, n in hosts.items()))
    return "\n".join(lines) + "\n"


def where(layout: Layout) -> dict[str, tuple[str, str]]:
    return {h: (b, r) for b, racks in layout.items() for r, hosts in racks.items() for h in hosts}


def used(layout: Layout, pods_per_host: dict[str, int]) -> dict[str, int]:
    """Domains used per level by an assignment (host -> pods)."""
    at = where(layout)
    hosts = [h for h, n in pods_per_host.items() if n]
    return {"block": len({at[h][0] for h in hosts}), "rack": len({at[h] for h in hosts}), "host": len(hosts)}


CASES = [
    # (Kueue case name, layout, pods, slice size, slice level, gang level (kind, level),
    #  Kueue's wantAssignment, railyard's own when tighter)
    ("block required for podset; host required for slices; BestFit",
     {"b1": {"r1": {"x3": 3, "x5": 3, "x1": 3}}}, 6, 2, HOST, (REQ, BLOCK),
     {"x1": 2, "x3": 2, "x5": 2}, None),
    ("block required for podset; host required for slices; prioritize more free slice capacity first "
     "and then tight fit; BestFit",
     {"b1": {"r1": {"x3": 6, "x5": 5, "x1": 4, "x6": 2}}}, 12, 2, HOST, (REQ, BLOCK),
     {"x1": 4, "x3": 6, "x6": 2}, None),
    ("block required for podset; host required for slices; select domains with tight fit; BestFit",
     {"b1": {"r1": {"x3": 3, "x5": 2, "x1": 2}}}, 4, 2, HOST, (REQ, BLOCK),
     {"x1": 2, "x5": 2}, None),
    ("block required for podset; rack required for slices; BestFit",
     {"b1": {"r1": {"x3": 1, "x5": 1}, "r2": {"x1": 1, "x6": 1, "x2": 1}}, "b2": {"r1": {"x4": 1, "x7": 1}}},
     4, 2, RACK, (REQ, BLOCK),
     {"x3": 1, "x5": 1, "x1": 1, "x2": 1}, None),
    ("block preferred for podset; rack required for slices; BestFit",
     DEFAULT_NODES, 4, 2, RACK, (PREF, BLOCK),
     {"x1": 1, "x5": 1, "x4": 2}, None),
    ("block required for podset; host required for slices; optimize last domain; BestFit",
     {"b1": {"r1": {"x3": 4, "x5": 3, "x1": 2}}}, 6, 2, HOST, (REQ, BLOCK),
     {"x1": 2, "x3": 4}, None),
    ("block preferred for podset; host required for slices; 2 blocks with unbalanced subdomains; BestFit",
     {"b1": {"r1": {"x3": 3, "x5": 3, "x1": 3}}, "b2": {"r1": {"x6": 6}}}, 12, 3, HOST, (PREF, BLOCK),
     {"x1": 3, "x3": 3, "x6": 6}, None),
    ("block required for podset; rack required for slices; podset fits in both blocks, but slices fit in "
     "only one block",
     {"b1": {"r1": {"x3": 2}, "r2": {"x5": 2}, "r3": {"x1": 2}}, "b2": {"r4": {"x6": 3}, "r5": {"x2": 3}}},
     6, 3, RACK, (REQ, BLOCK),
     {"x6": 3, "x2": 3}, None),
    ("no topology for podset; host required for slices; BestFit",
     {"b1": {"r1": {"x3": 3, "x5": 3, "x1": 3}}}, 6, 2, HOST, None,
     {"x1": 2, "x3": 2, "x5": 2}, None),
    ("no topology for podset; host required for slices; multiple blocks; BestFit",
     SCATTERED_NODES, 6, 2, HOST, None,
     {"x3": 4, "x6": 2}, None),
    ("no topology for podset; rack required for slices; multiple blocks; BestFit",
     DEFAULT_NODES, 4, 2, RACK, None,
     {"x1": 1, "x5": 1, "x4": 2}, None),
    # Kueue spreads each rack's 4 pods over both its hosts (x1:1 x2:3, x3:3 x4:1); railyard puts
    # each rack's slice on the one host that holds it whole (x2, x4): 2 hosts, not 4.
    ("multi-layer topology: no feature gate; additional layers ignored",
     {"b1": {"r1": {"x1": 1, "x2": 4}, "r2": {"x3": 3, "x4": 4}}}, 8, 4, RACK, (REQ, BLOCK),
     {"x1": 1, "x2": 3, "x3": 3, "x4": 1}, {"x2": 4, "x4": 4}),
]


@pytest.mark.parametrize("name, layout, count, size, level, gang_level, kueue, tighter", CASES,
                         ids=[c[0] for c in CASES])
def test_no_more_domains_than_kueue_at_any_level(name, layout, count, size, level, gang_level, kueue, tighter):
    annotations = {SIZE: str(size), LEVEL: level, **(dict([gang_level]) if gang_level else {})}
    pods = ranked("g", count, 1, annotations=annotations)
    (a,) = cluster(drawing(layout), levels=[BLOCK, RACK]).plan_pending(pods)
    assert a.feasible, a.reason
    nodes = [a.placement[f"ml/g-{r}"] for r in range(count)]  # ``ranked`` gives g-i rank i
    got = {h: nodes.count(h) for h in set(nodes)}
    mine, theirs = used(layout, got), used(layout, kueue)
    assert all(mine[lvl] <= theirs[lvl] for lvl in theirs), (mine, theirs)
    if tighter is None:
        assert mine == theirs and sorted(got.values()) == sorted(kueue.values())
    else:
        assert got == tighter and mine != theirs
    at = where(layout)
    part = {RACK: lambda h: at[h], HOST: lambda h: h}[level]
    for k in range(0, count, size):
        assert len({part(h) for h in nodes[k:k + size]}) == 1, f"slice {k // size} spans {nodes[k:k + size]}"


def test_leader_and_workers_of_one_group():
    """"BestFit: podset group workers spread across hosts": a leader (no GPU) and 6 workers of 1
    GPU in slices of 2 per host, block preferred; hosts x1 (4 GPUs), x2, x3, x4 (2 each). Kueue:
    workers x1:4 x2:2, leader x1. Here the leader is a member without GPUs (a launcher)."""
    layout = {"b1": {"r1": {"x1": 4, "x2": 2, "x3": 2, "x4": 2}}}
    common = {SIZE: "2", LEVEL: HOST, PREF: BLOCK, "railyard.io/min-member": "7"}
    pods = ranked("g", 6, 1, annotations=common) + [
        pod("leader", 0, labels={"scheduling.x-k8s.io/pod-group": "g"}, annotations=common)]
    (a,) = cluster(drawing(layout), levels=[BLOCK, RACK]).plan_pending(pods)
    assert a.feasible, a.reason
    workers = [a.placement[f"ml/g-{r}"] for r in range(6)]
    assert sorted({h: workers.count(h) for h in set(workers)}.values()) == [2, 4]
    assert workers.count("x1") == 4 and a.placement["ml/leader"] == "x1"


@pytest.mark.parametrize("name, layout, kueue_reason, reason", [
    ("block required for podset; rack required for slices; podset fits in a block, but slices do not fit in racks",
     {"b1": {"r1": {"x3": 2}, "r2": {"x5": 2}, "r3": {"x1": 2}}},
     "topology \"default\" doesn't allow to fit any of 2 slice(s)",
     "best spine b1 holds 0 of 2 slices: it fits 6 pods, but only 0 in whole slices"),
    ("block required for podset; rack required for slices; only 1 out of 2 slices fit the topology",
     {"b1": {"r1": {"x3": 3}, "r2": {"x5": 1}, "r3": {"x1": 1}, "r4": {"x6": 1}}},
     "topology \"default\" allows to fit only 1 out of 2 slice(s)",
     "best spine b1 holds 1 of 2 slices: it fits 6 pods, but only 3 in whole slices"),
])
def test_where_kueue_finds_no_room_for_every_slice_neither_does_railyard(name, layout, kueue_reason, reason):
    pods = ranked("g", 6, 1, annotations={SIZE: "3", LEVEL: RACK, REQ: BLOCK})
    (a,) = cluster(drawing(layout), levels=[BLOCK, RACK]).plan_pending(pods)
    assert not a.feasible and a.placement == {}
    assert a.reason.endswith(reason), a.reason


@pytest.mark.parametrize("name, annotations, reason", [
    ("slice required topology level cannot be above the main required topology level",
     {REQ: HOST, LEVEL: BLOCK, SIZE: "1"}, f"slice level {BLOCK} is wider than the gang's required level {HOST}"),
    ("slice size is required when slice topology is requested",
     {REQ: BLOCK, LEVEL: HOST}, f"{LEVEL} is set without a slice size: a slice needs both"),
    ("cannot request not existing slice topology",
     {REQ: BLOCK, LEVEL: "not-existing-topology-level", SIZE: "1"},
     "slice topology level 'not-existing-topology-level' is not a level of this cluster"),
])
def test_requests_kueue_refuses_are_refused(name, annotations, reason):
    (a,) = cluster(drawing(DEFAULT_NODES), levels=[BLOCK, RACK]).plan_pending(ranked("g", 1, 1, annotations=annotations))
    assert not a.feasible and reason in a.reason, a.reason
