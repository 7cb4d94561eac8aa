"""A cluster of two fabrics on the real kube-scheduler through railyard (issue 23's done-when):
every gang lands inside one node pool, at the narrowest level the pools offered it, checked
against a model of each pool alone written here from the labels (no railyard code).

The pools, labelled as each project documents (tests/fixtures/labels cites the sources):
- NVIDIA Topograph v0.5.0 ``with-block``: 12 nodes, core > spine > leaf > accelerator (NVLink):
  IB2 > S1 > {S2: B1, S3: B2}; IB1 > S4 > {S5: B3, S6: B4}, 3 nodes in each NVLink domain.
- GKE ``one-block``: 8 nodes, cloud.google.com/gce-topology-block > -subblock (3 and 5 hosts) > -host.

Gangs arrive one at a time and keep running, so each sees the cluster the earlier ones left.
A gang's levels are named (``nvlink``, ``subblock``) and resolved in each pool that has them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .helpers import BindingWatch, create_pods, delete_pods, gang_pods, gpu_node, namespace, pods_by_name, \
    wait_gang_reason, wait_released

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "labels"
T = "network.topology.nvidia.com/"
G = "cloud.google.com/gce-topology-"
#: pool -> (fixture file, example, its levels broadest first as (label key, short name)).
POOLS = {
    "topograph": ("topograph-v0.5", "with-block",
                  [(T + "core", "core"), (T + "spine", "spine"), (T + "leaf", "leaf"), (T + "accelerator", "nvlink")]),
    "gke": ("gke", "one-block", [(G + "block", "block"), (G + "subblock", "subblock"), (G + "host", "gce-host")]),
}
GPUS = 8
BIND_TIMEOUT = 120


def pool_nodes(pool: str) -> list[dict]:
    fixture, example, _ = POOLS[pool]
    entries = yaml.safe_load((FIXTURES / f"{fixture}.yaml").read_text())[example]
    # Labels verbatim; names lowercased (Topograph's test names, Node104, are not valid Node names).
    return [gpu_node(e["name"].lower(), GPUS, labels=e["labels"]) for e in entries]


NODES = {pool: pool_nodes(pool) for pool in POOLS}
POOL_OF = {n["metadata"]["name"]: pool for pool, nodes in NODES.items() for n in nodes}


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(nodes=[n for nodes in NODES.values() for n in nodes], extender=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


# -- the model: each pool alone, from its labels ------------------------------------------------

def domain(pool: str, node: str, height: int) -> tuple:
    """The node's domain ``height`` levels above it in its pool: 0 the node itself, 1 its pool's
    narrowest level, ..., len(levels) the broadest, len(levels) + 1 the whole pool."""
    levels = POOLS[pool][2]
    labels = next(n for n in NODES[pool] if n["metadata"]["name"] == node)["metadata"]["labels"]
    path = tuple(labels[key] for key, _ in levels) + (node,)
    return path[:len(path) - height]


def pool_alone(pool: str, free: dict[str, int], pods: int, gpus: int, required: str | None):
    """(height, GPUs left over, domains that fit best) of the narrowest place in ``pool`` for
    ``pods`` x ``gpus`` on ``free``, inside its required level; None if the pool has no such
    level or no room."""
    names = [name for _, name in POOLS[pool][2]]
    if required is not None and required not in names:
        return None
    top = len(names) - names.index(required) if required is not None else len(names) + 1
    for height in range(top + 1):
        groups: dict[tuple, list[str]] = {}
        for node in (n["metadata"]["name"] for n in NODES[pool]):
            groups.setdefault(domain(pool, node, height), []).append(node)
        left = {d: sum(free[n] for n in members) - pods * gpus for d, members in groups.items()
                if sum(free[n] // gpus for n in members) >= pods}
        if left:
            best = min(left.values())
            return height, best, {d for d, v in left.items() if v == best}
    return None


# Each gang: (name, pods, GPUs per pod, required level name or None, the pool a reader of the
# fixtures expects, from the hand count in the comment).
GANGS = [
    # No request, 4 x 8: no Topograph leaf or NVLink domain has 4 nodes (spine S1 has 6, height 3);
    # GKE's sub-block of 5 hosts holds it at height 2.
    ("g1", 4, 8, None, "gke"),
    # Only Topograph has an NVLink level: one domain of 3 nodes.
    ("g2", 3, 8, "nvlink", "topograph"),
    # Only GKE has sub-blocks: the one of 3 hosts (the other has 1 host left).
    ("g3", 3, 8, "subblock", "gke"),
    # No request, 2 x 8: GKE has one node left; a Topograph NVLink domain with 3 free nodes.
    ("g4", 2, 8, None, "topograph"),
    # No request, 4 x 4 (2 nodes): the Topograph NVLink domain with 1 node left does not hold it
    # (GKE's one node neither); a domain with 3 free nodes at height 1.
    ("g5", 4, 4, None, "topograph"),
    # No request, 1 x 8: one whole node, height 0 in both pools, nothing left over in either.
    ("g6", 1, 8, None, None),
]


def test_every_gang_lands_in_one_pool_at_the_narrowest_level_each_pool_alone_offers(cluster, ns):
    core = cluster.core
    free = {name: GPUS for name in POOL_OF}
    with BindingWatch(core, ns) as watch:
        for gang, size, gpus, required, expected_pool in GANGS:
            offers = {pool: pool_alone(pool, free, size, gpus, required) for pool in POOLS}
            offers = {pool: o for pool, o in offers.items() if o is not None}
            best = min((h, left) for h, left, _ in offers.values())
            acceptable = {pool for pool, (h, left, _) in offers.items() if (h, left) == best}
            if expected_pool is not None:  # the model agrees with the hand count above
                assert acceptable == {expected_pool}, (gang, offers)

            pods = gang_pods(gang, size, gpus, required=required)
            names = create_pods(core, ns, pods)
            watch.wait_bound(names, BIND_TIMEOUT, f"gang {gang}")
            watch.assert_whole({gang: names})
            bound = pods_by_name(core, ns)
            nodes = [bound[n].spec.node_name for n in names]
            pools = {POOL_OF[n] for n in nodes}
            assert len(pools) == 1, f"gang {gang} spans pools: {nodes}"
            (pool,) = pools
            assert pool in acceptable, f"gang {gang} landed in {pool}; the narrowest offers: {offers}"
            height, _, fits_best = offers[pool]
            landed = {domain(pool, n, height) for n in nodes}
            assert len(landed) == 1 and landed <= fits_best, (gang, nodes, height, fits_best)
            # Its address names the pool (railyard.io/domain.fabric).
            assert {bound[n].metadata.annotations.get("railyard.io/domain.fabric") for n in names} == {pool}
            for n in nodes:
                free[n] -= gpus
    assert sum(GPUS - f for f in free.values()) == sum(s * g for _, s, g, _, _ in GANGS)

    # 4 x 8 inside one NVLink domain: only Topograph's pool has the level, and none of its domains
    # has more than 3 nodes. The gang waits, holding nothing, and the reason names the pool.
    assert all(pool_alone(pool, free, 4, 8, "nvlink") is None for pool in POOLS)
    names = create_pods(core, ns, gang_pods("wide", 4, 8, required="nvlink"))
    reason = wait_gang_reason(core, ns, names[0])  # gated: kube-scheduler never tries it
    most = max(sum(free[n] // 8 for n in POOL_OF if POOL_OF[n] == "topograph" and domain("topograph", n, 1) == d)
               for d in {domain("topograph", n, 1) for n in POOL_OF if POOL_OF[n] == "topograph"})
    assert "nvlink topograph/" in reason and f"fits {most}" in reason, reason
    assert not any(pods_by_name(core, ns)[n].spec.node_name for n in names)
