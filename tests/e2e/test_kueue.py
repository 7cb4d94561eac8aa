"""Kueue v0.17.0 on the local cluster (issue 15 part 1): its manager admits pod groups by quota.

Only Kueue working on the cluster is checked here (plain kube-scheduler, no extender): a pod
group that fits the ClusterQueue's quota gets a Workload that is admitted, and its pods lose
their scheduling gates and run; a second group beyond the remaining quota gets a Workload that
stays pending, its pods gated, until the first group finishes. railyard's composition with
Kueue is tests/e2e/test_kueue_compose.py (docs/kueue.md).

The objects follow Kueue's own examples (kubernetes-sigs/kueue, ``site/static/examples/admin/
single-clusterqueue-setup.yaml`` and ``site/static/examples/pods-kueue/kueue-pod-group.yaml``),
with an ``nvidia.com/gpu`` quota in place of cpu/memory and in ``v1beta2``, the storage version
at v0.17.0. Label and annotation names are those of v0.17.0's
``pkg/controller/constants`` and ``pkg/controller/jobs/pod/constants``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubernetes.client import CustomObjectsApi

from .helpers import GPU, Cluster, create_pods, delete_pods, gpu_node, gpu_pod, namespace, wait_for

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
QUOTA = 16  # GPUs in the ClusterQueue: two 8-GPU pods


@pytest.fixture(scope="module")
def kueue_cluster(local_cluster, kueue_binaries) -> Cluster:
    return local_cluster(nodes=[gpu_node(f"h{i}") for i in range(1, 5)], kueue=True)


def _custom(cluster: Cluster) -> CustomObjectsApi:
    return CustomObjectsApi(cluster.core.api_client)


def _object(kind: str, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
    if spec is not None:
        obj["spec"] = spec
    return obj


def _queues(cluster: Cluster, ns: str, suffix: str) -> str:
    """A ResourceFlavor, a ClusterQueue with ``QUOTA`` GPUs and a LocalQueue in ``ns``; returns
    the LocalQueue's name."""
    api = _custom(cluster)
    flavor, cluster_queue, local_queue = f"gpu-{suffix}", f"cq-{suffix}", "user-queue"
    api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", _object("ResourceFlavor", flavor))
    api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", _object("ClusterQueue", cluster_queue, {
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": [GPU],
            "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": QUOTA}]}],
        }],
    }))
    api.create_namespaced_custom_object(GROUP, VERSION, ns, "localqueues",
                                        _object("LocalQueue", local_queue, {"clusterQueue": cluster_queue}))
    # A LocalQueue admits nothing until Kueue has seen its ClusterQueue active.
    wait_for(lambda: _condition(api.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue),
                                "Active") == "True", 30, f"ClusterQueue {cluster_queue} Active")
    return local_queue


def _group(name: str, size: int, gpus: int, queue: str, sim_runtime: str | None = None) -> list[dict[str, Any]]:
    return [gpu_pod(f"{name}-{i}", gpus, sim_runtime=sim_runtime,
                    labels={QUEUE_NAME: queue, POD_GROUP_NAME: name},
                    annotations={POD_GROUP_TOTAL: str(size)}) for i in range(size)]


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition.get("status")
    return None


def _workload_of(cluster: Cluster, ns: str, group: str) -> dict[str, Any] | None:
    """The Workload Kueue made for pod group ``group`` (named after the group for pod groups)."""
    items = _custom(cluster).list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
    return next((w for w in items if w["metadata"]["name"] == group), None)


