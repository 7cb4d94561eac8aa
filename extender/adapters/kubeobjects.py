"""The one place that knows Kubernetes object shapes, label keys and annotations.

Translates Nodes, Pods and PodGroups (raw JSON dicts, camelCase, as the API server sends them)
into the core's facts. Never raises on odd input: a value it cannot read is reported as a
problem of the gang or of the topology, with the offending value quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from extender.core.model import (
    GangSpec,
    Level,
    Member,
    NodeFacts,
    PodUsage,
    Taint,
    Toleration,
)

GPU_RESOURCE = "nvidia.com/gpu"

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
        Level(CLIQUE_CLUSTER, "nvlink-rack"),
        Level(CLIQUE, "nvlink"),
    ),
}
NVLINK_KEYS = frozenset({_TOPOGRAPH + "accelerator", "accelerator.topograph.run/domain"})
"""Presets whose own NVLink level makes the clique label redundant."""


@dataclass(frozen=True)
class LevelChoice:
    levels: tuple[Level, ...]
    preset: str | None
    problems: tuple[str, ...] = ()


def explicit_levels(keys: Sequence[str]) -> LevelChoice:
    """``--levels K1,K2``: keys as given, broadest first; known keys keep their short names."""
    names = {lvl.key: lvl.name for preset in PRESETS.values() for lvl in preset}
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
        levels.append(Level(key, names.get(key, f"tier-{m.group(1)}" if m else "")))
    return LevelChoice(tuple(levels), None, tuple(problems))


def detect_levels(nodes: Iterable[Mapping[str, Any]]) -> LevelChoice:
    """Pick the levels from the labels nodes carry, with one preset for the switch tree.

    The preset carried by the most nodes wins; nodes that carry another switch-tree preset's
    labels are reported, not merged. ``nvidia.com/gpu.clique`` adds the NVLink levels under
    any switch tree that has none of its own.
    """
    nodes = list(nodes)
    labels = [_labels(n) for n in nodes]
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
                    f"{len(idx)} node(s) also carry {other} labels (e.g. {_name(list(nodes_at(nodes, idx[:1])))}); "
                    f"using {primary}; set --levels to choose"
                )
        without = len(labels) - len(carriers[primary])
        if without:
            missing = next(i for i in range(len(labels)) if i not in set(carriers[primary]))
            problems.append(
                f"{without} node(s) carry no {primary} labels (e.g. {_name(list(nodes_at(nodes, [missing])))})"
            )
    if "clique" in carriers:
        if any(lvl.key in NVLINK_KEYS for lvl in levels):
            problems.append(f"{CLIQUE} ignored: {primary} already names the NVLink domain")
        else:
            levels += PRESETS["clique"]
    return LevelChoice(tuple(levels), primary or "clique", tuple(problems))


def nodes_at(nodes: Iterable[Mapping[str, Any]], idx: Sequence[int]) -> Iterable[Mapping[str, Any]]:
    wanted = set(idx)
    return (n for i, n in enumerate(nodes) if i in wanted)


def presets_of(node: Mapping[str, Any]) -> frozenset[str]:
    """The label presets a node carries labels of."""
    return frozenset(_presets_of(_labels(node)))


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


def node_facts(node: Mapping[str, Any], levels: Sequence[Level], gpu_resource: str = GPU_RESOURCE) -> NodeFacts:
    meta, spec, status = _d(node, "metadata"), _d(node, "spec"), _d(node, "status")
    labels = _labels(node)
    path = tuple(_level_value(labels, lvl.key) for lvl in levels)
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
        path=path,
        gpus=max(parse_count(allocatable.get(gpu_resource)), 0),
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
        taints=taints,
    )


def _level_value(labels: Mapping[str, str], key: str) -> str | None:
    if key == CLIQUE_CLUSTER:
        value = labels.get(CLIQUE)
        return value.split(".", 1)[0] if value else None
    value = labels.get(key)
    return value if value else None


def parse_count(value: Any) -> int:
    """An integer resource quantity (``"8"``, ``8``, ``"1k"``); 0 when unreadable."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    text = str(value).strip()
    units = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, mult in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix) and text[: -len(suffix)].isdigit():
            return int(text[: -len(suffix)]) * mult
    return int(text) if text.isdigit() else 0


