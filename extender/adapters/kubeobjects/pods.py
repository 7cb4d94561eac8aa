"""Pods to PodFacts: group membership, rank, what they declare; requests (resources.py) and
where they may run (placement.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from extender.adapters.kubeobjects.dra import pod_claims
from extender.adapters.echo import shown
from extender.adapters.kubeobjects.fields import annotations_of, dict_at, labels_of, str_at
from extender.adapters.kubeobjects.groups import KAI, KUBERNETES, OTHER, RAILYARD, SCHEDULER_PLUGINS, VOLCANO
from extender.adapters.kubeobjects.notes import address_annotations, told_rails, told_rank
from extender.adapters.kubeobjects.placement import eligibility
from extender.adapters.kubeobjects.resources import pod_requests
from extender.adapters.kubeobjects.workloads import (
    KINDS,
    attempt_of,
    is_lead,
    job_part,
    workload_declarations,
    workload_ref,
)
from extender.core.model import (
    EXCLUSIVE_DOMAIN,
    MIN_MEMBER,
    PREEMPT_LOWER,
    PREEMPT_NEVER,
    PREFERRED,
    PREFERRED_WAIT,
    REQUIRED,
    SLICE_LEVEL,
    SLICE_SIZE,
    TIMEOUT,
    BindingMark,
    Declaration,
    GangRef,
    PodFacts,
)


MEMBERSHIP = (
    # (where the pod says it, key, the group object its convention names); first match wins
    ("label", "scheduling.x-k8s.io/pod-group", SCHEDULER_PLUGINS),   # scheduler-plugins coscheduling
    ("label", "kueue.x-k8s.io/pod-group-name", ""),                  # Kueue: no group object
    ("annotation", "scheduling.k8s.io/group-name", VOLCANO),          # Volcano (its scheduler reads only this)
    ("field", "spec.schedulingGroup.podGroupName", KUBERNETES),      # Kubernetes 1.36+ Workload API
    ("annotation", "pod-group-name", KAI),                           # KAI (its scheduler reads the annotation)
    ("label", "pod-group-name", KAI),
)
"""How a pod names its gang, and so which group object it reads."""

KUBEFLOW_INDEX, KUBEFLOW_ROLE = "training.kubeflow.org/replica-index", "training.kubeflow.org/job-role"
"""Kubeflow training-operator v1.9.4 (``pkg/controller.v1/common/pod.go``): each replica type
counts its index from 0, and only the master carries ``job-role: master``."""
RANKS = (
    # job-global-index, not job-index: job-index restarts at 0 in each replicatedJob.
    ("jobset.sigs.k8s.io/job-global-index", "batch.kubernetes.io/job-completion-index"),
    ("batch.kubernetes.io/job-completion-index",),
    (KUBEFLOW_INDEX,),  # after the master (rank())
    ("leaderworkerset.sigs.k8s.io/worker-index",),
    ("kueue.x-k8s.io/pod-group-pod-index",),
)
"""Rank sources, first match wins; a JobSet pod's rank is (global Job index, completion index)."""
DECLARING_ANNOTATIONS = (
    # (annotation, role, precedence); the precedence table is in groups.py.
    ("railyard.io/min-member", MIN_MEMBER, RAILYARD),
    ("kueue.x-k8s.io/pod-group-total-count", MIN_MEMBER, OTHER),
    ("railyard.io/timeout-seconds", TIMEOUT, RAILYARD),
    ("railyard.io/required-topology", REQUIRED, RAILYARD),
    ("kueue.x-k8s.io/podset-required-topology", REQUIRED, OTHER),
    ("railyard.io/preferred-topology", PREFERRED, RAILYARD),
    ("kueue.x-k8s.io/podset-preferred-topology", PREFERRED, OTHER),
    ("railyard.io/preferred-topology-wait-seconds", PREFERRED_WAIT, RAILYARD),
    ("railyard.io/exclusive-topology", EXCLUSIVE_DOMAIN, RAILYARD),
    ("railyard.io/slice-size", SLICE_SIZE, RAILYARD),
    # Kueue's PodSet slice annotations (apis/kueue/v1beta2/topology_types.go, v0.17.0).
    ("kueue.x-k8s.io/podset-slice-size", SLICE_SIZE, OTHER),
    ("railyard.io/slice-required-topology", SLICE_LEVEL, RAILYARD),
    ("kueue.x-k8s.io/podset-slice-required-topology", SLICE_LEVEL, OTHER),
)
"""Gang-level values a pod declares itself (``groups.py`` has the whole precedence table)."""


def gang_ref(pod: Mapping[str, Any], kinds: frozenset[str] = frozenset(KINDS)) -> tuple[GangRef, tuple[str, ...]]:
    """``<ns>/<group>`` and the kind of group object it names; else the gang of the workload
    that made the pod (``workloads``, for the ``kinds`` switched on); else ``<ns>/<pod>`` (not
    named). With the values that could not be read."""
    meta = dict_at(pod, "metadata")
    ns = str_at(meta, "namespace") or "default"
    labels = labels_of(pod)
    found = {"label": labels, "annotation": annotations_of(pod),
             "field": {"spec.schedulingGroup.podGroupName":
                       str_at(dict_at(dict_at(pod, "spec"), "schedulingGroup"), "podGroupName")}}
    for where, key, kind in MEMBERSHIP:
        group = found[where].get(key)
        if group:
            named, problems = attempt_of(GangRef(f"{ns}/{group}", True, kind), labels, kinds)
            return replace(named, pod_group_cycle=bool(found["field"]["spec.schedulingGroup.podGroupName"])), problems
    ref, problems = workload_ref(labels, ns, kinds)
    return ref or GangRef(f"{ns}/{str_at(meta, 'name')}", False), problems


