"""A replaced member of a running gang, on the real Job controller, kube-scheduler and
extender (issue 20 item 4): the Job controller's new pod for a lost completion index lands in
the lost member's slice domain and carries the lost member's whole address (rank, slice,
domains), not a bare Binding.

Leaf r1 has five free nodes: the gang of 4 x 8 GPUs in slices of 2 per NVLink domain fits it
best; one slice fills n2 exactly, the other takes two of n1's three nodes. When a pod of the n2
slice is deleted, r1 has two free nodes: the one it left in n2 and the spare in n1 (first in node
order). The replacement must go back to n2, beside its slice.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import BatchV1Api

from .helpers import GPU, namespace, wait_for

pytestmark = pytest.mark.e2e

TOPOLOGY = """
scheme topograph
gpus 8
block b1
  rack r1
    nvl n1: a1 a2 a3
    nvl n2: b1 b2
  rack r2
    nvl n1: c1 c2 c3
    nvl n2: d1 d2 d3
"""
#: kubernetes@v1.37.2 pkg/apis/batch/types.go (JobCompletionIndexAnnotation).
INDEX = "batch.kubernetes.io/job-completion-index"
ADDRESS = ("railyard.io/rank", "railyard.io/slice")
DOMAIN = "railyard.io/domain."


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


def _running_by_index(cluster, ns: str) -> dict[str, Any] | None:
    pods = [p for p in cluster.core.list_namespaced_pod(ns, label_selector="app=train").items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    by_index = {p.metadata.labels[INDEX]: p for p in pods}
    return by_index if len(by_index) == 4 == len(pods) else None


def _address(pod: Any) -> dict[str, str]:
    notes = pod.metadata.annotations or {}
    return {k: v for k, v in notes.items() if k in ADDRESS or k.startswith(DOMAIN)}


def test_a_replaced_member_comes_home_to_its_slice_with_the_lost_members_address(cluster):
    ns = namespace(cluster.core, "repl")
    batch = BatchV1Api(cluster.core.api_client)
    template = {
        "metadata": {"labels": {"app": "train", "scheduling.x-k8s.io/pod-group": "train"},
                     "annotations": {"railyard.io/min-member": "4", "railyard.io/required-topology": "leaf",
                                     "railyard.io/slice-size": "2",
                                     "railyard.io/slice-required-topology": "nvlink"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "train", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}}
    batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
                                     "spec": {"completionMode": "Indexed", "completions": 4, "parallelism": 4,
                                              "backoffLimit": 6, "template": template}})

    first = wait_for(lambda: _running_by_index(cluster, ns), 120, "the Job's 4 pods Running")
    nodes = {i: p.spec.node_name for i, p in first.items()}
    assert set(nodes.values()) <= {"a1", "a2", "a3", "b1", "b2"}  # leaf r1, the best fit
    # A member of the slice that fills n2 (b1, b2): the spare n1 node is beside it in the rack.
    index = next(i for i, n in nodes.items() if n in {"b1", "b2"})
    lost = first[index]
    address = _address(lost)
    assert address["railyard.io/rank"] == index and address["railyard.io/slice"] == str(int(index) // 2)
    assert address[DOMAIN + "nvlink"] == "b1/r1/n2"
    assert len({"a1", "a2", "a3"} - set(nodes.values())) == 1, "a spare node beside the slice's domain"

    cluster.core.delete_namespaced_pod(lost.metadata.name, ns)

    def replaced() -> dict[str, Any] | None:
        now = _running_by_index(cluster, ns)
        return now if now and now[index].metadata.name != lost.metadata.name else None

    # The Job controller's failure backoff (10 s for a first failure) comes first.
    after = wait_for(replaced, 120, f"the Job controller's new pod for completion index {index}")
    again = after[index]
    assert again.spec.node_name == lost.spec.node_name  # home: n2, not the spare in n1
    assert _address(again) == address  # rank, slice and every domain of the member it replaces

    batch.delete_namespaced_job("train", ns, propagation_policy="Background")
    wait_for(lambda: not cluster.core.list_namespaced_pod(ns, label_selector="app=train").items, 90,
             "the garbage collector to delete the Job's pods")
