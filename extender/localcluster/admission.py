"""The admission policy that marks and gates gang members (``adapters/kubeobjects/admission``),
installed in the local cluster for the profiles of the scheduler config it runs, and awaited:
kube-apiserver loads a new policy asynchronously, and a gang member created before would reach
kube-scheduler with no marker and no gate."""

from __future__ import annotations

import time
from typing import Any

from extender.adapters.kubeobjects import GATE
from extender.adapters.kubeobjects.admission import policy_objects
from extender.localcluster.apiclient import ApiClient
from extender.localcluster.errors import ClusterError

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
