"""Kueue admits, railyard places (issue 15 item 2): ``manifests/overlays/kueue`` on a real cluster.

Two clusters, each with railyard (kube-scheduler running the overlay's ``scheduler-config.yaml``)
and Kueue v0.17.0, and the same 18 nodes x 8 GPUs under one spine::

    leaf r1: nvl n1 (3 nodes)  nvl n2 (5 nodes)
    leaf r2: nvl n1 (4 nodes)  nvl n2 (6 nodes)

- quota (Kueue's TAS off, as the overlay's ``kueue-configuration.yaml`` sets; queues from
  ``queues.example.yaml``): a ClusterQueue of 32 GPUs and two gangs of 4 x 8 GPUs. Kueue
  admits one, railyard binds it whole in its best NVLink domain, the other waits in Kueue's
  queue, gated, with nothing reserved in railyard; when the first finishes the second is
  admitted and placed.
- TAS (Kueue's default gates; ``tas.example.yaml``: Topology spine > leaf > NVLink): Kueue picks
  the gang's domain and puts it in each pod's nodeSelector; railyard must place the gang inside
  it. **Needs railyard's planner to respect nodeSelector (the eligibility work)**: until then
  railyard plans its own best domain, which kube-scheduler's NodeAffinity filter never offers,
  and the gang stays unbound; the test says so when it times out.

Pods carry Kueue's labels only (``kueue.x-k8s.io/pod-group-name`` label,
``kueue.x-k8s.io/pod-group-total-count`` annotation, ``kueue.x-k8s.io/pod-group-pod-index``
label, ``kueue.x-k8s.io/podset-required-topology``): railyard reads the same ones. Names are
Kueue v0.17.0's (``pkg/controller/jobs/pod/constants/constants.go``,
``apis/kueue/v1beta2/topology_types.go``).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import CustomObjectsApi

from extender.localcluster import config as localconfig

from .helpers import GPU, BindingWatch, Cluster, create_pods, delete_pods, gpu_node, gpu_pod, namespace, wait_for

OVERLAY = localconfig.MANIFESTS / "overlays" / "kueue"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
NVLINK = "network.topology.nvidia.com/accelerator"
GPU_PRESENT = "nvidia.com/gpu.present"  # the examples' ResourceFlavor nodeLabel
SIZES = {("r1", "n1"): 3, ("r1", "n2"): 5, ("r2", "n1"): 4, ("r2", "n2"): 6}
QUOTA = 32  # GPUs in the quota test's ClusterQueue: one gang of 4 x 8
#: Where railyard puts a 4 x 8 gang on this empty cluster (worked out by hand): the NVLink
#: domains with 4 free nodes or more are r1/n2 (5), r2/n1 (4) and r2/n2 (6); best fit, fewest
#: GPUs left over, is r2/n1.
BEST = ("b1", "r2", "n1")
BIND_TIMEOUT = 120


def _nodes() -> list[dict[str, Any]]:
    return [gpu_node(f"{leaf}-{nvl}-h{i}", labels={SPINE: "b1", LEAF: leaf, NVLINK: nvl, GPU_PRESENT: "true"})
            for (leaf, nvl), size in SIZES.items() for i in range(1, size + 1)]


def _domain(labels: dict[str, str]) -> tuple[str, str, str]:
    return labels[SPINE], labels[LEAF], labels[NVLINK]


@pytest.fixture(scope="module")
def overlay_scheduler_config(tmp_path_factory) -> Path:
    """The overlay's scheduler-config.yaml, bound to a local cluster the way ``cluster up``
    binds the base one (extender URL, one scheduler, leader election off); all else as shipped."""
    cfg = yaml.safe_load((OVERLAY / "scheduler-config.yaml").read_text())
    (ext,) = cfg["extenders"]
    ext["urlPrefix"] = ext["urlPrefix"].replace(localconfig.REFERENCE_EXTENDER_BASE,
                                                localconfig.EXTENDER_URL_PLACEHOLDER)
    cfg["leaderElection"] = {"leaderElect": False}
    path = tmp_path_factory.mktemp("overlay") / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _kueue_gates() -> str:
    gates = yaml.safe_load((OVERLAY / "kueue-configuration.yaml").read_text())["featureGates"]
    return ",".join(f"{k}={str(v).lower()}" for k, v in gates.items())


@pytest.fixture(scope="module")
def quota_cluster(local_cluster, kueue_binaries, overlay_scheduler_config) -> Cluster:
    return local_cluster(nodes=_nodes(), extender=True, scheduler_config=overlay_scheduler_config,
                         kueue=True, kueue_feature_gates=_kueue_gates())


@pytest.fixture(scope="module")
def tas_cluster(local_cluster, kueue_binaries, overlay_scheduler_config) -> Cluster:
    return local_cluster(nodes=_nodes(), extender=True, scheduler_config=overlay_scheduler_config, kueue=True)


def _custom(cluster: Cluster) -> CustomObjectsApi:
    return CustomObjectsApi(cluster.core.api_client)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def _apply_example(cluster: Cluster, example: str, ns: str, quota: int) -> str:
    """Create the objects of an overlay example with a fresh suffix on cluster-scoped names, the
    LocalQueue in ``ns`` and every nominalQuota set to ``quota``; return the LocalQueue's name
    once Kueue calls it and its ClusterQueue active."""
    api, suffix = _custom(cluster), uuid.uuid4().hex[:6]
    docs = [d for d in yaml.safe_load_all((OVERLAY / example).read_text()) if d]
    renamed = {d["metadata"]["name"]: f"{d['metadata']['name']}-{suffix}" for d in docs if d["kind"] != "LocalQueue"}
    local_queue = ""
    for doc in docs:
        text = json.dumps(doc)
        for old, new in renamed.items():
            text = text.replace(f'"{old}"', f'"{new}"')
        obj = json.loads(text)
        kind = obj["kind"]
        if kind == "ClusterQueue":
            for group in obj["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    for resource in flavor["resources"]:
                        resource["nominalQuota"] = quota
        plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "Topology": "topologies",
                  "LocalQueue": "localqueues"}[kind]
        if kind == "LocalQueue":
            obj["metadata"]["namespace"] = ns
            local_queue = obj["metadata"]["name"]
            api.create_namespaced_custom_object(GROUP, VERSION, ns, plural, obj)
        else:
            api.create_cluster_custom_object(GROUP, VERSION, plural, obj)
    cluster_queue = next(new for old, new in renamed.items()
                         if any(d["kind"] == "ClusterQueue" and d["metadata"]["name"] == old for d in docs))
    wait_for(lambda: _condition(api.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue),
                                "Active").get("status") == "True", 60, f"ClusterQueue {cluster_queue} Active")
    wait_for(lambda: _condition(api.get_namespaced_custom_object(GROUP, VERSION, ns, "localqueues", local_queue),
                                "Active").get("status") == "True", 60, f"LocalQueue {local_queue} Active")
    return local_queue


def _gang(name: str, size: int, queue: str, *, required: str, sim_runtime: str | None = None) -> list[dict[str, Any]]:
    """A Kueue pod group of ``size`` 8-GPU pods for railyard's scheduler, ranked, one level required."""
    pods = []
    for i in range(size):
        pod = gpu_pod(f"{name}-{i}", 8, scheduler_name="railyard", sim_runtime=sim_runtime,
                      labels={QUEUE_NAME: queue, POD_GROUP_NAME: name, POD_INDEX: str(i)},
                      annotations={POD_GROUP_TOTAL: str(size), REQUIRED: required})
        pods.append(pod)
    return pods


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def _workload(cluster: Cluster, ns: str, group: str) -> dict[str, Any] | None:
    items = _custom(cluster).list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
    return next((w for w in items if w["metadata"]["name"] == group), None)