# -- pods ------------------------------------------------------------------------------------

GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "kueue.x-k8s.io/pod-group-name")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
MIN_MEMBER = "railyard.io/min-member"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
TIMEOUT = "railyard.io/timeout-seconds"
REQUIRED = ("railyard.io/required-topology", "kueue.x-k8s.io/podset-required-topology")
PREFERRED = ("railyard.io/preferred-topology", "kueue.x-k8s.io/podset-preferred-topology")
RANKS = (
    ("jobset.sigs.k8s.io/job-index", "batch.kubernetes.io/job-completion-index"),
    ("batch.kubernetes.io/job-completion-index",),
    ("training.kubeflow.org/replica-index",),
    ("leaderworkerset.sigs.k8s.io/worker-index",),
    ("kueue.x-k8s.io/pod-group-pod-index",),
)
"""Rank sources, first match wins; a JobSet pod's rank is (job index, completion index)."""
DEFAULT_TIMEOUT = 60.0


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = _d(pod, "metadata")
    return f"{_s(meta, 'namespace') or 'default'}/{_s(meta, 'name')}"


def group_key(pod: Mapping[str, Any]) -> tuple[str, bool]:
    """(gang key, named): ``<ns>/<group>``, or ``<ns>/<pod>`` for a pod that names no group."""
    ns = _s(_d(pod, "metadata"), "namespace") or "default"
    labels, annotations = _labels(pod), _annotations(pod)
    for key in GROUP_LABELS:
        if labels.get(key):
            return f"{ns}/{labels[key]}", True
    if annotations.get(GROUP_ANNOTATION):
        return f"{ns}/{annotations[GROUP_ANNOTATION]}", True
    group = _s(_d(_d(pod, "spec"), "schedulingGroup"), "podGroupName")
    if group:
        return f"{ns}/{group}", True
    return pod_key(pod), False


def pod_gpus(pod: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE) -> int:
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
    return max(app, init_peak) + overhead


def pod_phase(pod: Mapping[str, Any]) -> str:
    return _s(_d(pod, "status"), "phase")


def pod_node(pod: Mapping[str, Any]) -> str:
    return _s(_d(pod, "spec"), "nodeName")


def is_sized(pods: Sequence[Mapping[str, Any]], pg: "PodGroupFacts | None") -> bool:
    """Whether the gang states its size (else it is the members seen, and may grow)."""
    if pg is not None and pg.min_member is not None:
        return True
    return any(MIN_MEMBER in _annotations(p) or KUEUE_TOTAL in _annotations(p) for p in pods)


def pod_usage(pod: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE) -> PodUsage | None:
    """The GPUs a pod holds on its node, or None if it holds none."""
    node = _s(_d(pod, "spec"), "nodeName")
    phase = _s(_d(pod, "status"), "phase")
    if not node or phase in ("Succeeded", "Failed"):
        return None
    gpus = pod_gpus(pod, gpu_resource)
    if gpus <= 0:
        return None
    uid = _s(_d(pod, "metadata"), "uid") or pod_key(pod)
    return PodUsage(uid=uid, node=node, gpus=gpus)


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
        if all(v is not None and str(v).isdigit() for v in values):
            return tuple(int(v) for v in values)
    return None


@dataclass(frozen=True)
class PodGroupFacts:
    """A ``scheduling.x-k8s.io/v1alpha1`` PodGroup."""

    key: str
    min_member: Any = None
    timeout_seconds: Any = None


