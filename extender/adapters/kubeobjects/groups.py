"""Pod group objects of each convention to GroupFacts, and the one precedence table.

A pod's own convention decides which group object it reads (``pods.gang_ref``): a pod that
names its group with Volcano's annotation reads the Volcano PodGroup of that name, never a KAI
or scheduler-plugins PodGroup that shares its namespace and name (``GroupFacts.id``).

Where a gang's size, timeout and topology come from; lower precedence wins, and members that
disagree at the winning precedence are a problem of the gang (``core.gangs.gangspec``):

  0 RAILYARD  pod annotations railyard.io/min-member, railyard.io/timeout-seconds,
              railyard.io/required-topology, railyard.io/preferred-topology,
              railyard.io/preferred-topology-wait-seconds (no group object declares a wait),
              railyard.io/exclusive-topology,
              railyard.io/slice-size, railyard.io/slice-required-topology
  1 GROUP     the group object the pod's convention names:
      scheduler-plugins  scheduling.x-k8s.io/v1alpha1 PodGroup: spec.minMember (size),
                         spec.scheduleTimeoutSeconds (timeout)
      Kubernetes         scheduling.k8s.io/v1beta1 PodGroup: spec.schedulingPolicy.gang.minCount
                         (size), spec.schedulingConstraints.topology[0].key (required)
      Volcano            scheduling.volcano.sh/v1beta1 PodGroup: spec.minMember (size; 0 = no
                         gang, so undeclared), spec.networkTopology in hard mode (the default):
                         highestTierName, else highestTierAllowed through placement.volcano_tiers
                         (required); soft mode asks for nothing railyard does not do anyway
      KAI                scheduling.run.ai/v2alpha2 PodGroup: spec.minMember (size),
                         spec.topologyConstraint.requiredTopologyLevel / preferredTopologyLevel
      JobSet             jobset.x-k8s.io/v1alpha2: sum of replicas x min(parallelism, completions)
                         (size; none with dependsOn), Jobs placed exclusively by affinity (leads;
                         each Job a slice in a domain of its own: exclusive)
      LeaderWorkerSet    leaderworkerset.x-k8s.io/v1: spec.startupPolicy LeaderReady or
                         exclusive-topology (1 lead)
      Job                batch/v1, labelled railyard.io/gang=true: min(parallelism, completions)
  2 OTHER     pod annotations of a convention without a group object (Kueue), or of a workload:
              leaderworkerset.sigs.k8s.io/size (size), leaderworkerset.sigs.k8s.io/exclusive-topology
              (1 lead), kueue.x-k8s.io/pod-group-total-count (size), kueue.x-k8s.io/podset-required-topology,
              kueue.x-k8s.io/podset-preferred-topology, kueue.x-k8s.io/podset-slice-size,
              kueue.x-k8s.io/podset-slice-required-topology
  nowhere     size: the members seen, planned once none is new for gangs.settle_seconds;
              timeout: gangs.default_timeout_seconds; topology: as tight as the gang fits

Field names were checked against each project's source: scheduler-plugins apis/scheduling/
v1alpha1; Kubernetes k8s.io/api v0.37.2 scheduling/v1beta1/types.go; volcano-sh/apis v1.15.0
pkg/apis/scheduling/v1beta1/types.go; NVIDIA/KAI-Scheduler v0.13.0
pkg/apis/scheduling/v2alpha2/podgroup_types.go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from extender.adapters.kubeobjects.fields import GROUP, OTHER, RAILYARD, dict_at, list_at, str_at
from extender.adapters.kubeobjects.workloads import (
    GANG_OPT_IN,
    JOBS,
    JOBSETS,
    KINDS,
    LEADERWORKERSETS,
    TRAINJOBS,
    job_group,
    jobset_group,
    leaderworkerset_group,
)
from extender.core.model import MIN_MEMBER, PREFERRED, REQUIRED, TIMEOUT, Declaration, GroupFacts


SCHEDULER_PLUGINS = "podgroups"
KUBERNETES = "podgroups.scheduling.k8s.io"
VOLCANO = "podgroups.scheduling.volcano.sh"
KAI = "podgroups.scheduling.run.ai"
TRAINER_GROUP = "trainer.kubeflow.org/"
"""Kubeflow Trainer v2's API group (trainer@v2.3.0 pkg/apis/trainer/v1alpha1)."""


