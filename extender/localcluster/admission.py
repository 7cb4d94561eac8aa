"""The admission policy that marks and gates gang members (``adapters/kubeobjects/admission``),
installed in the local cluster for the profiles of the scheduler config it runs, and awaited:
kube-apiserver loads a new policy asynchronously, and a gang member created before would reach
kube-scheduler with no marker and no gate."""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Any

from extender.adapters.kubeobjects import GATE, MARKER
from extender.adapters.kubeobjects.admission import policy_objects
from extender.localcluster.apiclient import ApiClient
from extender.localcluster.errors import ClusterError
from extender.localcluster.nodes import NodeSet

MARKER_PER_NODE = "1000"
"""With the extender on, every node advertises the gang members' marker (``resources.MARKER``),
as docs/reference.md asks of clusters where something else fits pods to nodes by every
requested resource: kube-scheduler's DRA filter for a pod asking an extended resource a
DeviceClass maps (``filterExtendedResources``, pkg/scheduler/framework/plugins/dynamicresources/
extendeddynamicresources.go, v1.37.2) and Kueue's topology-aware scheduling (node allocatable
against ``NewRequestsFromPodSpec``, pkg/scheduler/flavorassigner/tas_flavorassigner.go,
v0.17.0). kube-scheduler's own fit check skips the marker (``ignoredByScheduler``); the count
only has to exceed a node's pods (the kubelet's admission counts it)."""

API = "/apis/admissionregistration.k8s.io/v1"
PATHS = {"MutatingAdmissionPolicy": f"{API}/mutatingadmissionpolicies",
         "MutatingAdmissionPolicyBinding": f"{API}/mutatingadmissionpolicybindings"}


def probe(scheduler_name: str, gpu_resource: str) -> dict[str, Any]:
    """A pod the policy must gate (sent as a dry run only)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "railyard-admission-probe", "namespace": "default",
                         "labels": {"scheduling.x-k8s.io/pod-group": "probe"}},
            "spec": {"schedulerName": scheduler_name, "containers": [{
                "name": "c", "image": "probe", "resources": {"limits": {gpu_resource: "1"}}}]}}


def advertised(node_set: NodeSet) -> NodeSet:
    """The nodes with the marker in capacity and allocatable (``MARKER_PER_NODE``)."""
    nodes = copy.deepcopy(node_set.nodes)
    for node in nodes:
        status = node.setdefault("status", {})
        for key in ("capacity", "allocatable"):
            status.setdefault(key, {})[MARKER] = MARKER_PER_NODE
    return replace(node_set, nodes=nodes)


def install(api: ApiClient, scheduler_config: dict[str, Any], gpu_resource: str, timeout: float) -> None:
    names = [p["schedulerName"] for p in scheduler_config.get("profiles") or [{"schedulerName": "default-scheduler"}]]
    for obj in policy_objects(names, gpu_resource):
        api.create(PATHS[obj["kind"]], obj)
    deadline = time.monotonic() + timeout
    answer: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, answer = api.dry_run("/api/v1/namespaces/default/pods", probe(names[0], gpu_resource))
        gates = [g.get("name") for g in (answer.get("spec") or {}).get("schedulingGates") or []]
        if status in (200, 201) and GATE in gates:
            return
        time.sleep(0.2)
    raise ClusterError(f"the admission policy did not gate a gang member within {timeout:g}s; "
                       f"last answer: {str(answer)[:500]}")
