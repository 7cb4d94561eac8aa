"""railyard plans only where kube-scheduler would place (issue 10), on the real control plane.

One cluster for the module, 14 kwok nodes x 8 GPUs (cpu 128, pods 110 each)::

    leaf r1: nvl-a  a1..a6  pool=a100     (6 nodes)
             nvl-h  h1..h4  pool=h100     (4 nodes: the exact fit for a 4 x 8 gang)
    leaf r2: nvl-c  c1..c4  pool=h100     (4 nodes)

Each test asserts where the pods landed, by node name, and a ``BindingWatch`` fails it if any
gang was ever seen partly bound.
"""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import (
    BindingWatch, create_pods, delete_pods, gang_pods, gpu_node, gpu_pod, names_of, namespace, unique,
    wait_for, wait_for_phase, wait_released,
)

pytestmark = pytest.mark.e2e

LEAF = "network.topology.nvidia.com/leaf"
NVLINK = "network.topology.nvidia.com/accelerator"
BIND_TIMEOUT = 150
A = [f"a{i}" for i in range(1, 7)]
H = [f"h{i}" for i in range(1, 5)]
C = [f"c{i}" for i in range(1, 5)]


def nodes() -> list[dict[str, Any]]:
    out = []
    for names, leaf, nvl, pool in ((A, "r1", "nvl-a", "a100"), (H, "r1", "nvl-h", "h100"), (C, "r2", "nvl-c", "h100")):
        out += [gpu_node(n, labels={LEAF: leaf, NVLINK: nvl, "pool": pool}) for n in names]
    return out


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(nodes=nodes(), extender=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core, "fidelity")
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


@pytest.fixture
def watch(cluster, ns):
    with BindingWatch(cluster.core, ns) as w:
        yield w
        w.assert_whole()


def with_spec(pods: list[dict[str, Any]], **spec: Any) -> list[dict[str, Any]]:
    for p in pods:
        p["spec"].update(spec)
    return pods


def on_node(name: str, node: str, gpus: int = 0, cpu: str | None = None, host_port: int | None = None) -> dict[str, Any]:
    """A pod bound by name (a DaemonSet does that), as kwok runs it: it takes what it requests."""
    p = gpu_pod(name, gpus)
    c = p["spec"]["containers"][0]
    if not gpus:
        c["resources"] = {}
    if cpu:
        c["resources"].setdefault("requests", {})["cpu"] = cpu
    if host_port:
        c["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    p["spec"]["nodeName"] = node
    return p


def landed(core, ns: str, names: list[str]) -> set[str]:
    return {p.spec.node_name for p in wait_for_phase(core, ns, names, "Running", timeout=BIND_TIMEOUT).values()}


def test_a_node_selector_keeps_the_gang_in_its_pool_though_the_other_fits_tighter(cluster, ns, watch):
    gang = with_spec(gang_pods("a100-job", 4, required="nvlink"), nodeSelector={"pool": "a100"})
    got = landed(cluster.core, ns, create_pods(cluster.core, ns, gang))
    assert len(got) == 4 and got <= set(A)
    # The same gang without the selector takes an exact fit, an h100 domain: the pools differ.
    free = landed(cluster.core, ns, create_pods(cluster.core, ns, gang_pods("any-job", 4, required="nvlink")))
    assert free == set(H) or free == set(C)


def test_cpu_taken_by_cpu_only_pods_moves_the_gang_out_of_its_tightest_domain(cluster, ns, watch):
    core = cluster.core
    # nvl-c is the tightest fit for 4 x 8 GPUs (an exact fit, under the leaf with least free),
    # but CPU-only pods take the CPU of c1 and c2.
    busy = [on_node(unique("etl"), n, cpu="120") for n in ("c1", "c2")]
    wait_for_phase(core, ns, create_pods(core, ns, busy), "Running")
    gang = gang_pods("cpu-job", 4, required="nvlink")
    for p in gang:
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "16"
    assert landed(core, ns, create_pods(core, ns, gang)) == set(H)


def test_a_label_added_after_start_is_seen_by_node_selectors(cluster, ns, watch):
    # Labels arrive late on real clusters (GPU Feature Discovery labels a node after it joins).
    # "team" is no topology level, so the tree stays as it was: only the node's facts change.
    core = cluster.core
    # A pod first, so railyard has built its tree before the labels come (it builds it lazily).
    warm = with_spec([gpu_pod(unique("warm"), 1)], nodeSelector={"pool": "a100"})
    wait_for_phase(core, ns, create_pods(core, ns, warm), "Running")
    for n in C:
        core.patch_node(n, {"metadata": {"labels": {"team": "late"}}})
    try:
        wait_for(lambda: all((core.read_node(n).metadata.labels or {}).get("team") == "late" for n in C), 30,
                 "the labels")
        gang = with_spec(gang_pods("late-job", 4, required="nvlink"), nodeSelector={"team": "late"})
        assert landed(core, ns, create_pods(core, ns, gang)) == set(C)
    finally:
        for n in C:
            core.patch_node(n, {"metadata": {"labels": {"team": None}}})


def test_required_node_affinity_is_honoured(cluster, ns, watch):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]},
                              {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["c1"]}]}]}}}
    gang = with_spec(gang_pods("aff-job", 4, required="nvlink"), affinity=affinity)
    # nvl-c (the tightest fit) minus c1 holds 3: the gang goes to nvl-h, the other h100 domain.
    assert landed(cluster.core, ns, create_pods(cluster.core, ns, gang)) == set(H)


def test_a_node_kube_scheduler_refuses_for_what_railyard_does_not_model_is_avoided(cluster, ns, watch):
    core = cluster.core
    # A pod holding host port 9000 on c1: kube-scheduler's NodePorts filter refuses c1 for any
    # pod asking for that port. railyard does not model ports; it learns it from NodeNames.
    wait_for_phase(core, ns, create_pods(core, ns, [on_node(unique("port"), "c1", host_port=9000)]), "Running")
    gang = gang_pods("port-job", 4, required="nvlink")
    for p in gang:
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 9000, "hostPort": 9000}]
    assert landed(core, ns, create_pods(core, ns, gang)) == set(H)


def test_a_replacement_lands_in_its_gangs_nvlink_domain(cluster, ns, watch):
    core = cluster.core
    job = gang_pods("job", 4, required="nvlink")
    names = names_of(job)
    assert landed(core, ns, create_pods(core, ns, job)) == set(C)  # the tightest fit, as above
    lost = core.read_namespaced_pod(names[2], ns).spec.node_name
    core.delete_namespaced_pod(names[2], ns, grace_period_seconds=0)
    wait_for(lambda: names[2] not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}, 60,
             f"{names[2]} to be gone")
    # Every a* and h* node is free too, and comes first in the cluster's order: a lone 8-GPU
    # pod planned on its own would take one of them. The replacement goes back to nvl-c.
    create_pods(core, ns, [gang_pods("job", 4, required="nvlink")[2]])
    running = wait_for_phase(core, ns, names, "Running", timeout=BIND_TIMEOUT)
    assert {p.spec.node_name for p in running.values()} == set(C)
    assert running[names[2]].spec.node_name == lost
