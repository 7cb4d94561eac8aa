"""Pods to PodFacts: group membership, rank, what they declare; requests (resources.py) and
where they may run (placement.py)."""

from __future__ import annotations

from typing import Any, Mapping

from extender.adapters.kubeobjects.fields import annotations_of, dict_at, labels_of, str_at
from extender.adapters.kubeobjects.placement import eligibility
from extender.adapters.kubeobjects.resources import pod_requests
from extender.core.model import (
    MIN_MEMBER,
    PREFERRED,
    REQUIRED,
    TIMEOUT,
    Declaration,
    GangRef,
    PodFacts,
)


GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
RANKS = (
    ("jobset.sigs.k8s.io/job-index", "batch.kubernetes.io/job-completion-index"),
    ("batch.kubernetes.io/job-completion-index",),
    ("training.kubeflow.org/replica-index",),
    ("leaderworkerset.sigs.k8s.io/worker-index",),
    ("kueue.x-k8s.io/pod-group-pod-index",),
)
"""Rank sources, first match wins; a JobSet pod's rank is (job index, completion index)."""
DECLARING_ANNOTATIONS = (
    # (annotation, role, precedence); a PodGroup's own fields come at precedence 1.
    ("railyard.io/min-member", MIN_MEMBER, 0),
    ("kueue.x-k8s.io/pod-group-total-count", MIN_MEMBER, 2),
    ("railyard.io/timeout-seconds", TIMEOUT, 0),
    ("railyard.io/required-topology", REQUIRED, 0),
    ("kueue.x-k8s.io/podset-required-topology", REQUIRED, 1),
    ("railyard.io/preferred-topology", PREFERRED, 0),
    ("kueue.x-k8s.io/podset-preferred-topology", PREFERRED, 1),
)
"""Gang-level values a pod declares. Precedence, lowest first:
  min-member: annotation railyard.io/min-member > PodGroup spec.minMember >
              annotation kueue.x-k8s.io/pod-group-total-count > the members seen;
  timeout:    annotation railyard.io/timeout-seconds > PodGroup spec.scheduleTimeoutSeconds >
              setting gangs.default_timeout_seconds;
  required:   railyard.io/required-topology > kueue.x-k8s.io/podset-required-topology;
  preferred:  railyard.io/preferred-topology > kueue.x-k8s.io/podset-preferred-topology."""


def gang_ref(pod: Mapping[str, Any]) -> GangRef:
    """``<ns>/<group>``, or ``<ns>/<pod>`` (not named) for a pod that names no group."""
    meta = dict_at(pod, "metadata")
    ns = str_at(meta, "namespace") or "default"
    labels, annotations = labels_of(pod), annotations_of(pod)
    for key in GROUP_LABELS:
        if labels.get(key):
            return GangRef(f"{ns}/{labels[key]}", True)
    if annotations.get(GROUP_ANNOTATION):
        return GangRef(f"{ns}/{annotations[GROUP_ANNOTATION]}", True)
    group = str_at(dict_at(dict_at(pod, "spec"), "schedulingGroup"), "podGroupName")
    if group:
        return GangRef(f"{ns}/{group}", True)
    return GangRef(f"{ns}/{str_at(meta, 'name')}", False)


def pod_facts(pod: Mapping[str, Any], gpu_resource: str) -> PodFacts:
    meta, spec = dict_at(pod, "metadata"), dict_at(pod, "spec")
    annotations = annotations_of(pod)
    gpus, requests, request_problems = pod_requests(pod, gpu_resource)
    where, where_problems = eligibility(pod, requests)
    return PodFacts(
        namespace=str_at(meta, "namespace") or "default",
        name=str_at(meta, "name"),
        uid=str_at(meta, "uid"),
        gang=gang_ref(pod),
        node=str_at(spec, "nodeName"),
        phase=str_at(dict_at(pod, "status"), "phase"),
        gpus=gpus,
        rank=rank(pod),
        declarations=tuple(Declaration(role, key, annotations[key], precedence)
                           for key, role, precedence in DECLARING_ANNOTATIONS if key in annotations),
        eligibility=where,
        problems=request_problems + where_problems,
    )


def pod_gpus(pod: Mapping[str, Any], gpu_resource: str) -> int:
    """The pod's effective GPU request, as Kubernetes computes it (0 when unreadable: the
    pod's PodFacts carries the problem)."""
    return pod_requests(pod, gpu_resource)[0]


def rank(pod: Mapping[str, Any]) -> tuple[int, ...] | None:
    labels, annotations = labels_of(pod), annotations_of(pod)
    for keys in RANKS:
        values = [labels.get(k, annotations.get(k)) for k in keys]
        if all(v is not None and v.isascii() and v.isdigit() and len(v) <= 9 for v in values):
            return tuple(int(v) for v in values)
    return None
