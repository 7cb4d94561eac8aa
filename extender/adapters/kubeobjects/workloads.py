"""Gangs found from the workload that made the pods, with no label of the user's: a JobSet
(one gang per restart attempt; a TrainJob runs through its JobSet), a LeaderWorkerSet group,
and an Indexed Job that opts in. docs/workloads.md gives each rule with its upstream source.

Keys, each checked against its project's source at the release the local cluster runs:

- JobSet v0.12.0 ``api/jobset/v1alpha2/jobset_types.go`` (label keys, ``ReplicatedJob``,
  ``DependsOn``), ``pkg/controllers/jobset_controller.go`` ``labelAndAnnotateObject`` (the keys
  every pod carries), ``pkg/webhooks/pod_webhook.go`` (exclusive placement: followers are
  refused until the completion-index-0 pod of their Job is scheduled).
- LeaderWorkerSet v0.9.0 ``api/leaderworkerset/v1/leaderworkerset_types.go`` (keys,
  ``StartupPolicy``), ``pkg/webhooks/pod_webhook.go`` (``group-key``, ``worker-index``),
  ``pkg/controllers/pod_controller.go`` (the worker StatefulSet is made only once the leader is
  scheduled with ``exclusive-topology``, or Ready with ``LeaderReady``).
- Kubernetes v1.37.2 ``pkg/apis/batch/types.go`` (``batch.kubernetes.io/job-name``,
  ``job-completion-index``), ``pkg/apis/batch/v1/defaults.go`` (a Job with no labels gets
  its pod template's labels).
- Kueue v0.17.0 ``pkg/controller/jobs/jobset/jobset_controller.go`` ``PodsCountPerReplica``:
  a Job's pods are ``min(parallelism, completions)``, parallelism defaulting to 1.
- Kubeflow Trainer v2.3.0 ``pkg/runtime/framework/plugins/coscheduling/coscheduling.go``: the
  PodGroup it makes for a TrainJob counts initializer pods that finish before the trainer
  pods exist, so its ``minMember`` is not read (``groups.py``).
"""

from __future__ import annotations

from typing import Any, Mapping

from extender.adapters.echo import shown
from extender.adapters.kubeobjects.fields import GROUP, OTHER, annotations_of, dict_at, list_at, str_at
from extender.core.model import EXCLUSIVE, LEAD_SIZE, MIN_MEMBER, RANK_LAYOUT, Declaration, GangRef

JOBSETS, LEADERWORKERSETS, JOBS = "jobsets", "leaderworkersets", "jobs"
"""Cache kinds of the workload objects read as group objects."""
TRAINJOBS = "trainjobs"
"""Not watched: names the rule that a TrainJob's PodGroup size is not read (``groups.py``)."""
KINDS = (JOBSETS, LEADERWORKERSETS, JOBS, TRAINJOBS)
"""Every workload kind railyard finds gangs from; each can be switched off (settings.workloads)."""


JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOBSET_NODE_SELECTOR = "alpha.jobset.sigs.k8s.io/node-selector"
"""With it, exclusive placement needs no webhook ordering (nodes are labelled beforehand)."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_LEADER_READY = "LeaderReady"
GANG_OPT_IN = "railyard.io/gang"
"""Label ``railyard.io/gang: "true"`` on an Indexed Job's pod template (and so on the Job):
the Job is one gang of its parallelism."""

LABELS = (
    (JOBSETS, (JOBSET_NAME,)),
    (LEADERWORKERSETS, (LWS_NAME,)),
    (JOBS, (GANG_OPT_IN, JOB_NAME)),
)
"""Per kind, labels every member of its workload's gang carries when it is created (``workload_ref``
needs each): the admission policy marks pods that carry all of a row (``admission.py``), and a
test holds the two together. A LeaderWorkerSet's ``group-key`` is not among them: its pod
webhook adds it after the policy has run, and a policy is run again only if it matched the first
time. A pod the policy marks that turns out to be no gang is released at once."""

MAX_NAME = 253
"""Longest object name Kubernetes accepts; a longer value is refused, not used as a key."""
MAX_INDEX_DIGITS = 9
"""Attempts and indexes are int32 upstream; 9 digits keep them below 2**31."""
MAX_COUNT = 100_000
"""Sizes above this (gangspec.MAX_MIN_MEMBER) are refused there; counting stops here."""


def workload_ref(labels: Mapping[str, str], ns: str, kinds: frozenset[str]) -> tuple[GangRef | None, tuple[str, ...]]:
    """The gang a pod belongs to by the workload that made it, or None; and the values that
    could not be read (each a problem of the pod, so of its gang)."""
    problems: list[str] = []
    if JOBSETS in kinds and JOBSET_NAME in labels:
        name, attempt, unread = jobset_attempt(labels)
        return GangRef(f"{ns}/{name}@{attempt}", True, JOBSETS, lineage=f"{ns}/{name}", group=f"{ns}/{name}",
                       workload=f"JobSet {ns}/{name} attempt {attempt}"), unread
    if LEADERWORKERSETS in kinds and LWS_GROUP_KEY in labels and LWS_NAME in labels:
        name = _name(labels[LWS_NAME], LWS_NAME, problems)
        index = _index(labels.get(LWS_GROUP_INDEX), LWS_GROUP_INDEX, problems)
        return GangRef(f"{ns}/{name}-{index}", True, LEADERWORKERSETS, group=f"{ns}/{name}",
                       workload=f"LeaderWorkerSet {ns}/{name} group {index}"), tuple(problems)
    if JOBS in kinds and GANG_OPT_IN in labels:
        value, job = labels[GANG_OPT_IN], labels.get(JOB_NAME, "")
        if value != "true":
            problems.append(f"label {GANG_OPT_IN} must be \"true\" (the pod's Job is its gang), got {shown(value)}")
        if not job:
            problems.append(f"label {GANG_OPT_IN} makes the pod's Job its gang, but the pod has no {JOB_NAME} "
                            f"label: put it on a Job's pod template")
            return None, tuple(problems)
        job = _name(job, JOB_NAME, problems)
        return GangRef(f"{ns}/{job}", True, JOBS, workload=f"Job {ns}/{job}"), tuple(problems)
    return None, ()


def jobset_attempt(labels: Mapping[str, str]) -> tuple[str, str, tuple[str, ...]]:
    """(JobSet name, restart attempt, problems) of a JobSet pod."""
    problems: list[str] = []
    name = _name(labels[JOBSET_NAME], JOBSET_NAME, problems)
    attempt = _index(labels.get(RESTART_ATTEMPT), RESTART_ATTEMPT, problems)
    return name, attempt, tuple(problems)


def attempt_of(ref: GangRef, labels: Mapping[str, str], kinds: frozenset[str]) -> tuple[GangRef, tuple[str, ...]]:
    """A gang the pod names itself, kept apart per JobSet restart attempt when the pod is a
    JobSet's: the user's group stays the gang, each attempt a new instance of it."""
    if JOBSETS not in kinds or JOBSET_NAME not in labels:
        return ref, ()
    name, attempt, problems = jobset_attempt(labels)
    ns = ref.key.partition("/")[0]
    return GangRef(f"{ref.key}@{attempt}", True, ref.group_kind, lineage=ref.key, group=ref.key,
                   workload=f"JobSet {ns}/{name} attempt {attempt}"), problems


def workload_declarations(labels: Mapping[str, str], annotations: Mapping[str, str],
                          kinds: frozenset[str]) -> tuple[Declaration, ...]:
    """What a workload's pod declares of its gang: a LeaderWorkerSet group's size and, with
    exclusive placement, its one lead (the leader)."""
    if LEADERWORKERSETS not in kinds or LWS_GROUP_KEY not in labels:
        return ()
    out = []
    if LWS_SIZE in annotations:
        out.append(Declaration(MIN_MEMBER, LWS_SIZE, annotations[LWS_SIZE], OTHER))
    if annotations.get(LWS_EXCLUSIVE):
        out.append(Declaration(LEAD_SIZE, f"{LWS_EXCLUSIVE} (the leader is scheduled before its workers exist)",
                               1, OTHER))
    return tuple(out)


def is_lead(labels: Mapping[str, str], annotations: Mapping[str, str], kinds: frozenset[str]) -> bool:
    """The pod's controller creates other members only once this one is scheduled: a
    LeaderWorkerSet leader (worker-index 0), or the completion-index-0 pod of a JobSet Job with
    exclusive placement by affinity. A lead binds first only if its gang declares a lead size."""
    if LEADERWORKERSETS in kinds and LWS_GROUP_KEY in labels:
        return labels.get(LWS_WORKER_INDEX) == "0"
    if JOBSETS in kinds and JOBSET_NAME in labels:
        # jobset@v0.12.0 pkg/webhooks/pod_webhook.go: by presence; the leader by the annotation.
        return (JOBSET_EXCLUSIVE in annotations and JOBSET_NODE_SELECTOR not in annotations
                and annotations.get(COMPLETION_INDEX) == "0")
    return False


def job_part(labels: Mapping[str, str], kinds: frozenset[str]) -> int | None:
    """A JobSet pod's Job, by its global index (``PodFacts.part``); None for other pods or an
    index that is not a whole number of at most 9 digits."""
    if JOBSETS not in kinds or JOBSET_NAME not in labels:
        return None
    value = labels.get(JOB_GLOBAL_INDEX, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= MAX_INDEX_DIGITS else None


# -- the workload objects, read as group objects -----------------------------------------------


def jobset_group(where: str, obj: Mapping[str, Any]) -> tuple[list[Declaration], list[str]]:
    """A JobSet (jobset.x-k8s.io/v1alpha2): its size is every replicatedJob's replicas x pods per
    Job, unless replicatedJobs start in stages (``dependsOn``); its lead size the Jobs placed
    exclusively by affinity (their completion-index-0 pods)."""
    spec = dict_at(obj, "spec")
    jobs = list_at(spec, "replicatedJobs")
    problems: list[str] = []
    on_set = annotations_of(obj)
    terms, total, leads = [], 0, 0
    staged = False
    shapes: list[tuple[str, int, int, str | None]] = []  # (name, replicas, pods per Job, exclusive key)
    for i, rj in enumerate(jobs):
        rj_name = str_at(rj, "name") or f"#{i}"
        template = dict_at(rj, "template")
        job_spec = dict_at(template, "spec")
        replicas = _count(rj, "replicas", 1, f"{where} spec.replicatedJobs[{rj_name}].replicas", problems)
        parallelism = _count(job_spec, "parallelism", 1, f"{where} replicatedJobs[{rj_name}] parallelism", problems)
        completions = _count(job_spec, "completions", parallelism,
                             f"{where} replicatedJobs[{rj_name}] completions", problems)
        pods = min(parallelism, completions)
        total = min(total + replicas * pods, MAX_COUNT + 1)
        terms.append(f"{rj_name} {replicas} x {pods}")
        staged = staged or bool(list_at(rj, "dependsOn"))
        key = _exclusive_by_affinity(on_set, dict_at(dict_at(template, "metadata"), "annotations"))
        if key is not None:
            leads += replicas if pods else 0
        shapes.append((rj_name, replicas, pods, key))
    exclusive = _exclusive_jobs(where, shapes, problems)
    declared: list[Declaration] = []
    if problems:
        return declared, problems
    if staged:
        # Stages start one after another (a stage waits for the one before to be Ready or
        # Complete): a size counting every stage would hold the first for members that cannot
        # exist yet. Each stage is planned whole once it has settled (gangs.settle_seconds).
        return declared, problems
    if jobs:
        declared.append(Declaration(MIN_MEMBER, f"{where} spec.replicatedJobs ({' + '.join(terms)} pods)", total,
                                    GROUP))
        # job-global-index counts the Jobs of every replicatedJob in spec order (jobset@v0.12.0
        # pkg/controllers/jobset_controller.go globalJobIndex): a pod's place in the gang.
        declared.append(Declaration(RANK_LAYOUT, f"{where} spec.replicatedJobs (Jobs x pods per Job, in order)",
                                    tuple((replicas, pods) for _, replicas, pods, _ in shapes), GROUP))
    if leads:
        declared.append(Declaration(LEAD_SIZE, f"{where} exclusive-topology ({leads} Jobs' completion-index-0 pods "
                                               f"are scheduled before their followers exist)", leads, GROUP))
    if exclusive is not None:
        declared.append(exclusive)
    return declared, problems


def _exclusive_jobs(where: str, shapes: list[tuple[str, int, int, str | None]],
                    problems: list[str]) -> Declaration | None:
    """With any Job placed exclusively by affinity, every Job is a part of the gang in a domain
    of its own at the exclusive-topology level (``EXCLUSIVE``). JobSet's webhook gives each
    such Job's leader anti-affinity to every other Job's pods in its domain (jobset@v0.12.0
    ``pod_webhook.go`` ``setExclusiveAffinities``), which keeps a Job without it out of those
    domains too: so it gets a domain of its own as well. Railyard's slices are of one size:
    Jobs of different sizes, or exclusive at different levels, are the gang's problem."""
    keys = sorted({key for _, replicas, _, key in shapes if key is not None and replicas})
    if not keys:
        return None
    jobs = [(name, replicas, pods) for name, replicas, pods, _ in shapes if replicas]
    sizes = sorted({pods for _, _, pods in jobs})
    if len(keys) > 1:
        problems.append(f"{where}: replicatedJobs are placed exclusively at different levels ({', '.join(keys)}); "
                        f"railyard places a JobSet's Jobs one per domain of a single level")
        return None
    if len(sizes) > 1 or not sizes[0]:
        shown_jobs = " + ".join(f"{name} {replicas} x {pods}" for name, replicas, pods in jobs)
        problems.append(f"{where}: exclusive placement of Jobs of different sizes ({shown_jobs} pods): railyard "
                        f"places each Job as a slice of one size in a domain of its own; make the Jobs equal, or "
                        f"use railyard.io/slice-size and railyard.io/slice-required-topology instead")
        return None
    count = sum(replicas for _, replicas, _ in jobs)
    return Declaration(EXCLUSIVE, f"{where} exclusive-topology {keys[0]} (one Job per domain: {count} Jobs of "
                                  f"{sizes[0]} pods, each pod's Job by {JOB_GLOBAL_INDEX})",
                       (keys[0], sizes[0]), GROUP)