def podgroup_facts(pg: Mapping[str, Any]) -> PodGroupFacts:
    meta, spec = _d(pg, "metadata"), _d(pg, "spec")
    return PodGroupFacts(
        key=f"{_s(meta, 'namespace') or 'default'}/{_s(meta, 'name')}",
        min_member=spec.get("minMember"),
        timeout_seconds=spec.get("scheduleTimeoutSeconds"),
    )


@dataclass
class _Setting:
    """A gang-level value read from members' annotations; disagreement is a problem."""

    source: str
    values: dict[str, str] = field(default_factory=dict)  # value -> first pod carrying it


def gang_spec(
    key: str,
    pods: Sequence[Mapping[str, Any]],
    podgroups: Mapping[str, PodGroupFacts] | None = None,
    gpu_resource: str = GPU_RESOURCE,
    default_timeout: float = DEFAULT_TIMEOUT,
) -> GangSpec:
    """Build a gang from its member pods (in order of first appearance) and its PodGroup.

    Precedence, first found wins:
      minMember: annotation railyard.io/min-member > PodGroup spec.minMember >
                 annotation kueue.x-k8s.io/pod-group-total-count > the members seen.
      timeout:   annotation railyard.io/timeout-seconds > PodGroup spec.scheduleTimeoutSeconds > 60 s.
      required:  railyard.io/required-topology > kueue.x-k8s.io/podset-required-topology.
      preferred: railyard.io/preferred-topology > kueue.x-k8s.io/podset-preferred-topology.
    """
    problems: list[str] = []
    annotations = [_annotations(p) for p in pods]

    def setting(*names: str) -> tuple[str, str] | None:
        for name in names:
            seen: dict[str, str] = {}
            for pod, ann in zip(pods, annotations):
                if name in ann:
                    seen.setdefault(str(ann[name]), pod_key(pod))
            if len(seen) > 1:
                (v1, p1), (v2, p2) = list(seen.items())[:2]
                problems.append(f"members disagree on {name}: {v1!r} ({p1}) vs {v2!r} ({p2})")
            if seen:
                return name, next(iter(seen))
        return None

    pg = (podgroups or {}).get(key)
    members = tuple(
        Member(pod_key(p), pod_gpus(p, gpu_resource), rank(p), tolerations(p)) for p in pods
    )

    min_member = len(members)
    found = setting(MIN_MEMBER)
    if found:
        min_member = _positive_int(found[1], found[0], problems, default=len(members))
    elif pg is not None and pg.min_member is not None:
        min_member = _positive_int(pg.min_member, f"PodGroup {key} spec.minMember", problems, len(members))
    else:
        found = setting(KUEUE_TOTAL)
        if found:
            min_member = _positive_int(found[1], found[0], problems, default=len(members))

    timeout = default_timeout
    found = setting(TIMEOUT)
    if found:
        timeout = float(_positive_int(found[1], found[0], problems, default=int(default_timeout)))
    elif pg is not None and pg.timeout_seconds is not None:
        timeout = float(_positive_int(pg.timeout_seconds, f"PodGroup {key} spec.scheduleTimeoutSeconds",
                                      problems, int(default_timeout)))

    required = setting(*REQUIRED)
    preferred = setting(*PREFERRED)
    if len(members) > min_member:
        problems.append(f"{len(members)} members but min-member is {min_member}")
    return GangSpec(
        key=key,
        members=members,
        min_member=min_member,
        timeout_seconds=timeout,
        required=required[1].strip() if required else None,
        preferred=preferred[1].strip() if preferred else None,
        invalid=tuple(problems),
    )


def _positive_int(value: Any, source: str, problems: list[str], default: int) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) <= 0:
        problems.append(f"{source} must be a positive integer, got {value!r}")
        return default
    return int(text)


def group_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Pods by gang key, gangs in order of first appearance."""
    gangs: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        gangs.setdefault(group_key(pod)[0], []).append(pod)
    return gangs


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


def _name(objs: list[Mapping[str, Any]]) -> str:
    return _s(_d(objs[0], "metadata"), "name", "?") if objs else "?"
