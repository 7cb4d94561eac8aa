"""The one place that knows Kubernetes object shapes, label keys and annotations.

Translates Nodes, Pods and PodGroups (raw JSON dicts, camelCase, as the API server sends them)
into the core's facts, once, where they enter: the watch cache, the HTTP verbs, the gRPC
servicer and ``railyard plan`` each hold a ``Translator``. Never raises on odd input: a value
it cannot read becomes a problem of the gang or of the topology, with the offending value quoted.

    labels.py     topology label presets and level detection (the LabelScheme port)
    nodes.py      Node -> NodeFacts
    pods.py       Pod -> PodFacts (membership, rank, declarations)
    admission.py  the MutatingAdmissionPolicy that marks and gates gang members, from pods.py's table
    resources.py  effective requests and allocatable, quantities bounded
    placement.py  nodeSelector, node affinity, tolerations -> Eligibility
    groups.py     each convention's group object -> GroupFacts; the precedence table
    workloads.py  gangs found from the workload that made the pods (JobSet, LeaderWorkerSet,
                  an Indexed Job that opts in, TrainJob through its JobSet)
    dra.py        DeviceClass, ResourceSlice, ResourceClaim(Template) -> core.devices facts
    notes.py      a gang member's address -> the annotations railyard writes on its pod
    memo.py       a pod translated again only when what its facts are read from changed
    fields.py     defensive accessors
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from extender.adapters.kubeobjects.dra import (
    claim_template_facts,
    device_class_facts,
    resource_claim_facts,
    resource_slice_facts,
)
from extender.adapters.kubeobjects.groups import GROUP_APIS, podgroup_facts
from extender.adapters.kubeobjects.labels import (
    CLIQUE,
    CLIQUE_CLUSTER,
    PRESETS,
    SCHEME,
    detect_levels,
    explicit_levels,
)
from extender.adapters.kubeobjects.memo import PodMemo
from extender.adapters.kubeobjects.nodes import node_facts
from extender.adapters.kubeobjects.pods import (
    DECLARING_ANNOTATIONS,
    GATE,
    MEMBERSHIP,
    RANKS,
    binding_annotations,
    binding_mark,
    gang_ref,
    pod_facts,
    pod_gpus,
    rank,
)
from extender.adapters.kubeobjects.placement import tolerations
from extender.adapters.kubeobjects.resources import MARKER
from extender.adapters.kubeobjects.workloads import KINDS as WORKLOAD_KINDS
from extender.core.devices.facts import DraFacts
from extender.core.model import GroupFacts, NodeFacts, PodFacts

__all__ = [
    "CLIQUE", "CLIQUE_CLUSTER", "DECLARING_ANNOTATIONS", "DRA_KINDS", "GATE", "GROUP_APIS", "MARKER", "MEMBERSHIP",
    "PRESETS", "RANKS", "SCHEME", "Translator", "WORKLOAD_KINDS", "binding_annotations", "binding_mark", "detect_levels",
    "explicit_levels", "gang_ref",
    "node_facts",
    "pod_facts", "pod_gpus", "podgroup_facts", "rank", "tolerations",
]


class Translator:
    """Kubernetes objects to facts, for one GPU resource name (setting placement.gpu_resource),
    one mapping of Volcano's HyperNode tiers to levels (placement.volcano_tiers) and the
    workload kinds switched on (settings.workloads, ``WORKLOAD_KINDS``)."""

    def __init__(self, gpu_resource: str, volcano_tiers: Sequence[str] = (),
                 workloads: Iterable[str] = WORKLOAD_KINDS) -> None:
        self.gpu_resource = gpu_resource
        self.volcano_tiers = tuple(volcano_tiers)
        self.workloads = frozenset(workloads)
        self._pods = PodMemo()

    def node(self, obj: Mapping[str, Any]) -> NodeFacts:
        return node_facts(obj, self.gpu_resource)

    def pod(self, obj: Mapping[str, Any], keep: bool = False) -> PodFacts:
        """``keep``: remember the facts for the pod's next event (the watch: pods that exist);
        a verb call only reads what the watch kept (``memo``)."""
        return self._pods.facts(obj, lambda: pod_facts(obj, self.gpu_resource, self.workloads), keep)

    def group(self, obj: Mapping[str, Any], kind: str | None = None) -> GroupFacts:
        """A group object of ``kind`` (``GROUP_APIS``), or of the kind its apiVersion names."""
        return podgroup_facts(obj, kind, self.volcano_tiers, self.workloads)

    def dra(self, kind: str, obj: Mapping[str, Any]) -> DraFacts:
        """A ``resource.k8s.io`` object of ``kind`` (``DeviceClass``, ``ResourceSlice``,
        ``ResourceClaim``, ``ResourceClaimTemplate``)."""
        return DRA_KINDS[kind](obj)


DRA_KINDS: dict[str, Callable[[Mapping[str, Any]], DraFacts]] = {
    "DeviceClass": device_class_facts,
    "ResourceSlice": resource_slice_facts,
    "ResourceClaim": resource_claim_facts,
    "ResourceClaimTemplate": claim_template_facts,
}
