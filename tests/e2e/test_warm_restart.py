"""Warm restart on the real Job controller, kube-scheduler and extender (issue 20 item 4): a
workload deleted and created again is planned back into the domain it ran in, when it fits,
rather than into the best fit. Here the workload is an Indexed Job whose pods name a group (the
gang is its own lineage); a JobSet's restart attempts share its lineage the same way.

NVLink domain n1 holds the gang of 2 x 8 GPUs exactly (the best fit) but a1 is cordoned when
the Job first runs, so it lands in n2; once a1 is back, the Job is run again: n2 again.
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
    nvl n1: a1 a2
  rack r2
    nvl n2: b1 b2 b3
"""


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


def _job() -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": "train", "scheduling.x-k8s.io/pod-group": "train"},
                     "annotations": {"railyard.io/min-member": "2"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "train", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": template}}


def _running_nodes(cluster, ns: str) -> set[str] | None:
    pods = [p for p in cluster.core.list_namespaced_pod(ns, label_selector="app=train").items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    return {p.spec.node_name for p in pods} if len(pods) == 2 else None


def _cordon(cluster, node: str, on: bool) -> None:
    cluster.core.patch_node(node, {"spec": {"unschedulable": on}})


def test_a_job_run_again_goes_back_to_the_domain_it_ran_in(cluster):
    ns = namespace(cluster.core, "warm")
    batch = BatchV1Api(cluster.core.api_client)
    _cordon(cluster, "a1", True)
    batch.create_namespaced_job(ns, _job())
    first = wait_for(lambda: _running_nodes(cluster, ns), 120, "the Job's 2 pods Running")
    assert first <= {"b1", "b2", "b3"}  # n1 has one schedulable node

    batch.delete_namespaced_job("train", ns, propagation_policy="Background")
    wait_for(lambda: not cluster.core.list_namespaced_pod(ns, label_selector="app=train").items, 90,
             "the garbage collector to delete the Job's pods")
    _cordon(cluster, "a1", False)
    wait_for(lambda: not cluster.core.read_node("a1").spec.unschedulable, 30, "a1 uncordoned")
    batch.create_namespaced_job(ns, _job())
    again = wait_for(lambda: _running_nodes(cluster, ns), 120, "the Job's 2 new pods Running")
    assert again <= {"b1", "b2", "b3"}  # back in n2, though n1 now fits best

    batch.delete_namespaced_job("train", ns, propagation_policy="Background")
    wait_for(lambda: not cluster.core.list_namespaced_pod(ns, label_selector="app=train").items, 90,
             "the garbage collector to delete the Job's pods")
