"""The one place that knows Kubernetes object shapes, label keys and annotations.

Translates Nodes, Pods and PodGroups (raw JSON dicts, camelCase, as the API server sends them)
into the core's facts, once, where they enter: the watch cache, the HTTP verbs, the gRPC
servicer and ``railyard plan`` each hold a ``Translator``. Never raises on odd input: a value
it cannot read becomes a problem of the gang or of the topology, with the offending value quoted.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from extender.core.model import (
    MIN_MEMBER,
    PREFERRED,
    REQUIRED,
    TIMEOUT,
    Declaration,
    GangRef,
    GroupFacts,
    Level,
    LevelChoice,
    NodeFacts,
    PodFacts,
    Taint,
    Toleration,
)

# -- topology label presets (broadest level first) ------------------------------------------

CLIQUE = "nvidia.com/gpu.clique"
CLIQUE_CLUSTER = "nvidia.com/gpu.clique:cluster"
"""Derived level: the ClusterUUID prefix of nvidia.com/gpu.clique, the physical NVLink domain."""

_TOPOGRAPH = "network.topology.nvidia.com/"
_TOPOGRAPH_V1_TIER = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")

PRESETS: dict[str, tuple[Level, ...]] = {
    "topograph": (
        Level(_TOPOGRAPH + "core", "core"),
        Level(_TOPOGRAPH + "datacenter", "datacenter"),
        Level(_TOPOGRAPH + "block", "block"),
        Level(_TOPOGRAPH + "spine", "spine"),
        Level(_TOPOGRAPH + "leaf", "leaf"),
        Level(_TOPOGRAPH + "accelerator", "nvlink"),
    ),
    # Tiers are added from the labels found (tier-0 is closest to the node; no fixed depth).
    "topograph-v1": (
        Level("accelerator.topograph.run/domain", "nvlink"),
        Level("accelerator.topograph.run/sub-domain", "nvlink-sub"),
    ),
    "gke": (
        Level("cloud.google.com/gce-topology-block", "block"),
        Level("cloud.google.com/gce-topology-subblock", "subblock"),
        Level("cloud.google.com/gce-topology-host", "gce-host"),
    ),
    "eks": tuple(Level(f"topology.k8s.aws/network-node-layer-{i}", f"layer-{i}") for i in range(1, 5)),
    "oci": (
        Level("oci.oraclecloud.com/host.network_block_id", "block"),
        Level("oci.oraclecloud.com/host.rack_id", "rack"),
    ),
    "clique": (
        Level(CLIQUE_CLUSTER, "nvlink-rack", prefix_of=CLIQUE),
        Level(CLIQUE, "nvlink"),
    ),
}
NVLINK_KEYS = frozenset({_TOPOGRAPH + "accelerator", "accelerator.topograph.run/domain"})
"""Presets whose own NVLink level makes the clique label redundant."""


def explicit_levels(keys: Sequence[str]) -> LevelChoice:
    """``--levels K1,K2``: keys as given, broadest first; known keys keep their short names."""
    known = {lvl.key: lvl for preset in PRESETS.values() for lvl in preset}
    problems = []
    seen = set()
    levels = []
    for key in keys:
        key = key.strip()
        if not key:
            continue
        if key in seen:
            problems.append(f"level {key} listed twice; kept the first")
            continue
        if key == "kubernetes.io/hostname":
            problems.append("kubernetes.io/hostname is always the narrowest level; not listed again")
            continue
        seen.add(key)
        m = _TOPOGRAPH_V1_TIER.match(key)
        levels.append(known.get(key) or Level(key, f"tier-{m.group(1)}" if m else ""))
    return LevelChoice(tuple(levels), None, tuple(problems))


def detect_levels(nodes: Sequence[NodeFacts]) -> LevelChoice:
    """Pick the levels from the labels nodes carry, with one preset for the switch tree.

    The preset carried by the most nodes wins; nodes that carry another switch-tree preset's
    labels are reported, not merged. ``nvidia.com/gpu.clique`` adds the NVLink levels under
    any switch tree that has none of its own.
    """
    labels = [n.labels for n in nodes]

    def name(i: int) -> str:
        return nodes[i].name or "?"

    carriers: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        for preset in _presets_of(lab):
            carriers.setdefault(preset, []).append(i)
    trees = [p for p in PRESETS if p != "clique" and p in carriers]
    problems: list[str] = []
    if not trees and "clique" not in carriers:
        return LevelChoice((), None, ("no known topology labels on any node; each node is its own domain",))
    primary = max(trees, key=lambda p: len(carriers[p])) if trees else None
    levels: list[Level] = []
    if primary is not None:
        present = {k for lab in labels for k in lab}
        if primary == "topograph-v1":
            tiers = sorted(
                (int(m.group(1)) for k in present if (m := _TOPOGRAPH_V1_TIER.match(k))), reverse=True
            )
            levels += [Level(f"fabric.topograph.run/tier-{t}", f"tier-{t}") for t in tiers]
        levels += [lvl for lvl in PRESETS[primary] if lvl.key in present]
        for other in trees:
            if other != primary:
                idx = carriers[other]
                problems.append(
                    f"{len(idx)} node(s) also carry {other} labels (e.g. {name(idx[0])}); "
                    f"using {primary}; set --levels to choose"
                )
        without = len(labels) - len(carriers[primary])
        if without:
            missing = next(i for i in range(len(labels)) if i not in set(carriers[primary]))
            problems.append(f"{without} node(s) carry no {primary} labels (e.g. {name(missing)})")
    if "clique" in carriers:
        if any(lvl.key in NVLINK_KEYS for lvl in levels):
            problems.append(f"{CLIQUE} ignored: {primary} already names the NVLink domain")
        else:
            levels += PRESETS["clique"]
    return LevelChoice(tuple(levels), primary or "clique", tuple(problems))


class _Scheme:
    """The label presets as the core's ``LabelScheme`` port."""

    def detect(self, nodes: Sequence[NodeFacts]) -> LevelChoice:
        return detect_levels(nodes)

    def schemes_of(self, node: NodeFacts) -> frozenset[str]:
        return frozenset(_presets_of(node.labels))

    def explicit(self, keys: Sequence[str]) -> LevelChoice:
        return explicit_levels(keys)


