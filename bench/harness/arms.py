"""The arms: which control plane each runs and which objects a job becomes.

Pods are the same in every arm (same name, GPUs, runtime, and the railyard gang labels and
annotations, inert without the extender), so the arms differ only in what the issue compares:

- A: kube-scheduler alone, no extender, ``percentageOfNodesToScore`` left to kube-scheduler's
  default (adaptive: every node below 100 nodes, else 50% - 1% per 125 nodes, at least 5% and
  100 nodes: 420 of 1,000, 500 of 5,000);
- A100: A with ``percentageOfNodesToScore: 100`` (what B's reference configuration sets), so
  A -> A100 is the cost of scoring every feasible node and A100 -> B the cost of the extender
  (issue 13);
- B: kube-scheduler + railyard with the reference configuration (``manifests/base/
  scheduler-config.yaml`` bound to the local cluster, ``extender/localcluster/config.py``);
  single pods name its profile ``railyard-sampled`` (feasible nodes for 5% of the cluster, at
  least 100: 100 of 1,000 nodes where A finds 420), gang members its profile ``railyard``
  (every node, as in A100);
- AREF: B without railyard: the reference profiles (best fit on GPUs, single pods on
  ``railyard-sampled``) with no extender, so A -> AREF is what the profiles cost and AREF -> B
  what railyard adds beside them (issue 21);
- B100: B with the single pods on the default profile too (every feasible node scored), so
  A100 -> B100 is the extender's cost at equal scoring, as A -> B is;
- C: kube-scheduler (the run's version) with native gang scheduling and topology-aware workload scheduling
  (feature gates ``GenericWorkload`` + ``TopologyAwareWorkloadScheduling``, API
  ``scheduling.k8s.io/v1beta1``): a Workload and a PodGroup per gang (``gang.minCount`` = pods,
  ``schedulingConstraints.topology[0].key`` = the required level; KEP-5732 has no preferred
  level), members name it in ``spec.schedulingGroup.podGroupName``;
- D: Kueue v0.17.0 with topology-aware scheduling (``cluster up --with-kueue``, its default
  gates) admitting every pod, kube-scheduler in its default configuration (as A) binding each
  pod where Kueue's TAS put it. One Topology (block > leaf > NVLink > hostname), one TAS
  ResourceFlavor, one ClusterQueue whose GPU quota is the whole cluster (so TAS capacity, not
  quota, decides), one LocalQueue. A gang is a Kueue pod group (label
  ``kueue.x-k8s.io/pod-group-name``, annotation ``kueue.x-k8s.io/pod-group-total-count``),
  ranked by label ``kueue.x-k8s.io/pod-group-pod-index``; a required / preferred level becomes
  ``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology`` (Kueue expresses
  both); no request gets no annotation (a TAS-only ClusterQueue then treats the gang as
  unconstrained). Single pods are Kueue workloads of one pod.

Gang members name the profile ``railyard`` in every arm but D (``GANG_PROFILE``): without the
extender a stock profile like ``default-scheduler``, so nothing changes but the label of
kube-scheduler's attempt counter, which then tells gang members from single pods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.scenario import HOSTNAME, LEVEL_KEYS
from bench.harness.workload import Job
from extender.localcluster import config as localconfig

NAMESPACE = "bench"
SCHEDULING_V1BETA1 = "/apis/scheduling.k8s.io/v1beta1"
NATIVE_GATES = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}
NATIVE_RUNTIME_CONFIG = ("scheduling.k8s.io/v1beta1=true",)

#: Arm D's Kueue objects (``kueue.x-k8s.io/v1beta2``, the storage version of v0.17.0) and the
#: pod labels and annotations Kueue reads (v0.17.0 ``pkg/controller/jobs/pod/constants``,
#: ``apis/kueue/v1beta2/topology_types.go``, ``pkg/controller/constants``).
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
KUEUE_QUEUE = "bench"
KUEUE_FLAVOR = "bench-gpu"
KUEUE_TOPOLOGY = "bench-topology"
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
#: A label every node of a topotext cluster carries: a TAS ResourceFlavor needs one nodeLabel.
KUEUE_NODE_LABELS = {"type": "kwok"}


#: The reference configuration's profile for pods that name no gang: a sample of feasible nodes
#: (5% of the cluster, at least 100) instead of every one (manifests/base/scheduler-config.yaml).
SAMPLED_PROFILE = "railyard-sampled"

#: The profile gang members name in every arm but D: the reference configuration's profile for
#: gangs (manifests/base/scheduler-config.yaml; B's ``default-scheduler`` is a copy of it), and
#: without the extender one of the stock profiles ``cluster up`` generates
#: (``localconfig.SCHEDULER_NAMES``), the same plugins as ``default-scheduler``. The scheduling is
#: the same; kube-scheduler's attempt counter, labelled by profile, then tells gang members from
#: single pods (issue 21). D's pods keep the default: Kueue's TAS is not run with another profile.
GANG_PROFILE = "railyard"

#: ``Arm.percentage_of_nodes_to_score``: run the configuration ``cluster up`` generates as is
#: (the reference configuration from manifests/, ``percentageOfNodesToScore: 100``).
AS_GENERATED = "as generated"


@dataclass(frozen=True)
class Arm:
    name: str
    title: str
    extender: bool = False
    native: bool = False
    feature_gates: dict[str, bool] = field(default_factory=dict)
    runtime_config: tuple[str, ...] = ()
    percentage_of_nodes_to_score: int | None | str = AS_GENERATED
    """``percentageOfNodesToScore`` in the scheduler configuration: a number, None to leave the
    key out (kube-scheduler's adaptive default), or ``AS_GENERATED``."""
    kueue: bool = False
    """Run Kueue (``cluster up --with-kueue``, TAS on) and submit every pod through it."""
    single_scheduler_name: str | None = None
    """``spec.schedulerName`` of the pods that name no gang (None: the default profile)."""
    gang_scheduler_name: str | None = GANG_PROFILE
    """``spec.schedulerName`` of gang members (None: the default profile)."""
    reference_profiles: bool = False
    """Without the extender, keep the reference configuration's profiles (best fit on GPUs,
    ``railyard-sampled``) instead of the stock ones ``cluster up --no-extender`` generates."""


ARMS = {
    "A": Arm("A", "kube-scheduler alone (default percentageOfNodesToScore)", percentage_of_nodes_to_score=None),
    "A100": Arm("A100", "kube-scheduler alone, percentageOfNodesToScore: 100", percentage_of_nodes_to_score=100),
    "B": Arm("B", "kube-scheduler + railyard (reference configuration; single pods on profile railyard-sampled)",
             extender=True, single_scheduler_name=SAMPLED_PROFILE),
    # B without railyard: A -> AREF is what the reference profiles cost, AREF -> B what railyard does.
    "AREF": Arm("AREF", "kube-scheduler alone with the reference profiles (best fit; single pods on railyard-sampled)",
                percentage_of_nodes_to_score=100, single_scheduler_name=SAMPLED_PROFILE, reference_profiles=True),
    "B100": Arm("B100", "kube-scheduler + railyard, single pods scoring every node too", extender=True),
    # C keeps the generated configuration (percentageOfNodesToScore: 100), as in every run so far.
    "C": Arm("C", "kube-scheduler native gang + topology-aware workload scheduling",
             native=True, feature_gates=NATIVE_GATES, runtime_config=NATIVE_RUNTIME_CONFIG),
    "D": Arm("D", "Kueue v0.17.0 TAS admits, kube-scheduler places (default configuration)",
             percentage_of_nodes_to_score=None, kueue=True, gang_scheduler_name=None),
}


def scheduler_config(arm: Arm) -> dict[str, Any] | None:
    """The KubeSchedulerConfiguration template ``cluster up --scheduler-config`` should get for
    ``arm``, or None for the one it generates. The template is the generated configuration with
    only ``percentageOfNodesToScore`` changed; ``cluster up`` binds its kubeconfig and, for an
    extender arm, its ``$(EXTENDER_URL)`` to the cluster."""
    if arm.percentage_of_nodes_to_score == AS_GENERATED:
        return None
    url = None if not (arm.extender or arm.reference_profiles) else localconfig.EXTENDER_URL_PLACEHOLDER + "/scheduler"
    config = localconfig.scheduler_config(Path("bound-by-cluster-up"), url)
    if not arm.extender:
        config.pop("extenders", None)
    if arm.percentage_of_nodes_to_score is None:
        config.pop("percentageOfNodesToScore", None)
    else:
        config["percentageOfNodesToScore"] = int(arm.percentage_of_nodes_to_score)
    return config


def nodes_to_find(percentage: int | None, nodes: int) -> int:
    """Feasible nodes kube-scheduler looks for before it stops filtering and scores them
    (``numFeasibleNodesToFind``, pkg/scheduler/schedule_one.go, v1.37.2), for ``percentage``
    None or 0 (the adaptive default) or a number."""
    if nodes < 100:
        return nodes
    if not percentage:
        percentage = max(50 - nodes // 125, 5)
    return max(nodes * percentage // 100, 100)


def pod(job: Job, index: int, arm: Arm) -> dict[str, Any]:
    """Member ``index`` of ``job`` as the arm's scheduler should see it."""
    name = job.name if job.kind == "single" else f"{job.name}-{index}"
    labels = {"bench.railyard.io/job": job.name}
    annotations: dict[str, str] = {}
    if job.runtime_s is not None:
        annotations["railyard.io/sim-runtime"] = f"{job.runtime_s:g}s"
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "trainer",
                        "resources": {"limits": {"nvidia.com/gpu": str(job.gpus)}}}],
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 0,
    }
    if job.priority_class:
        spec["priorityClassName"] = job.priority_class
    if job.kind == "single" and arm.single_scheduler_name:
        spec["schedulerName"] = arm.single_scheduler_name
    if job.kind == "gang" and arm.gang_scheduler_name:
        spec["schedulerName"] = arm.gang_scheduler_name
    if job.kind == "gang":
        labels["scheduling.x-k8s.io/pod-group"] = job.name
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        annotations["railyard.io/min-member"] = str(job.pods)
        if job.required:
            annotations["railyard.io/required-topology"] = LEVEL_KEYS[job.required]
        if job.preferred:
            annotations["railyard.io/preferred-topology"] = LEVEL_KEYS[job.preferred]
        if arm.native:
            spec["schedulingGroup"] = {"podGroupName": job.name}
        if arm.kueue:
            labels[KUEUE_GROUP_NAME] = job.name
            labels[KUEUE_POD_INDEX] = str(index)
            annotations[KUEUE_GROUP_TOTAL] = str(job.pods)
            if job.required:
                annotations[KUEUE_REQUIRED] = LEVEL_KEYS[job.required]
            if job.preferred:
                annotations[KUEUE_PREFERRED] = LEVEL_KEYS[job.preferred]
    if arm.kueue:
        labels[KUEUE_QUEUE_NAME] = KUEUE_QUEUE
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels, "annotations": annotations},
            "spec": spec}