def _exclusive_by_affinity(on_set: Mapping[str, Any], on_job: Mapping[str, Any]) -> str | None:
    """The exclusive-topology key of a Job's pods (jobset@v0.12.0 ``labelAndAnnotateObject``:
    the JobSet's exclusive-topology with its node-selector, then the replicatedJob template's),
    when the webhook places them by affinity (no node-selector strategy); else None."""
    pod: dict[str, Any] = {}
    for source in (on_set, on_job):
        if JOBSET_EXCLUSIVE in source:
            pod[JOBSET_EXCLUSIVE] = source[JOBSET_EXCLUSIVE]
            if JOBSET_NODE_SELECTOR in source:
                pod[JOBSET_NODE_SELECTOR] = source[JOBSET_NODE_SELECTOR]
    key = pod.get(JOBSET_EXCLUSIVE)
    if JOBSET_NODE_SELECTOR in pod or not isinstance(key, str):
        return None
    return key.strip() or None


def leaderworkerset_group(where: str, obj: Mapping[str, Any]) -> tuple[list[Declaration], list[str]]:
    """A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): each group's leader binds first when the
    workers are created only once it is Ready (``startupPolicy: LeaderReady``) or scheduled
    (``exclusive-topology``). Its size is on every pod (``leaderworkerset.sigs.k8s.io/size``)."""
    policy = str_at(dict_at(obj, "spec"), "startupPolicy")
    if policy == LWS_LEADER_READY:
        return [Declaration(LEAD_SIZE, f"{where} spec.startupPolicy LeaderReady (workers are created once the "
                                       f"leader is Ready)", 1, GROUP)], []
    if LWS_EXCLUSIVE in annotations_of(obj):  # lws@v0.9.0 pod_controller.go: by presence
        return [Declaration(LEAD_SIZE, f"{where} {LWS_EXCLUSIVE} (workers are created once the leader is "
                                       f"scheduled)", 1, GROUP)], []
    return [], []