SCHEME = _Scheme()


def _presets_of(labels: Mapping[str, str]) -> set[str]:
    found = set()
    for key in labels:
        if key.startswith(_TOPOGRAPH):
            found.add("topograph")
        elif _TOPOGRAPH_V1_TIER.match(key) or key.startswith("accelerator.topograph.run/"):
            found.add("topograph-v1")
        elif key.startswith("cloud.google.com/gce-topology-"):
            found.add("gke")
        elif key.startswith("topology.k8s.aws/network-node-layer-"):
            found.add("eks")
        elif key.startswith("oci.oraclecloud.com/host.") and key in (
            "oci.oraclecloud.com/host.network_block_id", "oci.oraclecloud.com/host.rack_id"):
            found.add("oci")
        elif key == CLIQUE:
            found.add("clique")
    return found


# -- nodes -----------------------------------------------------------------------------------


def node_facts(node: Mapping[str, Any], gpu_resource: str) -> NodeFacts:
    meta, spec, status = _d(node, "metadata"), _d(node, "spec"), _d(node, "status")
    ready = True
    for cond in _l(status, "conditions"):
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(_s(t, "key"), _s(t, "value"), _s(t, "effect"))
        for t in _l(spec, "taints")
        if isinstance(t, dict)
    )
    allocatable = _d(status, "allocatable") or _d(status, "capacity")
    return NodeFacts(
        name=_s(meta, "name"),
        labels=_labels(node),
        gpus=max(parse_count(allocatable.get(gpu_resource)), 0),
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
        taints=taints,
    )


