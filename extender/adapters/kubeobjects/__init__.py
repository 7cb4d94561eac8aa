"""The one place that knows Kubernetes object shapes, label keys and annotations.

Translates Nodes, Pods and PodGroups (raw JSON dicts, camelCase, as the API server sends them)
into the core's facts, once, where they enter: the watch cache, the HTTP verbs, the gRPC
servicer and ``railyard plan`` each hold a ``Translator``. Never raises on odd input: a value
it cannot read becomes a problem of the gang or of the topology, with the offending value quoted.

    labels.py     topology label presets and level detection (the LabelScheme port)
    nodes.py      Node -> NodeFacts
    pods.py       Pod -> PodFacts (membership, rank, declarations)
    resources.py  effective requests and allocatable, quantities bounded
    placement.py  nodeSelector, node affinity, tolerations -> Eligibility
    groups.py     PodGroup -> GroupFacts
    fields.py     defensive accessors
"""

from __future__ import annotations

from typing import Any, Mapping

from extender.adapters.kubeobjects.groups import podgroup_facts
from extender.adapters.kubeobjects.labels import (
    CLIQUE,
    CLIQUE_CLUSTER,
    PRESETS,
    SCHEME,
    detect_levels,
    explicit_levels,
)
from extender.adapters.kubeobjects.nodes import node_facts
from extender.adapters.kubeobjects.pods import (
    DECLARING_ANNOTATIONS,
    GROUP_ANNOTATION,
    GROUP_LABELS,
    RANKS,
    gang_ref,
    pod_facts,
    pod_gpus,
    rank,
)
from extender.adapters.kubeobjects.placement import tolerations
from extender.core.model import GroupFacts, NodeFacts, PodFacts

__all__ = [
    "CLIQUE", "CLIQUE_CLUSTER", "DECLARING_ANNOTATIONS", "GROUP_ANNOTATION", "GROUP_LABELS", "PRESETS", "RANKS",
    "SCHEME", "Translator", "detect_levels", "explicit_levels", "gang_ref", "node_facts",
    "pod_facts", "pod_gpus", "podgroup_facts", "rank", "tolerations",
]


class Translator:
    """Kubernetes objects to facts, for one GPU resource name (setting placement.gpu_resource)."""

    def __init__(self, gpu_resource: str) -> None:
        self.gpu_resource = gpu_resource

    def node(self, obj: Mapping[str, Any]) -> NodeFacts:
        return node_facts(obj, self.gpu_resource)

    def pod(self, obj: Mapping[str, Any]) -> PodFacts:
        return pod_facts(obj, self.gpu_resource)

    def group(self, obj: Mapping[str, Any]) -> GroupFacts:
        return podgroup_facts(obj)