def job_group(where: str, obj: Mapping[str, Any]) -> tuple[list[Declaration], list[str]]:
    """A Job labelled ``railyard.io/gang: "true"`` (batch/v1): min(parallelism, completions) pods."""
    spec = dict_at(obj, "spec")
    problems: list[str] = []
    parallelism = _count(spec, "parallelism", 1, f"{where} spec.parallelism", problems)
    completions = _count(spec, "completions", parallelism, f"{where} spec.completions", problems)
    if problems:
        return [], problems
    source = f"{where} spec.parallelism" if parallelism <= completions else f"{where} spec.completions"
    return [Declaration(MIN_MEMBER, source, min(parallelism, completions), GROUP)], []


# -- bounded readers -------------------------------------------------------------------------


def _name(value: str, key: str, problems: list[str]) -> str:
    if not value or len(value) > MAX_NAME or "/" in value or "@" in value:
        problems.append(f"label {key} must be an object name (1-{MAX_NAME} characters, no / or @), got {shown(value)}")
        return "?"
    return value


def _index(value: str | None, key: str, problems: list[str]) -> str:
    if value is None:
        problems.append(f"label {key} is missing")
        return "?"
    if not (value.isascii() and value.isdigit() and len(value) <= MAX_INDEX_DIGITS):
        problems.append(f"label {key} must be a whole number of at most {MAX_INDEX_DIGITS} digits, got {shown(value)}")
        return "?"
    return str(int(value))


def _count(obj: Mapping[str, Any], field: str, default: int, where: str, problems: list[str]) -> int:
    value = obj.get(field) if isinstance(obj, dict) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        problems.append(f"{where} must be a whole number from 0 to {MAX_COUNT}, got {shown(value)}")
        return default
    return value