def group_objects(job: Job, arm: Arm) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) to create before the members: arm C's Workload and PodGroup."""
    if not arm.native or job.kind != "gang":
        return []
    template: dict[str, Any] = {"name": "workers", "schedulingPolicy": {"gang": {"minCount": job.pods}}}
    if job.required:
        template["schedulingConstraints"] = {"topology": [{"key": LEVEL_KEYS[job.required]}]}
    base = f"{SCHEDULING_V1BETA1}/namespaces/{NAMESPACE}"
    workload = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": job.name, "namespace": NAMESPACE},
                "spec": {"podGroupTemplates": [template]}}
    group_spec = {k: v for k, v in template.items() if k != "name"}
    if job.priority_class:
        # Members must have the PodGroup's priority (the pod-group cycle checks it, v1.37.2).
        group_spec["priorityClassName"] = job.priority_class
    podgroup = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                "metadata": {"name": job.name, "namespace": NAMESPACE},
                "spec": {"workloadRef": {"workloadName": job.name, "templateName": "workers"}, **group_spec}}
    return [(f"{base}/workloads", workload), (f"{base}/podgroups", podgroup)]


def kueue_objects(arm: Arm, nodes: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) to create once before any pod, for a Kueue arm: the Topology
    (block > leaf > NVLink > hostname, so Kueue picks each pod's node), its ResourceFlavor, a
    ClusterQueue whose GPU quota is every GPU of ``nodes`` and the LocalQueue in ``NAMESPACE``
    (shapes as in Kueue's ``site/static/examples/tas/sample-queues.yaml``)."""
    if not arm.kueue:
        return []
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes)
    levels = [LEVEL_KEYS[w] for w in ("block", "leaf", "nvl")] + [HOSTNAME]

    def obj(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec}

    return [
        (f"{KUEUE_API}/topologies", obj("Topology", KUEUE_TOPOLOGY, {"levels": [{"nodeLabel": k} for k in levels]})),
        (f"{KUEUE_API}/resourceflavors", obj("ResourceFlavor", KUEUE_FLAVOR, {
            "nodeLabels": dict(KUEUE_NODE_LABELS), "topologyName": KUEUE_TOPOLOGY})),
        (f"{KUEUE_API}/clusterqueues", obj("ClusterQueue", KUEUE_QUEUE, {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": KUEUE_FLAVOR, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]})),
        (f"{KUEUE_API}/namespaces/{NAMESPACE}/localqueues",
         obj("LocalQueue", KUEUE_QUEUE, {"clusterQueue": KUEUE_QUEUE}, NAMESPACE)),
    ]