@dataclass(frozen=True)
class GroupApi:
    """One convention's group object: where it is served and how it is read."""

    kind: str
    """The watch cache's name for the kind, ``GroupFacts.kind`` and ``GangRef.group_kind``."""
    api_version: str
    title: str
    """How reasons name an object of this kind: ``<title> <ns>/<name> <field>``."""
    read: Callable[[str, Mapping[str, Any], Sequence[str]], tuple[list[Declaration], list[str]]]
    """(``<title> <ns>/<name>``, the object, placement.volcano_tiers) -> (declarations, problems)."""
    plural: str = "podgroups"
    """The resource's name in its API's path."""
    label_selector: str = ""
    """Only objects that match it are watched (an opt-in label)."""
    workload: str = ""
    """The ``workloads.KINDS`` name that switches the kind on; empty: always on."""


def _scheduler_plugins(where: str, obj: Mapping[str, Any], tiers: Sequence[str]):
    spec = dict_at(obj, "spec")
    declared = []
    if spec.get("minMember") is not None:
        declared.append(Declaration(MIN_MEMBER, f"{where} spec.minMember", spec["minMember"], GROUP))
    if spec.get("scheduleTimeoutSeconds") is not None:
        declared.append(Declaration(TIMEOUT, f"{where} spec.scheduleTimeoutSeconds",
                                    spec["scheduleTimeoutSeconds"], GROUP))
    return declared, []


def _kubernetes(where: str, obj: Mapping[str, Any], tiers: Sequence[str]):
    spec = dict_at(obj, "spec")
    declared, problems = [], []
    gang = dict_at(dict_at(spec, "schedulingPolicy"), "gang")
    if gang.get("minCount") is not None:
        declared.append(Declaration(MIN_MEMBER, f"{where} spec.schedulingPolicy.gang.minCount",
                                    gang["minCount"], GROUP))
    topology = list_at(dict_at(spec, "schedulingConstraints"), "topology")
    if len(topology) > 1:
        problems.append(f"{where} spec.schedulingConstraints.topology lists {len(topology)} constraints; "
                        f"railyard reads one")
    key = str_at(topology[0], "key") if topology else ""
    if key:
        declared.append(Declaration(REQUIRED, f"{where} spec.schedulingConstraints.topology[0].key", key, GROUP))
    return declared, problems


def _volcano(where: str, obj: Mapping[str, Any], tiers: Sequence[str]) -> tuple[list[Declaration], list[str]]:
    spec = dict_at(obj, "spec")
    declared: list[Declaration] = []
    problems: list[str] = []
    if spec.get("minMember") not in (None, 0):  # Volcano's minMember 0 asks for no gang
        declared.append(Declaration(MIN_MEMBER, f"{where} spec.minMember", spec["minMember"], GROUP))
    topo = dict_at(spec, "networkTopology")
    mode = str_at(topo, "mode") or "hard"  # the CRD's default
    name, tier = str_at(topo, "highestTierName"), topo.get("highestTierAllowed")
    if not topo or mode == "soft" or (not name and tier is None):
        # soft: as close as possible, never a bound: what railyard does for every gang.
        # hard with neither field: Volcano sets no bound either (JobInfo.IsHardTopologyMode).
        return declared, problems
    field = f"{where} spec.networkTopology"
    if mode != "hard":
        problems.append(f"{field}.mode must be hard or soft, got {mode!r}")
    elif name:
        declared.append(Declaration(REQUIRED, f"{field}.highestTierName", name, GROUP))
    elif isinstance(tier, int) and not isinstance(tier, bool) and 1 <= tier <= len(tiers):
        declared.append(Declaration(REQUIRED, f"{field}.highestTierAllowed", tiers[tier - 1], GROUP))
    else:
        problems.append(
            f"{field}.highestTierAllowed {tier!r} (hard) names a HyperNode tier railyard cannot match to "
            f"a topology level: placement.volcano_tiers maps {len(tiers)} tier{'s' if len(tiers) != 1 else ''}"
            f"{' (' + ', '.join(tiers) + ')' if tiers else ''}; list the node label key of tier 1, 2, ... "
            f"there, or set highestTierName")
    return declared, problems


