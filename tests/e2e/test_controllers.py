"""kube-controller-manager on the local cluster: real Jobs and StatefulSets beside railyard.

The controllers are the real ones (kube-controller-manager of the pinned Kubernetes version,
started by ``cluster up``); kwok plays the kubelet, including for deleted pods: a deleted pod
that runs becomes Failed (exit code 137) and is removed once no finalizer remains
(extender/localcluster/kwok-stages.yaml). No railyard gang label anywhere: these are plain
workloads, each pod scheduled alone through the extender.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import AppsV1Api, BatchV1Api
from kubernetes.client.exceptions import ApiException

from .helpers import GPU, gpu_node, namespace, wait_for

pytestmark = pytest.mark.e2e

#: kubernetes@v1.37.2 pkg/apis/batch/types.go (JobCompletionIndexAnnotation, JobTrackingFinalizer).
INDEX = "batch.kubernetes.io/job-completion-index"
TRACKING = "batch.kubernetes.io/job-tracking"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(nodes=[gpu_node(f"h{i}") for i in range(4)], extender=True)


@pytest.fixture
def ns(cluster):
    return namespace(cluster.core, "ctl")


def _template(labels: dict[str, str], restart_policy: str = "Never") -> dict[str, Any]:
    """A pod template asking for a whole 8-GPU node; it runs until deleted."""
    return {"metadata": {"labels": labels}, "spec": {
        "restartPolicy": restart_policy,
        "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}}


def _pods(cluster, ns: str, selector: str) -> list[Any]:
    return cluster.core.list_namespaced_pod(ns, label_selector=selector).items


def _running_by_index(cluster, ns: str, job: str, count: int) -> dict[str, Any] | None:
    """The Job's Running, not deleted pods by completion index, once there are ``count``."""
    pods = [p for p in _pods(cluster, ns, f"batch.kubernetes.io/job-name={job}")
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    by_index = {p.metadata.labels[INDEX]: p for p in pods}
    return by_index if len(by_index) == count == len(pods) else None


def test_an_indexed_job_replaces_a_deleted_pod_at_its_index_and_counts_the_failure(cluster, ns):
    batch = BatchV1Api(cluster.core.api_client)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {
        "completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimit": 6,
        "template": _template({"app": "train"})}}
    batch.create_namespaced_job(ns, job)

    first = wait_for(lambda: _running_by_index(cluster, ns, "train", 3), 90, "the Job's 3 pods Running")
    assert sorted(first) == ["0", "1", "2"]
    assert len({p.spec.node_name for p in first.values()}) == 3  # 8 GPUs each: one node per pod
    assert all(TRACKING in (p.metadata.finalizers or []) for p in first.values())

    # Deleted as `kubectl delete pod` does (graceful): kwok stops it as a kubelet would.
    victim = first["1"]
    cluster.core.delete_namespaced_pod(victim.metadata.name, ns)

    def replaced() -> dict[str, Any] | None:
        now = _running_by_index(cluster, ns, "train", 3)
        return now if now and now["1"].metadata.name != victim.metadata.name else None

    # The Job controller's failure backoff (10 s for a first failure) comes first.
    after = wait_for(replaced, 90, "a new pod for completion index 1")
    assert {i: p.metadata.name for i, p in after.items() if i != "1"} == {
        i: p.metadata.name for i, p in first.items() if i != "1"}
    assert after["1"].metadata.name.startswith("train-1-")  # generateName <job>-<index>- (podGenerateNameWithIndex)
    wait_for(lambda: victim.metadata.name not in {p.metadata.name for p in _pods(cluster, ns, "app=train")},
             30, "the deleted pod to go once the Job controller dropped its finalizer")

    status = wait_for(lambda: (s := batch.read_namespaced_job_status("train", ns).status).failed and s,
                      60, "the Job to count the deleted pod as failed")
    assert status.failed == 1 and status.active == 3 and not status.succeeded

    # Deleting the Job (as kubectl does: background propagation) garbage-collects its pods.
    batch.delete_namespaced_job("train", ns, propagation_policy="Background")
    wait_for(lambda: not _pods(cluster, ns, "app=train"), 90, "the garbage collector to delete the Job's pods")


def test_a_statefulset_creates_its_pods_and_recreates_a_deleted_one_under_its_name(cluster, ns):
    apps = AppsV1Api(cluster.core.api_client)
    apps.create_namespaced_stateful_set(ns, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}, "spec": {
            "replicas": 2, "serviceName": "web", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}}, "template": _template({"app": "web"}, "Always")}})

    def running() -> dict[str, Any] | None:
        pods = {p.metadata.name: p for p in _pods(cluster, ns, "app=web")
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None}
        return pods if sorted(pods) == ["web-0", "web-1"] else None

    first = wait_for(running, 90, "web-0 and web-1 Running")
    cluster.core.delete_namespaced_pod("web-0", ns)
    # The controller makes web-0 again only once the old one is gone: kwok finished its delete.
    again = wait_for(lambda: (r := running()) and r["web-0"].metadata.uid != first["web-0"].metadata.uid and r,
                     90, "a new web-0")
    assert again["web-1"].metadata.uid == first["web-1"].metadata.uid

    apps.delete_namespaced_stateful_set("web", ns, propagation_policy="Background")
    wait_for(lambda: not _pods(cluster, ns, "app=web"), 90, "the garbage collector to delete the StatefulSet's pods")


def test_deleting_a_namespace_deletes_what_it_holds(cluster):
    ns = namespace(cluster.core, "gone")
    batch = BatchV1Api(cluster.core.api_client)
    batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "one"}, "spec": {
        "template": _template({"app": "one"})}})
    wait_for(lambda: any(p.status.phase == "Running" for p in _pods(cluster, ns, "app=one")), 90, "the Job's pod")
    cluster.core.delete_namespace(ns)

    def gone() -> bool:
        try:
            cluster.core.read_namespace(ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, 120, f"namespace {ns} to be deleted with its Job and pod")
