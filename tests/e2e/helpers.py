"""Shared helpers for end-to-end tests on the local cluster: real API calls, no mocks.

Pods are plain dicts sent through the official client. Each test uses its own namespace and
deletes its pods with ``delete_pods`` (grace period 0) so the GPUs are free for the next test:
faster than deleting the namespace, which kube-controller-manager's namespace controller
empties one resource type at a time.
"""

from __future__ import annotations

import itertools
import json
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import kubernetes
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

GPU = "nvidia.com/gpu"
SIM_RUNTIME = "railyard.io/sim-runtime"
_counter = itertools.count()


@dataclass
class Cluster:
    """A running local cluster as the tests see it."""

    workdir: Path
    kubeconfig: Path
    extender: bool
    core: CoreV1Api

    def railyard(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``railyard cluster ARGS --workdir <this cluster>`` and return the result."""
        return run_railyard("cluster", *args, "--workdir", str(self.workdir), check=check)

    def extender_gangs(self, replica: int = 1) -> dict[str, dict[str, Any]]:
        """The extender's ``GET /debug/gangs`` (of ``replica``'s railyard, with ``--replicas``), by
        gang key; {} while it does not answer."""
        state = json.loads((self.workdir / "cluster.json").read_text())
        url = next((r["extenderUrl"] for r in state.get("replicas") or [] if r["index"] == replica), state["extender"])
        base = url.rsplit("/scheduler", 1)[0]
        try:
            with urllib.request.urlopen(base + "/debug/gangs", timeout=5) as response:
                body = json.loads(response.read())
        except (OSError, ValueError):
            return {}
        gangs = body.get("gangs", body) if isinstance(body, dict) else body
        return {g["gang"]: g for g in gangs}


def run_railyard(*args: str, check: bool = True, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process, as a user runs it."""
    result = subprocess.run([sys.executable, "-m", "extender", *args],
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"railyard {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def api_client(kubeconfig: Path) -> kubernetes.client.ApiClient:
    """A client on ``kubeconfig`` (the cluster's admin one, or another identity's)."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 16
    return kubernetes.client.ApiClient(configuration)


#: A schema-less stand-in for the Prometheus Operator's CRD, for the ServiceMonitor variants.
SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


def create_servicemonitor_crd(client: kubernetes.client.ApiClient) -> DynamicClient:
    """Create SERVICEMONITOR_CRD, wait until it is Established; a dynamic client that knows it."""
    dynamic = DynamicClient(client)
    crds = dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    dynamic.create(crds, body=SERVICEMONITOR_CRD)
    wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in
                         (dynamic.get(crds, name=SERVICEMONITOR_CRD["metadata"]["name"]).to_dict()
                          .get("status", {}).get("conditions") or [])), 30, "the ServiceMonitor CRD")
    return DynamicClient(client)  # fresh discovery, now with ServiceMonitor


def core_api(kubeconfig: Path) -> CoreV1Api:
    """A CoreV1Api on the cluster's admin kubeconfig."""
    return CoreV1Api(api_client(kubeconfig))


def gpu_node(name: str, gpus: int = 8, labels: dict[str, str] | None = None,
             unschedulable: bool = False, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Node object as a NodeList file would hold it."""
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    resources = {GPU: str(gpus), "cpu": "128", "memory": "2048Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


# The shared session cluster (``gpu_cluster``): two racks, one cordoned and one tainted node.
TAINT = {"key": "railyard.io/reserved", "value": "inference", "effect": "NoSchedule"}
SCHEDULABLE = ["r1-h1", "r1-h2", "r2-h1", "r2-h2"]
CORDONED = "r2-cordoned"
TAINTED = "r2-tainted"


def default_nodes() -> list[dict[str, Any]]:
    return [
        *(gpu_node(name, labels={"network.topology.nvidia.com/leaf": name[:2]}) for name in SCHEDULABLE),
        gpu_node(CORDONED, labels={"network.topology.nvidia.com/leaf": "r2"}, unschedulable=True),
        gpu_node(TAINTED, labels={"network.topology.nvidia.com/leaf": "r2"}, taints=[TAINT]),
    ]


def node_list(nodes: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "NodeList", "items": list(nodes)}


def namespace(core: CoreV1Api, prefix: str = "e2e") -> str:
    """Create a fresh namespace and return its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def gpu_pod(name: str, gpus: int, *, scheduler_name: str | None = None, sim_runtime: str | None = None,
            labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A pod asking for ``gpus`` GPUs; ``sim_runtime`` (e.g. "5s") makes kwok finish it."""
    meta_annotations = dict(annotations or {})
    if sim_runtime is not None:
        meta_annotations[SIM_RUNTIME] = sim_runtime
    spec: dict[str, Any] = {
        "containers": [{
            "name": "train",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
        }],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": meta_annotations},
        "spec": spec,
    }


def create_pods(core: CoreV1Api, ns: str, pods: Iterable[dict[str, Any]]) -> list[str]:
    names = []
    for pod in pods:
        core.create_namespaced_pod(ns, pod)
        names.append(pod["metadata"]["name"])
    return names


def pods_by_name(core: CoreV1Api, ns: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def wait_for_phase(core: CoreV1Api, ns: str, names: Iterable[str], phases: str | set[str],
                   timeout: float = 60) -> dict[str, Any]:
    """Wait until every named pod is in one of ``phases``; return the pods by name."""
    wanted = {phases} if isinstance(phases, str) else set(phases)
    names = list(names)

    def reached() -> dict[str, Any] | None:
        pods = pods_by_name(core, ns)
        if all(n in pods and pods[n].status.phase in wanted for n in names):
            return {n: pods[n] for n in names}
        return None

    def describe() -> str:
        pods = pods_by_name(core, ns)
        return ", ".join(f"{n}={pods[n].status.phase if n in pods else 'missing'}" for n in names)

    try:
        return wait_for(reached, timeout, f"pods in {sorted(wanted)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe()}") from None


def wait_unschedulable(core: CoreV1Api, ns: str, name: str, timeout: float = 60) -> str:
    """Wait until the scheduler marked the pod Unschedulable; return its message."""
    def message() -> str | None:
        pod = core.read_namespaced_pod(name, ns)
        for condition in pod.status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
                return condition.message or "Unschedulable"
        return None

    return wait_for(message, timeout, f"pod {ns}/{name} to be Unschedulable")


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of a counter's samples matching ``labels`` in a /metrics text."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(url + "/metrics", timeout=5, context=context) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})?\s+(\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total


def wait_gang_reason(core: CoreV1Api, ns: str, name: str, timeout: float = 60,
                     reason: str = "GangUnschedulable") -> str:
    """Wait until railyard told a gated gang member why its gang is not planned (an Event
    ``GangUnschedulable``, or ``GangWaiting`` while another component's gate holds it:
    kube-scheduler never tries a gated pod, so no condition says it); return its message."""
    def message() -> str | None:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        return next((e.message for e in events if e.reason == reason), None)

    return wait_for(message, timeout, f"railyard's reason on gang member {ns}/{name}")


def delete_pods(core: CoreV1Api, ns: str) -> None:
    """Delete every pod of ``ns`` at once (grace period 0), so their GPUs are free again."""
    try:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise
    wait_for(lambda: not core.list_namespaced_pod(ns).items, 60, f"pods of {ns} to be gone")


def unique(prefix: str) -> str:
    """A pod name unique within this test session."""
    return f"{prefix}-{next(_counter)}"


# -- gangs ------------------------------------------------------------------------------------

POD_GROUP = "scheduling.x-k8s.io/pod-group"
RANK = "batch.kubernetes.io/job-completion-index"


def gang_pods(gang: str, size: int, gpus: int = 8, *, required: str | None = None,
              timeout_seconds: int | None = None, sim_runtime: str | None = None) -> list[dict[str, Any]]:
    """The ``size`` members ``gang-0`` .. of a gang with ``railyard.io/min-member: size``."""
    annotations = {"railyard.io/min-member": str(size)}
    if required:
        annotations["railyard.io/required-topology"] = required
    if timeout_seconds is not None:
        annotations["railyard.io/timeout-seconds"] = str(timeout_seconds)
    return [gpu_pod(f"{gang}-{i}", gpus, sim_runtime=sim_runtime, labels={POD_GROUP: gang, RANK: str(i)},
                    annotations=annotations) for i in range(size)]


def names_of(pods: Iterable[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def node_labels(core: CoreV1Api) -> dict[str, dict[str, str]]:
    return {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}


class BindingWatch:
    """Lists a namespace's pods every ``interval`` s in a thread and records the first time each
    pod was seen with ``spec.nodeName``: the ground truth for "no gang is ever partly bound".

    Listing raw JSON (no client models) keeps each poll cheap on a busy 2-core machine.
    """

    def __init__(self, core: CoreV1Api, ns: str, interval: float = 0.2) -> None:
        self.core, self.ns, self.interval = core, ns, interval
        self.first_bound: dict[str, tuple[float, str]] = {}
        """pod name -> (monotonic time first seen bound, node)."""
        self.first_phase: dict[tuple[str, str], float] = {}
        """(pod name, phase) -> monotonic time first seen in that phase."""
        self.gang_of: dict[str, str] = {}
        """pod name -> its pod-group label, for every gang member seen."""
        self.now: dict[str, str] = {}
        """pod name -> node ("" while unbound) of every pod in the latest listing."""
        self.polls = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"binding-watch-{ns}", daemon=True)

    def __enter__(self) -> "BindingWatch":
        self.poll()  # a baseline before the test creates anything
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # a slow or refused list: the next poll tries again
                continue

    def poll(self) -> None:
        response = self.core.list_namespaced_pod(self.ns, _preload_content=False, _request_timeout=20)
        items = json.loads(response.data)["items"]
        now = time.monotonic()
        with self._lock:
            self.polls += 1
            self.now = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") or "" for p in items}
            for pod in items:
                node = (pod.get("spec") or {}).get("nodeName")
                name = pod["metadata"]["name"]
                if node and name not in self.first_bound:
                    self.first_bound[name] = (now, node)
                group = (pod["metadata"].get("labels") or {}).get(POD_GROUP)
                if group:
                    self.gang_of[name] = group
                phase = (pod.get("status") or {}).get("phase", "")
                self.first_phase.setdefault((name, phase), now)

    def bound(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """pod name -> node of every pod seen bound (of ``names``, if given)."""
        with self._lock:
            seen = {n: node for n, (_, node) in self.first_bound.items()}
        return seen if names is None else {n: seen[n] for n in names if n in seen}

    def first_seen(self, names: Iterable[str], phase: str | None = None) -> list[float]:
        """When each of ``names`` was first seen bound (or in ``phase``), for those seen so."""
        with self._lock:
            if phase is None:
                return [self.first_bound[n][0] for n in names if n in self.first_bound]
            return [self.first_phase[(n, phase)] for n in names if (n, phase) in self.first_phase]

    def bound_now(self, names: Iterable[str]) -> dict[str, str]:
        """pod name -> node of each of ``names`` bound in the latest listing (deleted pods are not)."""
        with self._lock:
            return {n: self.now[n] for n in names if self.now.get(n)}

    def assert_none_partial_now(self, gangs: dict[str, list[str]]) -> None:
        """No gang is partly bound now: each has all of its members bound or none (members it
        lost to eviction count as unbound): the "0 pods left partial" of the fault matrix."""
        self.poll()
        problems = [f"gang {g} is left partly bound: {len(b)}/{len(names)} ({sorted(b)})"
                    for g, names in gangs.items() if 0 < len(b := self.bound_now(names)) < len(names)]
        assert not problems, "; ".join(problems)

    def wait_bound(self, names: Iterable[str], timeout: float, what: str) -> dict[str, str]:
        names = list(names)
        return wait_for(lambda: len(self.bound(names)) == len(names) and self.bound(names), timeout,
                        f"{what}: {len(names)} pods bound (seen {len(self.bound(names))})")

    def spread(self, names: Iterable[str]) -> float:
        """Seconds between the first and the last member of ``names`` seen bound (0: none bound)."""
        with self._lock:
            times = [self.first_bound[n][0] for n in names if n in self.first_bound]
        return max(times) - min(times) if times else 0.0

    def assert_whole(self, gangs: dict[str, list[str]] | None = None, max_spread: float = 2.0) -> None:
        """Every gang is bound whole or not at all now, and was never seen partly bound for longer
        than ``max_spread`` seconds (the time it takes to issue one gang's Bindings).

        ``gangs``: gang -> member names; default: every pod-group label seen, with the pods seen.
        """
        self.poll()
        if gangs is None:
            with self._lock:
                gangs = {}
                for name, group in self.gang_of.items():
                    gangs.setdefault(group, []).append(name)
        problems = []
        for gang, members in gangs.items():
            bound = self.bound(members)
            if bound and len(bound) < len(members):
                problems.append(f"gang {gang} is partly bound: {len(bound)}/{len(members)} ({sorted(bound)})")
            elif bound and self.spread(members) > max_spread:
                problems.append(f"gang {gang} was seen partly bound for {self.spread(members):.1f}s")
        assert not problems, "; ".join(problems)


def wait_released(cluster: Cluster, ns: str) -> None:
    """Until railyard holds nothing (planned, waiting, binding) for the gangs of ``ns``: the next
    test of a shared cluster starts with nothing reserved."""
    wait_for(lambda: not any(g["gang"].startswith(f"{ns}/") and g["phase"].startswith(("planned", "waiting", "binding"))
                             for g in cluster.extender_gangs().values()),
             60, f"railyard to release the gangs of {ns}")


def create_podgroup(client, api: tuple[str, str], ns: str, name: str, spec: dict[str, Any]) -> None:
    group, version = api
    kubernetes.client.CustomObjectsApi(client).create_namespaced_custom_object(
        group, version, ns, "podgroups",
        {"apiVersion": f"{group}/{version}", "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec})