def parse_count(value: Any) -> int:
    """An integer resource quantity (``"8"``, ``8``, ``"1k"``); 0 when unreadable."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.isascii():
        return 0
    units = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, mult in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix) and text[: -len(suffix)].isdigit():
            return int(text[: -len(suffix)]) * mult
    return int(text) if text.isdigit() else 0


# -- pods ------------------------------------------------------------------------------------

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
    meta = _d(pod, "metadata")
    ns = _s(meta, "namespace") or "default"
    labels, annotations = _labels(pod), _annotations(pod)
    for key in GROUP_LABELS:
        if labels.get(key):
            return GangRef(f"{ns}/{labels[key]}", True)
    if annotations.get(GROUP_ANNOTATION):
        return GangRef(f"{ns}/{annotations[GROUP_ANNOTATION]}", True)
    group = _s(_d(_d(pod, "spec"), "schedulingGroup"), "podGroupName")
    if group:
        return GangRef(f"{ns}/{group}", True)
    return GangRef(f"{ns}/{_s(meta, 'name')}", False)


def pod_facts(pod: Mapping[str, Any], gpu_resource: str) -> PodFacts:
    meta, spec = _d(pod, "metadata"), _d(pod, "spec")
    annotations = _annotations(pod)
    return PodFacts(
        namespace=_s(meta, "namespace") or "default",
        name=_s(meta, "name"),
        uid=_s(meta, "uid"),
        gang=gang_ref(pod),
        node=_s(spec, "nodeName"),
        phase=_s(_d(pod, "status"), "phase"),
        gpus=pod_gpus(pod, gpu_resource),
        rank=rank(pod),
        tolerations=tolerations(pod),
        declarations=tuple(Declaration(role, key, annotations[key], precedence)
                           for key, role, precedence in DECLARING_ANNOTATIONS if key in annotations),
    )


def pod_gpus(pod: Mapping[str, Any], gpu_resource: str) -> int:
    """The pod's effective GPU request, as Kubernetes computes it.

    max(sum of app containers + restartable init containers (sidecars),
        each plain init container + the sidecars started before it) + overhead.
    A container with only a limit requests its limit (extended resources).
    """
    spec = _d(pod, "spec")

    def req(container: Mapping[str, Any]) -> int:
        res = _d(container, "resources")
        value = _d(res, "requests").get(gpu_resource)
        if value is None:
            value = _d(res, "limits").get(gpu_resource)
        return parse_count(value)

    sidecars = 0
    init_peak = 0
    for c in _l(spec, "initContainers"):
        if not isinstance(c, dict):
            continue
        if c.get("restartPolicy") == "Always":
            sidecars += req(c)
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + req(c))
    app = sum(req(c) for c in _l(spec, "containers") if isinstance(c, dict)) + sidecars
    overhead = parse_count(_d(spec, "overhead").get(gpu_resource))
    return max(max(app, init_peak) + overhead, 0)


def tolerations(pod: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=_s(t, "key"),
            operator=_s(t, "operator") or "Equal",
            value=_s(t, "value"),
            effect=_s(t, "effect"),
        )
        for t in _l(_d(pod, "spec"), "tolerations")
        if isinstance(t, dict)
    )


def rank(pod: Mapping[str, Any]) -> tuple[int, ...] | None:
    labels, annotations = _labels(pod), _annotations(pod)
    for keys in RANKS:
        values = [labels.get(k, annotations.get(k)) for k in keys]
        if all(v is not None and v.isascii() and v.isdigit() and len(v) <= 9 for v in values):
            return tuple(int(v) for v in values)
    return None


# -- pod groups ------------------------------------------------------------------------------


def podgroup_facts(pg: Mapping[str, Any]) -> GroupFacts:
    """A ``scheduling.x-k8s.io/v1alpha1`` PodGroup (scheduler-plugins coscheduling)."""
    meta, spec = _d(pg, "metadata"), _d(pg, "spec")
    key = f"{_s(meta, 'namespace') or 'default'}/{_s(meta, 'name')}"
    declared = []
    if spec.get("minMember") is not None:
        declared.append(Declaration(MIN_MEMBER, f"PodGroup {key} spec.minMember", spec["minMember"], 1))
    if spec.get("scheduleTimeoutSeconds") is not None:
        declared.append(Declaration(TIMEOUT, f"PodGroup {key} spec.scheduleTimeoutSeconds",
                                    spec["scheduleTimeoutSeconds"], 1))
    return GroupFacts(key, tuple(declared))


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


# -- defensive accessors: objects from files or the wire may have any shape ------------------


def _d(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def _l(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def _s(obj: Any, key: str, default: str = "") -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else default


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return {k: v for k, v in _d(_d(obj, "metadata"), "labels").items() if isinstance(v, str)}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return {k: v for k, v in _d(_d(obj, "metadata"), "annotations").items() if isinstance(v, str)}

