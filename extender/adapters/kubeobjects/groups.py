"""Pod group objects (PodGroups of each convention) to GroupFacts."""

from __future__ import annotations

from typing import Any, Mapping

from extender.adapters.kubeobjects.fields import dict_at, str_at
from extender.core.model import MIN_MEMBER, TIMEOUT, Declaration, GroupFacts


def podgroup_facts(pg: Mapping[str, Any]) -> GroupFacts:
    """A ``scheduling.x-k8s.io/v1alpha1`` PodGroup (scheduler-plugins coscheduling)."""
    meta, spec = dict_at(pg, "metadata"), dict_at(pg, "spec")
    key = f"{str_at(meta, 'namespace') or 'default'}/{str_at(meta, 'name')}"
    declared = []
    if spec.get("minMember") is not None:
        declared.append(Declaration(MIN_MEMBER, f"PodGroup {key} spec.minMember", spec["minMember"], 1))
    if spec.get("scheduleTimeoutSeconds") is not None:
        declared.append(Declaration(TIMEOUT, f"PodGroup {key} spec.scheduleTimeoutSeconds",
                                    spec["scheduleTimeoutSeconds"], 1))
    return GroupFacts(key, tuple(declared))