def _pods(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    response = cluster.core.list_namespaced_pod(ns, _preload_content=False)
    return {p["metadata"]["name"]: p for p in json.loads(response.data)["items"]}


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _delete_all(cluster: Cluster, ns: str) -> None:
    """Delete the namespace's pods and Workloads. Kueue v0.17.0 keeps its finalizer
    (``kueue.x-k8s.io/managed``) on the deleted pods of a group that is not admitted until the
    group's Workload goes too, so ``delete_pods`` alone would wait forever for a gated group."""
    cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    _custom(cluster).delete_collection_namespaced_custom_object(GROUP, VERSION, ns, "workloads")
    delete_pods(cluster.core, ns)


def test_a_pod_group_that_fits_is_admitted_and_one_beyond_the_quota_waits(kueue_cluster):
    cluster = kueue_cluster
    ns = namespace(cluster.core, "kueue")
    queue = _queues(cluster, ns, uuid.uuid4().hex[:6])
    try:
        # Group a: 2 x 8 GPUs = the whole quota. Kueue's webhook gates each pod as it is created
        # (TAS is on by default in v0.17, hence the topology gate too).
        first = _group("a", 2, 8, queue, sim_runtime="20s")
        for pod in first:
            created = cluster.core.create_namespaced_pod(ns, pod)
            assert {g.name for g in created.spec.scheduling_gates or []} == {ADMISSION_GATE, TOPOLOGY_GATE}
            assert created.metadata.labels["kueue.x-k8s.io/managed"] == "true"

        admitted = wait_for(lambda: (w := _workload_of(cluster, ns, "a")) and _condition(w, "Admitted") == "True" and w,
                            60, "the Workload of group a to be admitted")
        assignment = admitted["status"]["admission"]["podSetAssignments"][0]
        assert assignment["count"] == 2 and assignment["resourceUsage"][GPU] == str(QUOTA)
        running = wait_for(lambda: (pods := _pods(cluster, ns)) and all(
            pods[p["metadata"]["name"]]["status"].get("phase") == "Running" for p in first) and pods,
            60, "group a's pods to run")
        for pod in first:
            assert _gates(running[pod["metadata"]["name"]]) == []
            assert running[pod["metadata"]["name"]]["spec"].get("nodeName")

        # Group b: 2 x 4 GPUs while a holds all 16: its Workload is pending, its pods stay gated.
        second = create_pods(cluster.core, ns, _group("b", 2, 4, queue))
        pending = wait_for(lambda: (w := _workload_of(cluster, ns, "b")) and _condition(w, "QuotaReserved") == "False" and w,
                           60, "the Workload of group b to be evaluated")
        assert _condition(pending, "Admitted") != "True"
        reason = next(c for c in pending["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert reason["reason"] == "Pending", reason
        time.sleep(2)  # and it stays so: no gate lifted, nothing bound
        pods = _pods(cluster, ns)
        for name in second:
            assert ADMISSION_GATE in _gates(pods[name]), pods[name]["spec"]
            assert not pods[name]["spec"].get("nodeName")

        # When group a finishes (kwok: Succeeded after 20 s), its quota goes to group b.
        wait_for(lambda: _condition(_workload_of(cluster, ns, "b") or {}, "Admitted") == "True",
                 90, "the Workload of group b to be admitted once group a finished")
        pods = wait_for(lambda: (pods := _pods(cluster, ns)) and all(
            pods[n]["status"].get("phase") == "Running" for n in second) and pods, 60, "group b's pods to run")
        assert all(_gates(pods[n]) == [] for n in second)
        assert {pods[p["metadata"]["name"]]["status"]["phase"] for p in first} == {"Succeeded"}
    finally:
        _delete_all(cluster, ns)


def test_status_shows_kueue(kueue_cluster):
    status = kueue_cluster.railyard("status")
    assert "kueue           running" in status.stdout
    line = next(line for line in status.stdout.splitlines() if line.startswith("kueue ") and "webhooks" in line)
    assert "v0.17.0" in line and "https://127.0.0.1:" in line and "TAS on" in line


def test_topology_aware_scheduling_can_be_turned_off(local_cluster, kueue_binaries):
    cluster = local_cluster(nodes=[gpu_node("h1")], kueue=True,
                            kueue_feature_gates="TopologyAwareScheduling=false")
    state = json.loads((cluster.workdir / "cluster.json").read_text())
    assert state["kueue"]["featureGates"]["TopologyAwareScheduling"] is False
    assert "TAS off" in cluster.railyard("status").stdout
    ns = namespace(cluster.core, "kueue-notas")
    # Without TAS the pod webhook adds only the admission gate (dry run: nothing is stored).
    pod = _group("c", 1, 8, "user-queue")[0]
    created = cluster.core.create_namespaced_pod(ns, pod, dry_run="All")
    assert [g.name for g in created.spec.scheduling_gates or []] == [ADMISSION_GATE]