def _admitted(cluster: Cluster, ns: str, group: str, timeout: float) -> dict[str, Any]:
    return wait_for(lambda: (w := _workload(cluster, ns, group)) and _condition(w, "Admitted").get("status") == "True"
                    and w, timeout, f"Kueue to admit the Workload of gang {group}")


def _pods(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    response = cluster.core.list_namespaced_pod(ns, _preload_content=False)
    return {p["metadata"]["name"]: p for p in json.loads(response.data)["items"]}


def _node_labels(cluster: Cluster) -> dict[str, dict[str, str]]:
    return {n.metadata.name: n.metadata.labels or {} for n in cluster.core.list_node().items}


def _delete_all(cluster: Cluster, ns: str) -> None:
    """Pods, then the Workloads: Kueue keeps its finalizer on the deleted pods of a group that is
    not admitted until the group's Workload goes too (v0.17.0, docs/local-cluster.md)."""
    cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    _custom(cluster).delete_collection_namespaced_custom_object(GROUP, VERSION, ns, "workloads")
    delete_pods(cluster.core, ns)


def test_kueue_admits_one_gang_railyard_binds_it_whole_in_its_best_domain_the_other_waits_holding_nothing(
        quota_cluster):
    cluster = quota_cluster
    state = json.loads((cluster.workdir / "cluster.json").read_text())
    assert state["kueue"]["topologyAwareScheduling"] is False  # the overlay's Kueue Configuration
    ns = namespace(cluster.core, "compose")
    queue = _apply_example(cluster, "queues.example.yaml", ns, QUOTA)
    first = _gang("a", 4, queue, required=NVLINK, sim_runtime="15s")
    second = _gang("b", 4, queue, required=NVLINK)
    gangs = {"a": _names(first), "b": _names(second)}
    try:
        with BindingWatch(cluster.core, ns) as watch:
            create_pods(cluster.core, ns, first)
            admitted = _admitted(cluster, ns, "a", 60)
            # Kueue's TAS is off: it took the topology annotation as no request of its own.
            assert all("topologyRequest" not in ps for ps in admitted["spec"]["podSets"]), admitted["spec"]["podSets"]
            (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
            assert assignment["count"] == 4 and assignment["resourceUsage"][GPU] == str(QUOTA)
            # Gang b while a holds the whole quota: 64 GPUs asked of a 32-GPU queue.
            create_pods(cluster.core, ns, second)

            placed = watch.wait_bound(gangs["a"], BIND_TIMEOUT, "gang a, admitted by Kueue")
            watch.assert_whole({"a": gangs["a"]})
            labels = _node_labels(cluster)
            assert {_domain(labels[n]) for n in placed.values()} == {BEST}, placed
            assert len(set(placed.values())) == 4, placed

            pending = wait_for(lambda: (w := _workload(cluster, ns, "b")) and _condition(w, "QuotaReserved")
                               .get("status") == "False" and w, 60, "Kueue to evaluate gang b's Workload")
            reserved = _condition(pending, "QuotaReserved")
            # Kueue's words (v0.17.0 pkg/scheduler/flavorassigner/flavorassigner.go), with the numbers.
            assert reserved["reason"] == "Pending", reserved
            assert "insufficient unused quota for nvidia.com/gpu" in reserved["message"], reserved
            assert "32 more needed" in reserved["message"], reserved
            time.sleep(3)  # and it stays so while a runs
            pods = _pods(cluster, ns)
            for name in gangs["b"]:
                assert ADMISSION_GATE in [g["name"] for g in pods[name]["spec"].get("schedulingGates") or []], name
                assert not pods[name]["spec"].get("nodeName"), name
            held = cluster.extender_gangs().get(f"{ns}/b")
            assert held is None or (held["phase"] == "pending" and held["plan"] == {}), held

            # a finishes (kwok: Succeeded 15 s after Running); Kueue admits b; railyard places it.
            _admitted(cluster, ns, "b", 120)
            placed_b = watch.wait_bound(gangs["b"], BIND_TIMEOUT, "gang b, admitted once gang a finished")
            watch.assert_whole(gangs)
            assert {_domain(labels[n]) for n in placed_b.values()} == {BEST}, placed_b
            assert {p["status"]["phase"] for n, p in _pods(cluster, ns).items() if n in gangs["a"]} == {"Succeeded"}
    finally:
        _delete_all(cluster, ns)


def _assigned_domains(assignment: dict[str, Any]) -> dict[tuple[str, ...], int]:
    """Kueue's ``topologyAssignment`` (v1beta2, compressed slices) -> {level values: pods}."""
    out: dict[tuple[str, ...], int] = {}
    for part in assignment["slices"]:
        for i in range(part["domainCount"]):
            values = []
            for level in part["valuesPerLevel"]:
                if "universal" in level:
                    values.append(level["universal"])
                else:
                    ind = level["individual"]
                    values.append(ind.get("prefix", "") + ind["roots"][i] + ind.get("suffix", ""))
            counts = part["podCounts"]
            out[tuple(values)] = counts["universal"] if "universal" in counts else counts["individual"][i]
    return out


def test_a_gang_admitted_by_kueue_tas_keeps_inside_the_domain_kueue_assigned(tas_cluster):
    """Needs railyard's planner to respect nodeSelector (the eligibility work)."""
    cluster = tas_cluster
    ns = namespace(cluster.core, "compose-tas")
    queue = _apply_example(cluster, "tas.example.yaml", ns, 144)
    gang = _gang("kept", 4, queue, required=LEAF)
    names = _names(gang)
    try:
        with BindingWatch(cluster.core, ns) as watch:
            create_pods(cluster.core, ns, gang)
            admitted = _admitted(cluster, ns, "kept", 60)
            (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
            topology = assignment["topologyAssignment"]
            assert topology["levels"] == [SPINE, LEAF, NVLINK]  # tas.example.yaml's Topology
            domains = _assigned_domains(topology)
            assert sum(domains.values()) == 4 and len({d[:2] for d in domains}) == 1, domains  # one leaf, as required
            # The premise: Kueue's choice is not where railyard alone would put the gang, so a
            # railyard that ignored the nodeSelector could not pass by luck.
            assert BEST not in domains, f"Kueue chose {domains}, railyard's own best domain: the test proves nothing"
            pods = wait_for(lambda: (p := _pods(cluster, ns)) and all(
                not p[n]["spec"].get("schedulingGates") for n in names) and p, 60, "Kueue to ungate gang kept")
            for name in names:
                selector = pods[name]["spec"]["nodeSelector"]
                assert _domain(selector) in domains and selector[GPU_PRESENT] == "true", selector

            try:
                placed = watch.wait_bound(names, BIND_TIMEOUT, "gang kept inside the domain Kueue assigned")
            except AssertionError as exc:
                reasons = {n: [c.get("message") for c in (p.get("status") or {}).get("conditions") or []
                               if c.get("type") == "PodScheduled"] for n, p in _pods(cluster, ns).items()}
                raise AssertionError(f"{exc}; railyard must plan inside each pod's nodeSelector (the eligibility "
                                     f"work); railyard: {cluster.extender_gangs().get(f'{ns}/kept')}; "
                                     f"scheduler: {reasons}") from None
            watch.assert_whole({"kept": names})
            labels = _node_labels(cluster)
            landed: dict[tuple[str, ...], int] = {}
            for name, node in placed.items():
                assert pods[name]["spec"]["nodeSelector"].items() <= labels[node].items(), (name, node)
                landed[_domain(labels[node])] = landed.get(_domain(labels[node]), 0) + 1
            assert landed == domains, (landed, domains)
            assert len(set(placed.values())) == 4, placed
    finally:
        _delete_all(cluster, ns)
