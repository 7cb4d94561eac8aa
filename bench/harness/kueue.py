"""Arm D's Kueue side: its objects, a watch on its Workloads, its metrics.

Kueue's share of a gang's wait is read from two places: the harness's watch on the bench
namespace's Workloads (when each was first seen, first seen with ``QuotaReserved`` and
``Admitted`` true, first seen ``Finished``: the same watch clock as the pods, where the
conditions' own ``lastTransitionTime`` has one-second resolution), and Kueue's own histograms
(``kueue_admission_attempt_duration_seconds``: one scheduling attempt of Kueue's scheduler,
TAS included; ``kueue_admission_wait_time_seconds``: created or requeued -> admitted). Names
are those of v0.17.0's ``pkg/metrics/metrics.go``.
"""

from __future__ import annotations

import ssl
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from bench.harness import arms as arms_mod
from bench.harness.kube import Kube, Watch

WORKLOADS = f"{arms_mod.KUEUE_API}/namespaces/{arms_mod.NAMESPACE}/workloads"
#: The harness's identity for Kueue's /metrics (Kueue authenticates it with a TokenReview and
#: authorizes it with a SubjectAccessReview against the API server).
METRICS_READER = ("kueue-system", "bench-metrics-reader")


@dataclass
class WorkloadRecord:
    name: str
    job: str
    """The bench job whose pods own the Workload (``ownerReferences``)."""
    created: float | None = None
    """Seconds after t0 the watch first saw the Workload."""
    quota_reserved: float | None = None
    admitted: float | None = None
    finished: float | None = None


class WorkloadWatcher(Watch):
    """Stamps each Workload's first sight, quota reservation, admission and finish."""

    def __init__(self, kube: Kube, job_of_pod: dict[str, str], t0: list[float]) -> None:
        super().__init__(kube, WORKLOADS, "bench-watch-workloads")
        self._job_of_pod, self._t0 = job_of_pod, t0
        self.records: dict[str, WorkloadRecord] = {}

    def handle(self, obj: dict[str, Any]) -> None:
        now = time.monotonic() - self._t0[0]
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        owners = [o.get("name", "") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
        job = next((self._job_of_pod[o] for o in owners if o in self._job_of_pod), None)
        if not name or job is None:
            return
        true = {c.get("type") for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
        with self.lock:
            rec = self.records.setdefault(name, WorkloadRecord(name, job, created=now))
            if "QuotaReserved" in true and rec.quota_reserved is None:
                rec.quota_reserved = now
            if "Admitted" in true and rec.admitted is None:
                rec.admitted = now
            if "Finished" in true and rec.finished is None:
                rec.finished = now


def install(kube: Kube, arm: arms_mod.Arm, nodes: list[dict[str, Any]], timeout: float = 120) -> None:
    """Create the arm's Kueue objects and wait until Kueue calls its ClusterQueue and LocalQueue
    active (a LocalQueue admits nothing before; a TAS ClusterQueue waits for its Topology)."""
    for path, obj in arms_mod.kueue_objects(arm, nodes):
        if not kube.create(path, obj):
            raise RuntimeError(f"creating Kueue {obj['kind']} {obj['metadata']['name']} failed")
    queues = (f"{arms_mod.KUEUE_API}/clusterqueues/{arms_mod.KUEUE_QUEUE}",
              f"{arms_mod.KUEUE_API}/namespaces/{arms_mod.NAMESPACE}/localqueues/{arms_mod.KUEUE_QUEUE}")
    deadline = time.monotonic() + timeout
    while not all(_active(kube.get(path)) for path in queues):
        if time.monotonic() > deadline:
            states = {path.rsplit("/", 1)[-1]: (kube.get(path).get("status") or {}).get("conditions") for path in queues}
            raise RuntimeError(f"Kueue queues not active after {timeout:.0f}s: {states}")
        time.sleep(0.5)


def _active(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Active" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def metrics_token(kube: Kube) -> str:
    """A ServiceAccount token allowed to GET Kueue's /metrics (and nothing else)."""
    namespace, name = METRICS_READER
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for path, obj in (
        (f"/api/v1/namespaces/{namespace}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}),
        (f"{rbac}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                  "metadata": {"name": name},
                                  "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        (f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}),
    ):
        if not kube.create(path, obj):
            raise RuntimeError(f"creating {obj['kind']} {name} for Kueue's metrics failed")
    answer = kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                       {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"expirationSeconds": 7 * 24 * 3600}})
    return answer["status"]["token"]


def scrape(url: str, token: str) -> str:
    """Kueue's /metrics text, or a comment saying why not (the run goes on without it)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the shared self-signed metrics cert of the local cluster
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as r:
            return r.read().decode()
    except OSError as exc:
        return f"# scrape of {url} failed: {exc}\n"