def _kai(where: str, obj: Mapping[str, Any], tiers: Sequence[str]):
    spec = dict_at(obj, "spec")
    declared = []
    if spec.get("minMember") is not None:
        declared.append(Declaration(MIN_MEMBER, f"{where} spec.minMember", spec["minMember"], GROUP))
    constraint = dict_at(spec, "topologyConstraint")
    for role, field in ((REQUIRED, "requiredTopologyLevel"), (PREFERRED, "preferredTopologyLevel")):
        if str_at(constraint, field):
            declared.append(Declaration(role, f"{where} spec.topologyConstraint.{field}", constraint[field], GROUP))
    return declared, []


GROUP_APIS = (
    GroupApi(SCHEDULER_PLUGINS, "scheduling.x-k8s.io/v1alpha1", "PodGroup", _scheduler_plugins),
    GroupApi(KUBERNETES, "scheduling.k8s.io/v1beta1", "Kubernetes PodGroup", _kubernetes),
    GroupApi(VOLCANO, "scheduling.volcano.sh/v1beta1", "Volcano PodGroup", _volcano),
    GroupApi(KAI, "scheduling.run.ai/v2alpha2", "KAI PodGroup", _kai),
    GroupApi(JOBSETS, "jobset.x-k8s.io/v1alpha2", "JobSet", lambda where, obj, _: jobset_group(where, obj),
             plural="jobsets", workload=JOBSETS),
    GroupApi(LEADERWORKERSETS, "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet",
             lambda where, obj, _: leaderworkerset_group(where, obj), plural="leaderworkersets",
             workload=LEADERWORKERSETS),
    GroupApi(JOBS, "batch/v1", "Job", lambda where, obj, _: job_group(where, obj), plural="jobs",
             label_selector=f"{GANG_OPT_IN}=true", workload=JOBS),
)
"""Every group object railyard reads; each is watched only while its API is served (and its
workload kind is switched on)."""
BY_KIND = {g.kind: g for g in GROUP_APIS}
BY_API_VERSION = {g.api_version: g for g in GROUP_APIS}


def podgroup_facts(pg: Mapping[str, Any], kind: str | None = None, volcano_tiers: Sequence[str] = (),
                   kinds: frozenset[str] = frozenset(KINDS)) -> GroupFacts:
    """A group object of ``kind`` (a ``GROUP_APIS`` kind), or of the kind its apiVersion names
    (a file given to ``railyard plan``; no apiVersion: scheduler-plugins). An object of an API
    railyard does not read gets kind ``<apiVersion>``, which no pod names.

    A PodGroup that Kubeflow Trainer made for a TrainJob (owned by it) has its size dropped
    (workload kind ``trainjobs``): it counts the initializer pods, which finish before the
    trainer pods exist, so it could never be reached; the gang is then sized as it settles."""
    api = BY_KIND.get(kind) if kind else BY_API_VERSION.get(str_at(pg, "apiVersion") or GROUP_APIS[0].api_version)
    meta = dict_at(pg, "metadata")
    key = f"{str_at(meta, 'namespace') or 'default'}/{str_at(meta, 'name')}"
    if api is None:
        return GroupFacts(key, kind=kind or str_at(pg, "apiVersion"))
    declared, problems = api.read(f"{api.title} {key}", pg, tuple(volcano_tiers))
    if TRAINJOBS in kinds and _owned_by_trainjob(meta):
        declared = [d for d in declared if d.role != MIN_MEMBER]
    return GroupFacts(key, tuple(declared), api.kind, tuple(problems))


def _owned_by_trainjob(meta: Mapping[str, Any]) -> bool:
    return any(str_at(o, "kind") == "TrainJob" and str_at(o, "apiVersion").startswith(TRAINER_GROUP)
               for o in list_at(meta, "ownerReferences"))