GATE = "railyard.io/gang"
"""The scheduling gate the admission policy (``admission.py``) puts on a gang member asking for
GPUs; railyard lifts it for the whole gang once the gang is planned (``service.release``)."""

BINDING = "railyard.io/binding"
"""Written by railyard on a member before its Binding: ``{"round": ..., "node": ..., "size": N}``,
beside the member's address (``notes.address_annotations``)."""
MAX_MARK_CHARS = 512


def binding_annotations(mark: BindingMark) -> dict[str, str]:
    """Everything railyard writes on a member before its Binding, in one merge patch."""
    round_ = json.dumps({"round": mark.round, "node": mark.node, "size": mark.size}, separators=(",", ":"))
    return {BINDING: round_, **(address_annotations(mark.address) if mark.address is not None else {})}


def binding_mark(annotations: Mapping[str, str]) -> BindingMark | None:
    """The Binding round railyard wrote on the pod, or None (absent or unreadable: never trusted
    further than its shape; a pod's creator could write anything here)."""
    raw = annotations.get(BINDING)
    if not raw or len(raw) > MAX_MARK_CHARS:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    r, node, size = doc.get("round"), doc.get("node"), doc.get("size")
    if not (isinstance(r, str) and r and isinstance(node, str) and node and isinstance(size, int)
            and not isinstance(size, bool) and 0 < size <= 100_000):
        return None
    return BindingMark(r, node, size)


def pod_facts(pod: Mapping[str, Any], gpu_resource: str, kinds: frozenset[str] = frozenset(KINDS)) -> PodFacts:
    meta, spec = dict_at(pod, "metadata"), dict_at(pod, "spec")
    labels, annotations = labels_of(pod), annotations_of(pod)
    gang, gang_problems = gang_ref(pod, kinds)
    gpus, requests, request_problems = pod_requests(pod, gpu_resource)
    where, where_problems = eligibility(pod, requests)
    priority, policy, priority_problems = preemption_facts(spec)
    gates = scheduling_gates(spec)
    return PodFacts(
        namespace=str_at(meta, "namespace") or "default",
        name=str_at(meta, "name"),
        uid=str_at(meta, "uid"),
        gang=gang,
        node=str_at(spec, "nodeName"),
        phase=str_at(dict_at(pod, "status"), "phase"),
        gpus=gpus,
        rank=rank(pod),
        declarations=tuple(Declaration(role, key, annotations[key], precedence)
                           for key, role, precedence in DECLARING_ANNOTATIONS if key in annotations)
        + workload_declarations(labels, annotations, kinds),
        eligibility=where,
        problems=gang_problems + request_problems + where_problems + priority_problems,
        binding=binding_mark(annotations),
        told_rank=told_rank(annotations) if BINDING in annotations else None,
        told_rails=told_rails(annotations) if BINDING in annotations else (),
        claims=pod_claims(pod),
        priority=priority,
        preemption_policy=policy,
        gated=GATE in gates,
        held_by=tuple(g for g in gates if g != GATE),
        lead=is_lead(labels, annotations, kinds),
        part=job_part(labels, kinds),
    )


def scheduling_gates(spec: Mapping[str, Any]) -> list[str]:
    """The names in ``spec.schedulingGates`` (at most 64 read: the API server allows far fewer in practice)."""
    raw = spec.get("schedulingGates")
    gates = raw[:64] if isinstance(raw, list) else []
    return [str(g["name"])[:253] for g in gates if isinstance(g, dict) and isinstance(g.get("name"), str)]


def preemption_facts(spec: Mapping[str, Any]) -> tuple[int, str, tuple[str, ...]]:
    """(``spec.priority``, ``spec.preemptionPolicy``, problems). The API server fills both at
    admission from the pod's PriorityClass (k8s.io/api/core/v1 PodSpec: priority is an int32,
    preemptionPolicy ``PreemptLowerPriority`` by default); a file may hold anything."""
    problems = []
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        problems.append(f"spec.priority must be a 32-bit integer, got {shown(priority)}")
        priority = 0
    policy = spec.get("preemptionPolicy") or PREEMPT_LOWER
    if policy not in (PREEMPT_LOWER, PREEMPT_NEVER):
        problems.append(f"spec.preemptionPolicy must be {PREEMPT_LOWER} or {PREEMPT_NEVER}, got {shown(policy)}")
        policy = PREEMPT_NEVER  # a pod whose policy cannot be read preempts nothing
    return priority, policy, tuple(problems)


def pod_gpus(pod: Mapping[str, Any], gpu_resource: str) -> int:
    """The pod's effective GPU request, as Kubernetes computes it (0 when unreadable: the
    pod's PodFacts carries the problem)."""
    return pod_requests(pod, gpu_resource)[0]


def rank(pod: Mapping[str, Any]) -> tuple[int, ...] | None:
    labels, annotations = labels_of(pod), annotations_of(pod)
    for keys in RANKS:
        values = [labels.get(k, annotations.get(k)) for k in keys]
        if all(v is not None and v.isascii() and v.isdigit() and len(v) <= 9 for v in values):
            found = tuple(int(v) for v in values if v is not None)
            if keys == (KUBEFLOW_INDEX,):  # the master first, then the workers (their indexes restart at 0)
                return (0 if labels.get(KUBEFLOW_ROLE) == "master" else 1, *found)
            return found
    return None
