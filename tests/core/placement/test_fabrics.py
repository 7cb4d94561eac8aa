"""A cluster of three fabrics, each pool labelled as its own project documents it: where gangs
land, against a model of each pool alone written here from the labels (no planner code), and
against railyard planning each pool as a cluster of its own.

Pools (tests/fixtures/labels, each file cites its source):
- Topograph v1.0.0 ``three-tiers``: 12 nodes of 8 GPUs, tier-2 > tier-1 > tier-0 > NVLink domain
  (IB2 > S1 > {S2: B1, 3 nodes; S3: B2, 3 nodes}; IB1 > S4 > {S5: B3; S6: B4}).
- GKE ``one-block``: 8 nodes of 8 GPUs, block > sub-blocks of 3 and 5 hosts > host.
- GPU Feature Discovery ``nvidia.com/gpu.clique`` ``gb200-two-racks``: 36 trays of 4 GPUs, rack A
  split into cliques 1 and 2 (9 trays each), rack B one clique of 18.

And a property over random two-pool clusters (pools of different levels sharing the name
``rack``): the gang lands in one pool, on the nodes that pool alone would give it, and in the
pool whose own placement is the narrowest, then the best fit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from extender.adapters import kubeobjects as ko
from extender.core.model import FABRIC_LEVEL, GangSpec, Level, Member, NodeFacts
from extender.core.placement.planner import Placement, plan
from tests.adapters.kubeobjects.test_kubeobjects import documented
from tests.core.placement.test_slice_properties import build
from tests.topologies import TRANSLATE, Cluster, gang

REQ = "railyard.io/required-topology"
GPUS = 4  # per pod: an 8-GPU node holds 2, a GB200 tray 1

V1 = [("fabric.topograph.run/tier-2", "tier-2"), ("fabric.topograph.run/tier-1", "tier-1"),
      ("fabric.topograph.run/tier-0", "tier-0"), ("accelerator.topograph.run/domain", "nvlink")]
GKE = [("cloud.google.com/gce-topology-block", "block"), ("cloud.google.com/gce-topology-subblock", "subblock"),
       ("cloud.google.com/gce-topology-host", "gce-host")]
CLIQUE = [("nvidia.com/gpu.clique:cluster", "nvlink-rack"), ("nvidia.com/gpu.clique", "nvlink")]
POOLS = {
    "topograph-v1-3-tiers": (documented("topograph-v1.0", "three-tiers", gpus=8), V1),
    "gke": (documented("gke", "one-block", gpus=8), GKE),
    "clique": (documented("clique", "gb200-two-racks", gpus=4), CLIQUE),
}


def cluster(pools) -> Cluster:
    nodes = [TRANSLATE.node(n) for p in pools for n in POOLS[p][0]]
    return Cluster.load(nodes, ko.detect_levels(nodes), [])


# -- the model: each pool alone, from its labels ----------------------------------------------

def value(labels: dict, key: str) -> str:
    if key == "nvidia.com/gpu.clique:cluster":
        return labels["nvidia.com/gpu.clique"].split(".", 1)[0]
    return labels[key]


def pool_alone(pool: str, pods: int, required: str | None):
    """(height, leftover GPUs, level key) of the narrowest place in the pool for ``pods`` pods of
    GPUS, inside its required level: height 0 is one node, 1 its narrowest level, ..., and
    len(levels) + 1 the whole pool; leftover is the best-fitting domain's free GPUs minus the
    gang's. None: the pool has no such level, or no room."""
    nodes, levels = POOLS[pool]
    names = [name for _, name in levels]
    if required is not None and required not in names:
        return None
    widest = names.index(required) + 1 if required is not None else 0  # prefix length
    gpus = {n["metadata"]["name"]: int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes}
    # From one node (the whole path and the name) out to the whole pool (no prefix).
    for height, size in enumerate(range(len(levels) + 1, widest - 1, -1)):
        groups: dict[tuple, list[str]] = {}
        for n in nodes:
            labels = n["metadata"]["labels"]
            path = tuple(value(labels, k) for k, _ in levels) + (n["metadata"]["name"],)
            groups.setdefault(path[:size], []).append(n["metadata"]["name"])
        fitting = [sum(gpus[m] for m in members) for members in groups.values()
                   if sum(gpus[m] // GPUS for m in members) >= pods]
        if fitting:
            key = "kubernetes.io/hostname" if size == len(levels) + 1 else (
                FABRIC_LEVEL if size == 0 else levels[size - 1][0])
            return height, min(fitting) - pods * GPUS, key
    return None


CASES = [
    # pods, required level (by name), the pools it may land in per the model
    (2, None),          # one 8-GPU node: Topograph or GKE, a tie broken by pool order
    (6, "nvlink"),      # NVLink domain B1 of Topograph (6 pods exactly) beats a clique of 9
    (10, "nvlink"),     # only rack B's clique of 18 holds 10
    (16, None),         # rack B's clique: NVLink, narrower than GKE's block or Topograph's pool
    (20, None),         # no rack holds 20 trays: the clique pool as a whole
    (8, "tier-1"),      # Topograph, the one pool with a tier-1: S1 (6 nodes, 12 pods)
    (12, "subblock"),   # GKE only: its sub-blocks hold 6 and 10
]


@pytest.mark.parametrize("pods, required", CASES)
def test_a_gang_lands_in_one_pool_at_its_narrowest_level_as_that_pool_alone_would_place_it(pods, required):
    model = {p: pool_alone(p, pods, required) for p in POOLS}
    able = {p: m for p, m in model.items() if m is not None}
    annotations = {REQ: required} if required else {}
    (a,) = cluster(POOLS).plan_pending(gang("g", pods, GPUS, annotations=annotations))
    if not able:
        assert not a.feasible and a.placement == {}
        return
    assert a.feasible, a.reason
    used = {p for p in POOLS for n in POOLS[p][0] if n["metadata"]["name"] in a.placement.values()}
    assert len(used) == 1, used  # never two trees
    (pool,) = used
    best = min(m[:2] for m in able.values())  # the narrowest, then the best fit
    assert model[pool][:2] == best, (pool, model)
    assert a.level == model[pool][2]
    # As that pool alone places it (its own cluster: the whole pool is the whole cluster there).
    (alone,) = cluster([pool]).plan_pending(gang("g", pods, GPUS, annotations=annotations))
    assert sorted(alone.placement.items()) == sorted(a.placement.items())
    assert (alone.level or FABRIC_LEVEL) == a.level


def test_the_expected_pools():
    """The model's verdicts for the cases above, as the comments say (so the cases test what they
    claim)."""
    where = {}
    for pods, required in CASES:
        able = {p: m for p in POOLS if (m := pool_alone(p, pods, required)) is not None}
        where[(pods, required)] = sorted(p for p, m in able.items() if m[:2] == min(x[:2] for x in able.values()))
    assert where == {
        (2, None): ["gke", "topograph-v1-3-tiers"],
        (6, "nvlink"): ["topograph-v1-3-tiers"],
        (10, "nvlink"): ["clique"],
        (16, None): ["clique"],
        (20, None): ["clique"],
        (8, "tier-1"): ["topograph-v1-3-tiers"],
        (12, "subblock"): [],
    }


def test_no_room_in_the_one_pool_with_the_level_names_that_pool():
    (a,) = cluster(POOLS).plan_pending(gang("g", 12, GPUS, annotations={REQ: "subblock"}))
    assert a.reason == ("gang ml/g needs 12 pods x 4 GPUs within one cloud.google.com/gce-topology-subblock; "
                        "best subblock gke/7c1a9e0f52d84b6a93e2c5d1f08b4a67/b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3 fits 10")


def test_a_level_no_pool_has_is_a_reason_naming_every_pool():
    (a,) = cluster(["gke", "clique"]).plan_pending(gang("g", 2, GPUS, annotations={REQ: "tier-1"}))
    assert not a.feasible
    assert "'tier-1' is not a level of pool clique (levels: nvidia.com/gpu.clique:cluster, nvidia.com/gpu.clique)" in a.reason
    assert "'tier-1' is not a level of pool gke" in a.reason


def test_levels_and_what_detection_says():
    nodes = [TRANSLATE.node(n) for p in POOLS for n in POOLS[p][0]]
    choice = ko.detect_levels(nodes)
    assert [(lvl.key, lvl.fabric) for lvl in choice.levels] == [
        (FABRIC_LEVEL, ""),
        *((k, "clique") for k, _ in CLIQUE), *((k, "topograph-v1-3-tiers") for k, _ in V1), *((k, "gke") for k, _ in GKE)]
    assert choice.problems[0] == (
        "3 fabrics, each planned on its own tree; a gang never spans two: clique (36 node(s), e.g. rack-a-tray-00), "
        "topograph-v1-3-tiers (12 node(s), e.g. Node104), gke (8 node(s), e.g. gke-a3u-pool-1)")


# -- property: a two-pool cluster against each pool alone, over random clusters ---------------

A = (Level("a/block", "block"), Level("a/rack", "rack"))
B = (Level("b/rack", "rack"), Level("b/nvl", "nvlink"))
TWO_POOLS = (Level(FABRIC_LEVEL, "fabric"), *(replace(lvl, fabric="A") for lvl in A),
             *(replace(lvl, fabric="B") for lvl in B))


@st.composite
def two_pools(draw):
    """2-8 nodes in pools A (block > rack) and B (rack > nvlink), 4 or 8 GPUs, random use."""
    nodes, used = [], {}
    for i in range(draw(st.integers(2, 8))):
        pool = draw(st.sampled_from("AB"))
        keys = A if pool == "A" else B
        labels = {keys[0].key: draw(st.sampled_from(["x1", "x2"])), keys[1].key: draw(st.sampled_from(["y1", "y2"]))}
        gpus = draw(st.sampled_from([4, 8]))
        nodes.append(NodeFacts(f"{pool.lower()}{i}", labels, gpus, allocatable=(("pods", 110),), fabric=pool))
        used[f"{pool.lower()}{i}"] = draw(st.integers(0, gpus))
    return nodes, used


@settings(max_examples=300, deadline=None)
@given(two_pools(), st.integers(2, 5), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([None, "block", "rack", "nvlink"]))
def test_two_pools_against_each_pool_alone(cluster_, count, gpus, required):
    nodes, used = cluster_
    spec = GangSpec("ml/g", tuple(Member(f"ml/p{i}", gpus) for i in range(count)), count, 60.0, required=required)
    result = plan(spec, build(nodes, used, TWO_POOLS).view())
    alone = {}
    for pool, levels in (("A", A), ("B", B)):
        mine = [replace(n, fabric="") for n in nodes if n.fabric == pool]
        if mine:
            state = build(mine, used, levels)
            r = plan(spec, state.view())
            if isinstance(r, Placement):
                free = sum(max(state.free(n), 0) for n in state.topology.names[r.domain.start:r.domain.end])
                height = 0 if r.level == len(levels) else len(levels) - r.level
                alone[pool] = (height, free - gpus * count, sorted(s.node for s in r.slots))
    if not alone:
        assert not isinstance(result, Placement)
        return
    assert isinstance(result, Placement), result
    pools = {s.node[0].upper() for s in result.slots}
    assert len(pools) == 1  # never two trees
    (pool,) = pools
    event(f"{len(alone)} pools could")
    assert sorted(s.node for s in result.slots) == alone[pool][2]  # as that pool alone places it
    assert alone[pool][:2] == min(a[:2] for a in alone.values())  # the narrowest, then the best fit


def test_a_members_address_names_its_pool_and_only_its_pools_levels():
    (a,) = cluster(POOLS).plan_pending(gang("g", 4, GPUS, annotations={REQ: "subblock"}))
    (first, *_) = a.ranks
    assert [(p.name, p.domain.split("/")[0]) for p in first.domains] == [
        ("fabric", "gke"), ("block", "gke"), ("subblock", "gke"), ("gce-host", "gke")]
